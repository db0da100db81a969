"""The optional C loops, or ``None``: ``batchc`` is :mod:`zeps.protocol._batchc` (built from
``_batchc.c`` by ``setup.py`` when a C compiler and the Python headers are present).

Each of its functions mirrors a pure-Python loop that stays the definition and the fallback:
:func:`zeps.protocol.batch.walk`, :func:`zeps.clients.message.build_messages`, the
``keys``/``bodies`` columns of :class:`zeps.clients.message.MessageBatch` and the frames of
``publish_batch`` (``publish_frame``: one PUBLISH-BATCH or PUBLISH per call, no Python work per
message, for :func:`zeps.clients.batching.batch_frames`, defined by ``batch_frames_py``).
``tests/test_batchc.py`` and ``tests/test_batchc_frames.py`` check the two against each other
for any input. ``ZEPS_PURE_PYTHON=1`` in the environment
(read once, at import) makes zeps use the Python loops even where the extension is built.
"""
from __future__ import annotations

import os

batchc = None
if os.environ.get("ZEPS_PURE_PYTHON") != "1":
    try:
        from . import _batchc as batchc
    except ImportError:          # not built: no compiler, or ZEPS_PURE_PYTHON=1 at install
        batchc = None

#: True when the C loops are in use (``zeps --version`` style reports and the benchmarks say it).
C_LOOPS = batchc is not None
