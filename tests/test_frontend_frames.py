"""One message of very many frames sent to a front end's port (``zeps/frontends/capped.py``):
the broker and the front end's other sockets go on serving while its rest is discarded.

Anyone who reaches a CHP or BUS port can send, unauthenticated, one message of hundreds of
thousands of empty frames. Its first frames are counted malformed at once; its rest is read
and dropped ``DISCARD_MAX`` frames a round. A socket hands out its messages in order, so the
flooder's next command on the same connection is answered only once the rest is gone: until
then, a ZEPS client's PING, a calm client's KVSET (CHP) or snapshot and event (BUS) are
answered, which before this was done stalled the whole broker until the last frame was read
(found by review: 2,000,000 frames held every client for about 30 s)."""
from __future__ import annotations

import pytest
import zmq

from zeps.frontends import bus_codec as bc
from zeps.frontends import chp_codec as cc
from zeps.protocol import commands as c

from .frontends import BusClient, ChpClient, recv, start_frontend, wait_counter
from .test_bus_frontend import TS, raw_socket
from .test_bus_frontend import warm as bus_warm
from .test_chp_frontend import warm, zeps_publisher

#: The flood's frames: a few seconds of discarding on a shared CI core.
FRAMES = 300_000
DEADLINE = 60.0


@pytest.fixture
def chp(start_broker):
    b = start_frontend(start_broker, "--chp", "kv")
    b.name = f"chp:{b.port}"
    return b


@pytest.fixture
def bus(start_broker):
    b = start_frontend(start_broker, "--bus", "ev")
    b.name = f"bus:{b.port}"
    return b


def send_flood(sock, first: bytes) -> None:
    """One message: ``first``, then empty frames, ``FRAMES`` in all."""
    sock.send(first, zmq.SNDMORE)
    for _ in range(FRAMES - 2):
        sock.send(b"", zmq.SNDMORE)
    sock.send(b"")


def flooder(port: int):
    s = raw_socket(zmq.DEALER, port)
    s.setsockopt(zmq.SNDHWM, 0)
    return s


def test_a_message_of_many_frames_to_the_chp_snapshot_port_stalls_no_one(chp):
    zeps = zeps_publisher(chp.endpoint, "kv")
    calm = ChpClient(chp.port)
    warm(calm)
    hostile = flooder(chp.port)
    send_flood(hostile, b"ICANHAZ?")
    hostile.send_multipart(cc.encode_icanhaz(""))      # behind the flood on its connection
    wait_counter(chp, chp.name, "snapshot.malformed.frame count", 1, DEADLINE)
    # the flood's first frames were read: while its rest is discarded, the others are served
    zeps.send(c.Ping())
    zeps.expect(c.PingOk, DEADLINE)
    calm.set("/calm/k", b"served")
    calm.until(lambda cl: cl.kvmap.get("/calm/k") == b"served", DEADLINE)
    assert not hostile.poll(0), "the flood's rest was read before anyone else was served"
    got = cc.decode_kvmsg(recv(hostile, DEADLINE))
    while got.key != "KTHXBAI":
        got = cc.decode_kvmsg(recv(hostile, DEADLINE))
    # the ROUTER's identity, ICANHAZ? and 3 empty frames were kept, the rest discarded
    assert_flood_discarded(chp, "snapshot", 5)
    calm.close()
    hostile.close(0)


def assert_flood_discarded(fe, part: str, kept: int) -> None:
    """The flood of ``FRAMES`` frames to front end ``fe``'s socket ``part`` was one malformed
    message (a frame count), of which ``kept`` frames were read and the rest discarded."""
    seen = wait_counter(fe, fe.name, f"{part}.frames discarded", FRAMES + 1 - kept)
    mine = {k: v for k, v in seen.items() if k.startswith(part)}
    print(f"\nflood of {FRAMES} frames: {mine}")
    assert seen[f"{part}.frames discarded"] == FRAMES + 1 - kept
    assert seen[f"{part}.malformed"] == 1 and seen[f"{part}.malformed.frame count"] == 1


def test_a_message_of_many_frames_to_the_bus_collector_stalls_no_one(bus):
    zeps = zeps_publisher(bus.endpoint, "ev")
    calm = BusClient(bus.port)
    bus_warm(calm)
    hostile = flooder(bus.port + 2)
    send_flood(hostile, b"PUB")
    hostile.send_multipart(bc.encode_pub(bc.Event("/after", 0, "f", TS, "", b"a")))
    wait_counter(bus, bus.name, "collector.malformed.frame count", 1, DEADLINE)
    zeps.send(c.Ping())
    zeps.expect(c.PingOk, DEADLINE)
    events, _ = calm.sync(calm.sequence)               # the snapshot socket answers
    assert all(e.topic == "~warm" for e in events), \
        "the flooder's next PUB, behind its flood, was published before a calm snapshot"
    zeps.send(c.Publish("/calm", b"served"))
    first = calm.broadcast(DEADLINE)
    assert first is not None and first.topic == "/calm", \
        "the flooder's next PUB, behind its flood, was published before a calm one"
    after = calm.broadcast(DEADLINE)
    assert after is not None and (after.topic, after.data) == ("/after", b"a")
    # the ROUTER's identity, PUB and 6 empty frames were kept, the rest discarded
    assert_flood_discarded(bus, "collector", 8)
    calm.close()
    hostile.close(0)
