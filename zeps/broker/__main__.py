"""``python -m zeps.broker``: the same as ``zeps broker``."""
import sys

from .server import main

sys.exit(main())
