"""ZEPS client SDK: a blocking (and gevent-friendly) client for the ZEPS broker.

Quick start::

    from zeps.clients import Client

    with Client("tcp://127.0.0.1:7470", "orders", confirms=True) as pub:
        for i in range(10):
            pub.publish("eu.fr", f"order {i}")
        last = pub.wait_for_confirms()          # all 10 are durable; `last` is the 10th's sequence

    with Client("tcp://127.0.0.1:7470", "orders") as sub_client:
        sub = sub_client.subscribe("eu.")       # from the first kept message; or from_seq=,
        for msg in sub:                         #   from_time=, live=True
            print(msg.sequence, msg.key, msg.body)

Exports: :class:`Client`, :class:`Subscription`, :class:`Message`, :class:`StreamInfo`,
:func:`list_streams`, and the errors :class:`ZepsError`, :class:`InvalidError`,
:class:`ZepsTimeout`, :class:`ConnectionLost`, :class:`ClientClosed` (also as the module
``zeps.clients.errors``).
"""
from . import errors
from .client import (DEFAULT_CREDIT_WINDOW, DEFAULT_ENDPOINT, Client, check_endpoint,
                     list_streams, to_timestamp_ns)
from .errors import (ClientClosed, ConcurrentUseError, ConnectionLost, InvalidError, ZepsError,
                     ZepsTimeout)
from .message import Message, StreamInfo
from .receipt import AsyncReceipt, Receipt
from .subscription import Subscription

__all__ = ["Client", "Subscription", "Receipt", "AsyncReceipt", "Message", "StreamInfo",
           "list_streams", "errors", "ZepsError", "InvalidError", "ZepsTimeout", "ConnectionLost",
           "ClientClosed", "ConcurrentUseError", "DEFAULT_ENDPOINT", "DEFAULT_CREDIT_WINDOW",
           "check_endpoint", "to_timestamp_ns"]
