"""The README's Spark snippet, run as written, in a fresh ``python`` with no ``PYSPARK_PYTHON``.

A new user runs ``.venv/bin/python`` from a source checkout without activating the venv and
without ``PYSPARK_PYTHON``: Spark then starts its Python workers with ``python3`` from ``PATH``,
another interpreter, that has no ``zeps`` (issue 17 item 4: ``ModuleNotFoundError: No module
named 'zeps'`` in every task). ``make test`` and the ``spark`` fixture of tests/test_spark.py set
``PYSPARK_PYTHON``; this test removes it and puts first on ``PATH`` a ``python3`` that cannot
import zeps (the base interpreter with ``-S``: no site-packages), so the workers' default is
what the user had. The snippet is taken from README.md, so the test follows the doc; only its
broker address is replaced by the test broker's (a free port, not the fixed 7470).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("pyspark")

from .conftest import REPO  # noqa: E402

pytestmark = pytest.mark.spark

README_ENDPOINT = "tcp://127.0.0.1:7470"

PRELUDE = """\
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("zeps-readme")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
"""
EPILOGUE = """
import json as _json
print("ROWS " + _json.dumps(sorted([r.key, r.body.decode()] for r in df.select("key", "body").collect())))
"""


def readme_spark_snippet() -> str:
    text = (REPO / "README.md").read_text()
    at = text.index("**Spark.**")
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, at)
    assert m, "README.md: no python block after **Spark.**"
    return m.group(1)


def _python3_without_zeps(bin_dir) -> str:
    """A ``python3`` for PATH that is not this venv's: the base interpreter without site-packages."""
    bin_dir.mkdir()
    exe = bin_dir / "python3"
    base = getattr(sys, "_base_executable", None) or sys.executable
    exe.write_text(f'#!/bin/sh\nexec "{base}" -S "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def test_readme_snippet_as_written_without_pyspark_python(start_broker, tmp_path):
    snippet = readme_spark_snippet()
    assert "register(spark)" in snippet and README_ENDPOINT in snippet
    work = tmp_path / "work"
    work.mkdir()
    b = start_broker(work / "zeps-data")           # the snippet reads "./zeps-data"
    from zeps.clients import Client
    items = [("eu.fr", b"a"), ("us.ny", b"b"), ("eu.de", b"c"), ("apac.sg", b"d"), ("eu.fr", b"e")]
    with Client(b.endpoint, "orders", confirms=True) as c:
        c.publish_batch(items)
        c.wait_for_confirms(timeout=30)
    eu = sorted([k, v.decode()] for k, v in items if k.startswith("eu."))

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    fake = _python3_without_zeps(tmp_path / "bin")
    env["PATH"] = str(tmp_path / "bin") + os.pathsep + env.get("PATH", "")
    # The premise: the workers' default interpreter cannot import zeps.
    pre = subprocess.run(["python3", "-c", "import zeps"], env=env, cwd=work,
                         capture_output=True, text=True)
    assert pre.returncode != 0 and "No module named 'zeps'" in pre.stderr, (fake, pre.stderr)

    script = work / "readme_spark.py"
    script.write_text(PRELUDE + snippet.replace(README_ENDPOINT, b.endpoint) + EPILOGUE)
    r = subprocess.run([sys.executable, str(script)], env=env, cwd=work, capture_output=True,
                       text=True, timeout=300)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    rows = [line for line in r.stdout.splitlines() if line.startswith("ROWS ")]
    assert rows and json.loads(rows[-1][5:]) == eu, tail

    got = []
    with Client(b.endpoint, "copy") as c:          # what the snippet's write published
        sub = c.subscribe("", from_seq=1)
        while len(got) < len(eu):
            m = sub.poll(10)
            if m is None:
                break
            got.append((m.key, m.body))
        assert sub.poll(0.3) is None
    assert Counter(got) == Counter((k, v.encode()) for k, v in eu)


def test_register_names_what_to_set_for_a_pyspark_python_without_zeps(tmp_path, monkeypatch):
    """PYSPARK_PYTHON chosen by the user, on a local master, that cannot import zeps: the error
    comes from register(spark) and says exactly what to set."""
    monkeypatch.chdir(tmp_path)          # local workers start in the driver's directory
    from zeps.spark import ZepsSparkError
    from zeps.spark.workers import worker_python
    fake = _python3_without_zeps(tmp_path / "bin")
    with pytest.raises(ZepsSparkError) as ei:
        worker_python(fake, "local[2]", env_set=True)
    msg = str(ei.value)
    assert msg.startswith(f"zeps: Spark's Python workers run {fake!r} (PYSPARK_PYTHON)"), msg
    assert "cannot import zeps" in msg and f"Set PYSPARK_PYTHON={sys.executable} " in msg, msg
    # the driver's own interpreter, chosen or by default, and any cluster master pass as they are
    assert worker_python(sys.executable, "local[2]", env_set=True) == sys.executable
    assert worker_python("python3", "local[*]", env_set=False) == sys.executable
    assert worker_python(fake, "spark://h:7077", env_set=True) == fake
