"""Every benchmark runs and reports (tiny counts): ``make bench`` must not rot between runs.

The figures themselves are measured by ``make bench``, never asserted here."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["bench_codec", "bench_journal", "bench_broker", "bench_client",
                                  "bench_latency"])
def test_benchmark_runs_and_reports_a_table(name, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--only", name],
                          cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures = [line for line in proc.stdout.splitlines()
               if re.search(r"\|\s*[\d,.]+\s*\|", line) or re.search(r"\d[\d,.]*\s*\w+/s\b", line)]
    assert figures, "no figure in the output:\n" + proc.stdout[-3000:]
    assert f"=== {name}: exit 0" in proc.stdout
