"""The optional C loops of the columnar journal reader, or ``None``: ``journalc`` is
:mod:`zeps.journal._journalc` (built from ``_journalc.c`` by ``setup.py`` when a C compiler and
the Python headers are present).

Each of its functions mirrors a numpy loop that stays the definition and the fallback: the walk
(:func:`zeps.journal.walk.walk`), the record kinds, the checks and fields of a run of plain
records (:class:`zeps.journal.plainrun._Block`), the CRC check
(:func:`zeps.journal.blockcrc.first_bad_crc`) and the compaction of keys and bodies
(:func:`zeps.journal.columnar._compact`), and all of these fused into one pass for a block's
leading run of plain and batch records without extensions (``fused_columns``, which checks a
batch record as :class:`zeps.journal.batchcols.BatchRun` does). ``tests/test_journalc.py``
checks the two against each other for any block. ``ZEPS_PURE_PYTHON=1`` in the environment
(read once, at import) makes zeps use the numpy loops even where the extension is built.
"""
from __future__ import annotations

import os

journalc = None
if os.environ.get("ZEPS_PURE_PYTHON") != "1":
    try:
        from . import _journalc as journalc
    except ImportError:          # not built: no compiler, or ZEPS_PURE_PYTHON=1 at install
        journalc = None

#: True when the C loops are in use.
C_LOOPS = journalc is not None
