"""``python -m zeps.broker``: the same as ``zeps broker``."""
import sys

from zeps.cli.broker import main

sys.exit(main())
