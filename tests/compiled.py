"""The optional C modules for the tests that hold them to their Python loops.

:func:`batchc` imports ``zeps.protocol._batchc`` itself (also under ``ZEPS_PURE_PYTHON=1``, which
only says that zeps does not use it). Where it is not built, a test module fails if a C compiler
is here (the install should have built it) and is skipped only on a machine without one.
"""
from __future__ import annotations

import shutil

import pytest


def batchc():
    try:
        from zeps.protocol import _batchc
    except ImportError:
        _batchc = None
    if _batchc is None:
        if shutil.which("cc") or shutil.which("gcc"):
            pytest.fail("a C compiler is here but zeps.protocol._batchc is not built: reinstall "
                        "(pip install -e .) and read setup.py's message", pytrace=False)
        pytest.skip("no C compiler on this machine: zeps runs on its pure-Python loops",
                    allow_module_level=True)
    return _batchc
