"""Only the optional C extension lives here; everything else is in setup.cfg.

``zeps.protocol._batchc`` (the per-entry loops of the batch layout, issue 20),
``zeps.journal._journalc`` (the columnar journal reader's per-record loops) and
``zeps.broker._sockc`` (the broker shell's socket loops; no libzmq header needed) are built
when a C compiler and the Python headers are present, as on the machines ``make`` targets. When
a build fails, the install goes on without it and zeps uses the pure-Python loops it mirrors
(``zeps.protocol.batch``, ``zeps.journal.columnar``, ``zeps.broker.sockio``);
``ZEPS_PURE_PYTHON=1`` skips the build.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the C loops are a speed-up, never a need."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any compiler or header problem
            self._skip(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._skip(e)

    @staticmethod
    def _skip(e):
        print(f"zeps: the optional C extension was not built ({e}); using pure Python",
              file=sys.stderr)


ext_modules = []
if os.environ.get("ZEPS_PURE_PYTHON") != "1":
    ext_modules.append(Extension("zeps.protocol._batchc", ["zeps/protocol/_batchc.c"],
                                 extra_compile_args=["-O2"]))
    ext_modules.append(Extension("zeps.journal._journalc", ["zeps/journal/_journalc.c"],
                                 extra_compile_args=["-O2"]))
    ext_modules.append(Extension("zeps.broker._sockc", ["zeps/broker/_sockc.c"],
                                 extra_compile_args=["-O2"]))

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
