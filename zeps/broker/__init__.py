"""The ZEPS broker: pure core (session.py, stream.py, core.py) and the gevent I/O shell (server.py)."""
from .core import BrokerCore, CoreConfig  # noqa: F401
from .session import ProtocolViolation, Session  # noqa: F401
from .stream import Stream  # noqa: F401
