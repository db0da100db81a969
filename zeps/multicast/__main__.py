"""``python -m zeps.multicast bridge ...`` and ``python -m zeps.multicast subscribe ...``.

The same commands as ``zeps bridge multicast`` and ``zeps subscribe --multicast``, written in
:mod:`zeps.cli.multicast` (an entry point may import the command line, the floor above every
other: see .importlinter).
"""
import sys

from zeps.cli.multicast import main

sys.exit(main())
