"""Which Python interpreter Spark's Python workers run for the ``zeps`` data source.

PySpark runs a Python data source's code (planning, reading, writing) in Python *worker*
processes, started with the interpreter the SparkContext recorded when it started
(``sc.pythonExec``): ``$PYSPARK_PYTHON``, or ``python3`` from ``PATH`` when it is unset. The data
source is pickled by reference to the ``zeps.spark`` module, so that interpreter must import
``zeps`` (and pyarrow, pandas, pyzmq). Started from a virtualenv's python without
``PYSPARK_PYTHON`` (``.venv/bin/python`` in a source checkout, the README's snippet), ``python3``
on ``PATH`` is another interpreter, and every task failed with ``ModuleNotFoundError: No module
named 'zeps'`` in the workers.

PySpark takes the interpreter of a data source from ``sc.pythonExec`` when the source is
registered, so :func:`worker_python` decides it once, in ``register(spark)``, for the ``zeps``
data source only (the session's other Python code keeps its interpreter):

* ``PYSPARK_PYTHON`` unset, local master: the driver's own interpreter (``sys.executable``),
  which imports zeps since it is running this code. Local workers run on this machine, and
  Spark also wants their Python version to be the driver's.
* ``PYSPARK_PYTHON`` set, local master: that interpreter, after checking that it finds the
  modules the workers import; if it does not, :class:`ZepsSparkError` names it, what it lacks and
  exactly what to set — at the ``register(spark)`` line, not in a task's traceback.
* Any other master (a cluster): the session's, unchecked: the executors' interpreters are on
  other machines (docs/spark.md, "On a cluster").
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

from .options import ZepsSparkError

__all__ = ["worker_python", "PYSPARK_DEFAULT", "WORKER_MODULES"]

log = logging.getLogger("zeps.spark")

#: What PySpark runs when PYSPARK_PYTHON is unset (pyspark/core/context.py).
PYSPARK_DEFAULT = "python3"
#: The modules a worker imports to run the zeps data source (pyspark itself comes from the
#: pyspark.zip Spark puts on the workers' PYTHONPATH).
WORKER_MODULES = ("zeps", "pyarrow", "pandas", "zmq", "msgpack")

_PROBE = ("import importlib.util as u, sys\n"
          "print('%d.%d' % sys.version_info[:2])\n"
          "print(' '.join(n for n in sys.argv[1:] if u.find_spec(n) is None))\n")


def _probe(exe: str, timeout: float = 30.0) -> Tuple[Optional[str], List[str], str]:
    """(Python version, missing modules, error) of the interpreter ``exe``, run as a worker is
    (same environment and working directory)."""
    try:
        r = subprocess.run([exe, "-c", _PROBE, *WORKER_MODULES], capture_output=True,
                           text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return None, [], f"cannot run it ({e})"
    lines = r.stdout.splitlines()
    if r.returncode != 0 or not lines:
        return None, [], f"it exits with status {r.returncode}: {r.stderr.strip()[-300:]}"
    return lines[0], (lines[1].split() if len(lines) > 1 else []), ""


def _same_file(a: str, b: str) -> bool:
    # Not realpath: a virtualenv's python is a symlink to its base interpreter, but runs with
    # other site-packages.
    found = shutil.which(a)
    return found is not None and os.path.abspath(found) == os.path.abspath(b)


def worker_python(configured: str, master: str, *, env_set: bool,
                  driver: str = sys.executable) -> str:
    """The interpreter to register the zeps data source with. ``configured`` is the session's
    ``sc.pythonExec``, ``env_set`` whether ``PYSPARK_PYTHON`` chose it, ``master`` the session's
    master URL. Raises :class:`ZepsSparkError` for a chosen local interpreter that cannot run
    the data source."""
    if not master.startswith("local"):
        return configured
    if not env_set and configured == PYSPARK_DEFAULT:
        if not _same_file(configured, driver):
            log.info("zeps: PYSPARK_PYTHON is unset: the zeps data source's Spark workers run "
                     "this interpreter, %s (not %r from PATH)", driver, configured)
        return driver
    if _same_file(configured, driver):
        return configured
    version, missing, error = _probe(configured)
    mine = "%d.%d" % sys.version_info[:2]
    if error:
        problem = error
    elif version != mine:
        problem = f"it is Python {version} and this driver is Python {mine}"
    elif missing:
        problem = f"it cannot import {', '.join(missing)}"
    else:
        return configured
    raise ZepsSparkError(
        f"Spark's Python workers run {configured!r} (PYSPARK_PYTHON), and {problem}: the zeps "
        f"data source cannot run there. Set PYSPARK_PYTHON={driver} (this interpreter) before "
        f"the SparkSession starts, or leave it unset, or install zeps with its spark extra into "
        f"{configured!r} (docs/spark.md)")
