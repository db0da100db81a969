"""The Makefile is the project's front door (`make run`, `make test`, `.ci/run`): every target must
parse. A merge that leaves conflict markers in it breaks CI before a single test runs."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"


def test_makefile_has_no_conflict_markers():
    text = MAKEFILE.read_text()
    bad = [n for n, line in enumerate(text.splitlines(), 1)
           if re.match(r"^(<{7}|={7}$|>{7})", line)]
    assert bad == [], f"merge conflict markers in the Makefile at lines {bad}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed on this machine")
def test_every_phony_target_parses():
    phony = re.search(r"^\.PHONY:(.*)$", MAKEFILE.read_text(), re.M).group(1).split()
    assert {"run", "test"} <= set(phony)
    for target in phony:
        # -n prints the recipe without running it; a syntax error anywhere in the file fails here.
        out = subprocess.run(["make", "-n", "-C", str(ROOT), target],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"make -n {target}: {out.stderr.strip()}"
