"""``python -m zeps``: the ``zeps`` command line (see :mod:`zeps.cli`)."""
import sys

from zeps.cli import main

sys.exit(main())
