"""The scale of the fault tests: normal in ``make test``, soak in ``make soak``.

A test with a soak variant is marked ``@pytest.mark.soak`` and takes its sizes from
:func:`scaled`. ``make test`` runs it at the normal scale; ``make soak`` runs only the marked
tests, with ``ZEPS_SOAK=1``, at the soak scale (e.g. 100 crash cycles instead of 20, 10^6 hostile
frames instead of 10^5).
"""
from __future__ import annotations

import os

#: True under ``make soak`` (``ZEPS_SOAK=1``).
SOAK = os.environ.get("ZEPS_SOAK", "") not in ("", "0")


def scaled(normal, soak):
    """``soak`` under ``make soak``, else ``normal``."""
    return soak if SOAK else normal
