"""ZEPS client SDK: a blocking (and gevent-friendly) :class:`Client` and an :class:`AsyncClient`.

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

and with asyncio::

    from zeps.clients import AsyncClient

    async with AsyncClient("tcp://127.0.0.1:7470", "orders", confirms=True) as client:
        receipt = await client.publish("eu.fr", b"hello")
        seq = await receipt                     # its sequence, once durable
        async for msg in client.subscribe("eu."):
            print(msg.sequence, msg.key, msg.body)

How it works (what you can rely on, with either client)
-------------------------------------------------------

* **Where the I/O happens.** :class:`Client` does its socket I/O inside your calls
  (``publish``, ``Subscription.next`` / iteration, ``wait_for_confirms``, ...); while a call is
  blocked the client answers to the broker, sends heartbeats and reconnects. Its one thread of
  its own, a daemon started the first time a call leaves publishes queued, only sends them when
  you stop calling the client (:mod:`zeps.clients.flusher`; none under gevent).
  :class:`AsyncClient` runs the same I/O in a task of your event loop, so it keeps the peering
  alive while your code awaits anything. If a blocking program does not call its
  client for longer than the broker's expiry (60 s by default) the broker forgets the peering;
  the client notices it at the next call and re-attaches transparently (a ``publish`` after
  ``heartbeat`` seconds of silence first checks, with one round trip, that the broker still
  knows the client, so that publish is not lost).
* **Plain, gevent or asyncio.** In a plain program :class:`Client` uses blocking ``zmq`` with
  polling and timeouts. If gevent has monkey-patched ``socket``, or you pass
  ``context=zmq.green.Context()``, it uses ``zmq.green`` so that waiting yields to other
  greenlets. A :class:`Client` must be used by one thread or greenlet at a time (one client per
  thread or greenlet): a call made while another thread or greenlet is inside a call on the same
  client raises :class:`ConcurrentUseError` naming both (a call that meets the client's own
  sender thread waits for it instead). :class:`AsyncClient` (``zmq.asyncio``)
  may be shared by the tasks of its event loop; a cancelled ``await`` leaves it consistent.
* **Publishing never drops silently.** When ZeroMQ's high-water mark is reached ``publish``
  blocks (up to ``timeout`` seconds, then :class:`ZepsTimeout`, and that message was not
  accepted). An ``INVALID`` the broker sends back for a publish (message over the broker's
  ``--max-message``, disk full, ...) is raised as :class:`InvalidError` by the next call on the
  client once it has arrived (``publish``, ``wait_for_confirms``, ``flush``, ``close``, ...);
  the call that raises it did not perform its own operation. (While publishing flat out the
  client looks at its socket every 2 ms, so a few more publishes may go out before it shows;
  ``flush()``, ``wait_for_confirms()`` and ``close()`` always see it.)
  A program that ends without ``close()`` loses nothing either: at interpreter exit every
  :class:`Client` still open is closed as ``close()`` does (what it queued is sent and the
  broker has processed it, all within the longest ``timeout`` of those clients; if that cannot
  finish, a warning says so and the exit goes on). A client garbage-collected without
  ``close()`` while the program runs drops the publishes it still held, and logs how many
  (:mod:`zeps.clients.lifetime`). An :class:`AsyncClient` needs its event loop to send: close it
  (``async with``) before the loop ends (its I/O task cancelled, by the loop's end or a shutdown
  cancelling every task, the calls waiting on it and every later one raise
  :class:`ConnectionLost`). A :class:`Client` made before ``os.fork()``
  (``multiprocessing``'s default start method on Linux) is closed in the child, whose copy of
  its socket is the parent's: a call on it there raises :class:`ClientForked` (make a new client
  in the child); the parent's goes on. So are an :class:`AsyncClient`, a consumer's member
  (``consume()``: its copy also held the parent's prefetched messages), a snapshot being
  iterated and a multicast subscriber.
* **Batches** (``batching=True``, the default; :mod:`zeps.clients.batching`). ``Client``: a
  publish made while nothing waits for the socket leaves at once; publishes made while the
  socket is busy (4 frames wait for ZeroMQ's I/O thread: a loop of publishes faster than that
  thread) queue in the client and leave together as one ``PUBLISH-BATCH`` as soon as the socket
  takes frames again -- no linger. What is still queued when you stop calling the client (a
  burst, then a wait for something else) is sent by the client's sender thread within about a
  millisecond (:mod:`zeps.clients.flusher`). Under gevent there is no such thread: the socket
  keeps 64 frames ahead, and what a longer burst left queued goes with the next call on the
  client (the next ``publish``, ``flush()``, ``wait_for_confirms()``, ``close()``, iterating a
  subscription).
  ``Client.publish_batch(messages)`` (without confirms) queues them all and sends batches as
  large as the broker takes: the fast way to publish many. ``AsyncClient``: every publish joins
  the queue, which leaves when the publishing coroutine next lets the event loop run -- at once
  for a lone publish, a whole batch for a loop of publishes (or 64 at a time at the latest).
  Receipts, confirms, errors and producer sequences are per message exactly as without
  batches. Subscriptions receive runs of messages as ``DELIVER-BATCH`` frames and hand out the
  same :class:`Message` objects, or, to programs that read in bulk (``sub.next_batch()``,
  ``for batch in sub.batches()``), each frame whole as a :class:`MessageBatch` (columns
  ``sequences``, ``keys``, ``bodies``) with nothing built per message. A broker without
  batching answers ``BATCH-SELECT`` with INVALID: the client then uses plain PUBLISH / DELIVER.
* **Confirms** (``confirms=True``): ``wait_for_confirms()`` blocks until every message published
  so far is durable under the broker's fsync policy and returns the sequence of the last one;
  the :class:`~zeps.clients.Receipt` that ``publish`` returns resolves to its message's sequence
  when the CONFIRM covering it arrives (``receipt.result(timeout)``; see
  :mod:`zeps.clients.receipt`).
  Messages not yet confirmed when the peering is lost are **re-sent** after the reconnect, and
  the client is an idempotent producer (``PRODUCER``; ``producer_id=``, random by default):
  the broker drops a re-sent message it already holds, so every confirmed message is in the
  stream **exactly once**, across broker crashes, reconnects and a new client taking over the
  producer id (:mod:`zeps.clients.producer` says precisely what is and is not covered; with
  ``idempotent=False`` or a broker without ``PRODUCER``, at-least-once). Without confirms, a
  publish is *at-most-once* across a broker crash: messages in flight when the broker dies may
  be lost.
* **Where a subscription starts.** With no start point (``from_seq=``, ``from_time=``,
  ``live=True``), at the first message the stream keeps: the history, then live. The CLI's
  ``zeps subscribe`` starts live instead (``--all`` for the history): a program should not lose
  what was published before it started, a person watching wants what comes next.
* **Subscriptions and credit.** The client grants the broker ``credit_window`` bytes of
  deliveries and tops the credit up as *your application* consumes messages (when half of the
  window was consumed). A slow application therefore makes the broker switch this client to
  journal replay instead of queueing; you never see the switch: sequences strictly increase,
  without gaps (except for messages your patterns do not match) and without duplicates (the
  client drops any sequence not above the last one it received, counts it in
  ``client.duplicates`` and grants no credit back for it: :mod:`zeps.clients.bounds`).
  Every socket reads frames of at most ``max_frame`` bytes (default: the window plus 64 KiB,
  all an honest broker sends); a longer one raises :class:`FrameTooLarge` once.
  A message is delivered only when its cost (``8 + len(key) + 1 + len(body)``) fits in the
  window, so after each ATTACH the client asks the broker's ``LIMITS`` and grows the window
  for the largest message the broker accepts (or, with a broker without ``LIMITS``, when it
  advises ``credit window too small``): see :mod:`zeps.clients.window`. A ``~regex`` pattern
  the broker removes (its matches kept timing out) raises :class:`PatternRemoved` once, from
  the next call, naming it (``err.pattern``); the other patterns go on, and that one is not
  subscribed again after a reconnect.
* **Refusals.** The client sends ``REASONS-SELECT`` before each ATTACH: a broker that offers it
  refuses with ``ERROR``, a code and fields (:class:`zeps.protocol.reasons.Code`, on every
  :class:`InvalidError` as ``err.code`` / ``err.fields``), which the client acts on; from an older
  broker it reads ``INVALID``'s text, best effort (cut at 255 bytes).
* **Connection events.** ``on_connection=callback`` is called with a
  :class:`~zeps.clients.peering.ConnectionEvent` when the peering is lost and when it is back
  (``zeps subscribe -v`` prints them).
* **Reconnect.** A lost peering is detected by (1) a ZeroMQ socket-monitor ``DISCONNECTED``
  event (a broker that dies closes the TCP connection: the blocking client sees it at its
  next service of the socket, within a tenth of a second while it waits or reads, the others
  at once), (2) an
  ``INVALID`` whose reason says the broker does not know this client (code ``NOT_ATTACHED``,
  text :data:`zeps.protocol.reasons.NOT_ATTACHED`, e.g. after expiry or when ZeroMQ reconnected the
  socket to a restarted broker) or a ``DETACH`` sent by the broker, and (3) a
  heartbeat: when the peering has been silent for ``heartbeat`` seconds the client sends
  ``STREAM-INFO`` (valid only while attached, unlike ``PING`` which a broker answers even to a
  stranger) and declares the peering lost when no answer comes within
  ``max(heartbeat, timeout)`` seconds; ZeroMQ's own ZMTP heartbeats are enabled too. On a lost
  peering the client opens a fresh socket, re-ATTACHes, re-sends CONFIRM-SELECT, resubscribes
  every pattern from the last sequence it handed to the application, re-grants the credit
  window, and re-sends unconfirmed publishes. Messages received but not yet handed to the
  application are discarded and fetched again from the journal.
* **A failed security handshake.** The socket monitor also sees ZeroMQ's
  ``HANDSHAKE_FAILED_*`` events: when the first connection to the broker is accepted but its
  handshake fails (a plaintext client at a CurveZMQ broker or the reverse, a wrong server key,
  a client key the broker does not allow), the constructor (and :func:`list_streams`, the
  admin calls) raise :class:`HandshakeFailed` at once, naming the mistake, instead of
  :class:`ZepsTimeout` after ``timeout`` seconds.
* **Readers never create streams.** The client attaches only to a stream that exists
  (``STREAM-EXPECT 0``); if there is none it is constructed unattached, its first ``publish``
  creates the stream, and ``subscribe`` / ``info`` / ``seq_at`` raise :class:`NoStream` at once
  while it does not exist (``create=True``: attach creating it, for a subscriber that waits for
  its publisher).
* **A deleted stream.** The client re-attaches only to the stream it first attached to (its
  *incarnation*, ``STREAM-ID``; docs/protocol.md), never creating it: if it was deleted, or
  deleted and created again, the subscription and every later call raise
  :class:`StreamDeleted` or :class:`StreamRecreated` (both :class:`ConnectionLost`), and the
  receipts of unconfirmed publishes fail with it -- they are never confirmed with the sequences
  of a new stream.

Layers: :mod:`zeps.clients.peering` is the protocol as a pure state machine (no sockets, no
clock; its jobs each have a module: ``publishing``, ``delivery``, ``confirms``, ``producer``,
``refusals``, ``requests``, ``states``); :mod:`zeps.clients.transport` owns the socket;
:mod:`zeps.clients.operations` writes each call once; :mod:`zeps.clients.client` (blocking,
gevent) and :mod:`zeps.clients.aio` (asyncio) only differ in how they wait. See
docs/architecture.md, "Client SDK".

Exports: :class:`Client`, :class:`AsyncClient`, :class:`Subscription`,
:class:`AsyncSubscription`, :class:`Receipt`, :class:`AsyncReceipt`, :class:`Message`,
:class:`MessageBatch`, :class:`StreamInfo`, :func:`list_streams`, and the errors :class:`ZepsError`,
:class:`InvalidError`, :class:`NoStream`, :class:`PatternRemoved`, :class:`ZepsTimeout`,
:class:`ConnectionLost`,
:class:`HandshakeFailed`, :class:`StreamGone`, :class:`StreamDeleted`, :class:`StreamRecreated`,
:class:`ClientClosed`, :class:`ClientForked`,
:class:`ConcurrentUseError`, :class:`ProducerFenced`, :class:`ProducerStateLost` (also as the
module ``zeps.clients.errors``).
"""
from ..units import check_endpoint, to_timestamp_ns
from . import errors
from .defaults import DEFAULT_CREDIT_WINDOW, DEFAULT_ENDPOINT
from .errors import (ClientClosed, ClientForked, ConcurrentUseError, ConnectionLost,
                     FrameTooLarge, HandshakeFailed, InvalidError, NoStream, PatternRemoved,
                     ProducerFenced, ProducerStateLost, StreamDeleted, StreamGone,
                     StreamRecreated, ZepsError, ZepsTimeout)
from .message import Headers, Message, MessageBatch, StreamInfo
from .receipt import AsyncReceipt, Receipt
from .subscription import AsyncSubscription, Subscription

__all__ = ["Client", "CurveKeys", "AsyncMulticastSubscriber", "AsyncClient", "Subscription",
           "AsyncSubscription", "Receipt", "AsyncReceipt", "Message", "MessageBatch", "StreamInfo",
           "Headers", "KVMap", "AsyncKVMap", "Snapshot", "Consumer", "AsyncConsumer",
           "ConsumerMessage",
           "list_streams",
           "errors", "ZepsError",
           "InvalidError", "NoStream", "PatternRemoved", "ZepsTimeout", "ConnectionLost", "StreamGone",
           "HandshakeFailed", "FrameTooLarge", "StreamDeleted", "StreamRecreated", "ClientClosed",
           "ClientForked",
           "ConcurrentUseError", "ProducerFenced", "ProducerStateLost",
           "DEFAULT_ENDPOINT", "DEFAULT_CREDIT_WINDOW", "check_endpoint", "to_timestamp_ns"]


def __getattr__(name: str):
    """The I/O shells (zmq, gevent, asyncio) and multicast load on first use (PEP 562), so that
    importing a pure module of this package (``zeps.clients.peering``, ...) loads none of them."""
    if name in ("Client", "list_streams"):
        from . import client as module
    elif name == "AsyncClient":
        from . import aio as module
    elif name == "CurveKeys":
        from . import curve as module
    elif name in ("KVMap", "AsyncKVMap"):
        from . import kv as module
    elif name == "Snapshot":
        from . import snapshot as module
    elif name in ("Consumer", "AsyncConsumer"):
        from . import consumer_io as module
    elif name == "ConsumerMessage":
        from . import consumer as module
    elif name == "MulticastSubscriber":
        # zeps.multicast is the floor above this package (it uses Client): offered here for
        # `from zeps.clients import MulticastSubscriber` (README); .importlinter allows it.
        from zeps.multicast import subscriber as module
    elif name == "AsyncMulticastSubscriber":
        from zeps.multicast import aio as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
