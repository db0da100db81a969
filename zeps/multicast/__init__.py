"""Multicast output: live messages of a stream to many receivers over IP multicast.

* :class:`Bridge` (``zeps bridge multicast``) is a broker client that sends each message it
  receives as part of a UDP datagram (format: :mod:`zeps.multicast.datagram`,
  docs/protocol.md "Multicast") and announces its head periodically.
* :class:`MulticastSubscriber` (also ``zeps.clients.MulticastSubscriber``) joins the group and
  hands the application one ordered stream, fetching history, lost messages and everything
  during heavy loss from the broker.

Both are thin I/O shells over pure cores: :class:`~zeps.multicast.sender.Sender` and
:class:`~zeps.multicast.receiver.Receiver` (sans-I/O, time passed in), with the loss meter in
:mod:`zeps.multicast.loss` and the sockets in :mod:`zeps.multicast.transport`.
"""
from .bridge import Bridge, BridgeError
from .receiver import FALLBACK, MULTICAST, Receiver, ReceiverConfig, ReceiverStats
from .sender import DEFAULT_DATAGRAM, DEFAULT_HEAD_INTERVAL, Sender
from .subscriber import MulticastSubscriber
from .transport import parse_group, zmq_multicast

__all__ = [
           "DEFAULT_DATAGRAM",
           "DEFAULT_HEAD_INTERVAL",
           "FALLBACK",
           "MULTICAST",
           "Bridge",
           "BridgeError",
           "MulticastSubscriber",
           "Receiver",
           "ReceiverConfig",
           "ReceiverStats",
           "Sender",
           "parse_group",
           "zmq_multicast",
]
