"""How many examples a property test draws: all of them in ``make test``, a quarter in
``make check``.

``make check`` is the fast loop, run after every change; ``make test`` (and CI) is the whole
suite. A property test names its full count with :func:`examples` (``@settings(max_examples=
examples(300))``), and a test that names none takes Hypothesis's default, 100, through the
profile that ``tests/conftest.py`` loads. ``ZEPS_EXAMPLES`` scales both: ``make check`` sets it to
0.25, so each property runs a quarter of its examples (at least :data:`FLOOR`), and the full
count runs in ``make test``. Only the count changes: the strategies, and so the cases a property
can reach, are the same.
"""
from __future__ import annotations

import os

#: The fewest examples a scaled property draws.
FLOOR = 10


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"ZEPS_EXAMPLES must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"ZEPS_EXAMPLES must be a number in (0, 1], got {text!r}")
    return value


#: The share of each property's examples drawn in this run (``ZEPS_EXAMPLES``; 1 if unset).
SCALE = _scale(os.environ.get("ZEPS_EXAMPLES") or "1")


def examples(full: int, scale: float = SCALE) -> int:
    """``full`` in the whole suite; ``full × scale`` (at least :data:`FLOOR`, at most ``full``)
    in a scaled run."""
    return min(full, max(FLOOR, round(full * scale)))
