"""The client SDK's defaults, in a leaf module: the pure parts, both shells, multicast and the
command line take them from here without loading a shell (zmq, gevent)."""
from __future__ import annotations

from ..units import DEFAULT_ENDPOINT

__all__ = ["DEFAULT_ENDPOINT", "DEFAULT_CREDIT_WINDOW", "DEFAULT_HEARTBEAT"]

#: Default credit window: 8 MiB of deliveries in flight.
DEFAULT_CREDIT_WINDOW = 8 << 20
#: Default idle time (s) after which the client checks the peering: the broker's default
#: expiry (60 s) divided by 3, as docs/protocol.md asks.
DEFAULT_HEARTBEAT = 20.0

# Tuning both shells share:
#: While publishing flat out, look at what came back (CONFIRM, INVALID, monitor events) at most
#: this often (s): two getsockopt calls cost more than the send itself.
LOOK_INTERVAL = 0.002
#: While publishes queue behind a busy socket, how often a publish asks whether the socket would
#: take the queued batch now (seconds), and the queue length at which it asks anyway: the
#: blocking client's (``WRITABLE_QUEUE``; 256 and 0.5 ms made ``publish()`` with confirms 1.15-1.3x
#: as fast as 64 and 0.2 ms, with batches of ~200 instead of ~64, issue 20) and the
#: AsyncClient's (``WRITABLE_BATCH``).
WRITABLE_LOOK = 0.0005
#: A blocking client's publish coming more than this long (s) after the previous one asks the
#: socket at once whether it takes what waits, and checks a refusal with ZMQ_EVENTS before
#: queueing its frame (``Connection.send_or_queue``): a paced publisher (10k msg/s: 100 us
#: apart) has nothing to batch, and each message leaves at once or by the next call. A faster
#: loop keeps queueing behind a busy socket, to leave in batches.
SLOW_PUBLISH = 0.00002
WRITABLE_QUEUE = 256
WRITABLE_BATCH = 64
