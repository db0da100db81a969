"""ZEPS/1 wire protocol: command values and the pure codec (no sockets)."""
from .commands import *  # noqa: F401,F403
from .commands import ALL_COMMANDS, BY_ID, BY_NAME, LATEST_FIRST, LATEST_LIVE, deliver_cost  # noqa: F401
from .codec import (ProtocolError, decode, decode_publish, deliver_sequence, encode,  # noqa: F401
                    deliver_ts_from_deliver, encode_deliver, encode_invalid, encode_publish, SIGNATURE)
