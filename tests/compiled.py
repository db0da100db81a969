"""The optional C modules for the tests that hold them to their Python loops.

:func:`c_module` imports one itself (also under ``ZEPS_PURE_PYTHON=1``, which only says that zeps
does not use it). Where it is not built, a test module fails if a C compiler is here (the install
should have built it) and is skipped only on a machine without one.
"""
from __future__ import annotations

import gc
import importlib
import os
import shutil

import pytest


def c_module(name: str, fallback: str, *, pure_python_skip: str = ""):
    """The module ``name`` (``zeps.protocol._batchc``...); ``fallback`` names the loops zeps
    runs without it; ``pure_python_skip``: the reason to skip under ``ZEPS_PURE_PYTHON=1``
    (none: the module is tested there too)."""
    if pure_python_skip and os.environ.get("ZEPS_PURE_PYTHON") == "1":
        pytest.skip(f"ZEPS_PURE_PYTHON=1: {pure_python_skip}", allow_module_level=True)
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    if shutil.which("cc") or shutil.which("gcc"):
        pytest.fail(f"a C compiler is here but {name} is not built: reinstall "
                    "(pip install -e .) and read setup.py's message", pytrace=False)
    pytest.skip(f"no C compiler on this machine: zeps runs on its {fallback}",
                allow_module_level=True)


def batchc():
    return c_module("zeps.protocol._batchc", "pure-Python loops")


def each_allocation_failing(calls: dict, attempts: int) -> None:
    """Each of ``calls`` (name -> a call of a C function) with its k-th allocation failing, for
    k up to ``attempts``: it raises MemoryError or returns what it returns with none failing
    (a wrong result, a SystemError or a crash is a bug of its error paths). Needs CPython's
    ``_testcapi`` (the caller skips without it)."""
    testcapi = pytest.importorskip("_testcapi")
    for name, call in calls.items():
        want = call()
        gc.collect()
        for k in range(attempts):
            gc.disable()
            testcapi.set_nomemory(k, k + 1)
            try:
                got = call()
            except MemoryError:
                got = MemoryError
            finally:
                testcapi.remove_mem_hooks()
                gc.enable()
            assert got is MemoryError or got == want, (name, k)
