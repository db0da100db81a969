"""A module of the package, or of the benchmarks, is at most 600 lines, or its docstring says
why it is longer (a reader should find each concept in the file named after it; issue 16)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIMIT = 600
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tree", ["zeps", "bench"])
def test_no_module_is_over_600_lines_without_a_note_saying_why(tree):
    over = []
    for path in sorted((REPO / tree).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if f"over {LIMIT} lines" not in doc:
            over.append(f"{path.relative_to(REPO)}: {lines} lines")
    assert not over, "split these, or say in the module docstring why it is over 600 lines: " \
        + ", ".join(over)
