"""Durable consumers against real processes (issue 19): a member SIGKILLed while it holds
messages (they go to another member; the union of the acknowledgements is exactly what was
published), and a broker SIGKILLed under a group (the position and the outstanding messages are
right after the restart). Raw ZEPS peers (tests/rawclient.py), so that nothing of the SDK is
assumed."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.measure import wait_for
from tests.rawclient import RawClient
from zeps.journal import consumers, stream_dir_name
from zeps.protocol import commands as c
from zeps.protocol.consumer import pack_ranges, ranges_of

pytestmark = pytest.mark.fault


def publish(endpoint: str, n: int, stream: str = "s") -> None:
    p = RawClient(endpoint).attach(stream)
    p.send(c.ConfirmSelect())
    p.expect(c.ConfirmSelectOk)
    for i in range(n):
        p.send(c.Publish(f"k.{i}", b"v%d" % i))
    got = 0
    while got < n:
        got = p.expect(c.Confirm).count
    p.close()


def join(endpoint: str, name: str = "g", credit: int = 1 << 20) -> RawClient:
    m = RawClient(endpoint).attach("s")
    m.send(c.Credit(credit), c.Consume(name))
    m.expect(c.ConsumeOk)
    return m


def take(m: RawClient, n: int, timeout: float = 10.0) -> list:
    return [d.sequence for d in m.delivers(n, timeout)]


def consumer_info(admin: RawClient, name: str = "g") -> dict:
    admin.send(c.ConsumerInfo(name))
    return json.loads(admin.expect(c.ConsumerInfoOk).info)


MEMBER = r"""
import sys, zmq
from zeps.protocol import commands as c, decode, encode
s = zmq.Context().socket(zmq.DEALER)
s.connect(sys.argv[1])
for cmd in (c.Attach("s"), c.Credit(1 << 20), c.Consume("g")):
    s.send(encode(cmd))
got = 0
while got < int(sys.argv[2]):
    m = decode(s.recv())
    if isinstance(m, c.Deliver):
        got += 1
        print(m.sequence, flush=True)
s.recv()        # holds them, never acknowledges, until killed
"""


def test_a_member_killed_holding_messages_has_them_redelivered_to_another(broker):
    publish(broker.endpoint, 40)
    admin = RawClient(broker.endpoint).attach("s")
    admin.send(c.ConsumerAdd("g", max_ack_pending=10))
    admin.expect(c.ConsumerAddOk)
    child = subprocess.Popen([sys.executable, "-c", MEMBER, broker.endpoint, "10"],
                             stdout=subprocess.PIPE, text=True)
    held = [int(child.stdout.readline()) for _ in range(10)]      # it holds its ten
    survivor = join(broker.endpoint)
    acked = []
    first = take(survivor, 10)
    assert not set(first) & set(held)                               # never two holders
    survivor.send(c.Ack(pack_ranges(ranges_of(first))))
    acked += first
    child.kill()
    child.wait()
    while len(acked) < 40:
        got = take(survivor, 1)
        acked += got
        survivor.send(c.Ack(pack_ranges(ranges_of(got))))
    assert sorted(acked) == list(range(1, 41))                      # exactly once each
    assert set(held) <= set(acked)
    info = wait_for(lambda: consumer_info(admin), lambda i: i["floor"] == 40, 10)
    assert info["floor"] == 40
    assert info["redelivered"] >= 10 and info["members"] == 1
    for m in (admin, survivor):
        m.close()


def test_a_broker_killed_under_a_group_keeps_the_position_and_the_outstanding(broker):
    publish(broker.endpoint, 30)
    admin = RawClient(broker.endpoint).attach("s")
    admin.send(c.ConsumerAdd("g", max_ack_pending=15))
    admin.expect(c.ConsumerAddOk)
    a, b = join(broker.endpoint), join(broker.endpoint)
    got_a, got_b = take(a, 15), take(b, 15)
    assert sorted(got_a + got_b) == list(range(1, 31))
    done = got_a[:10] + got_b[:5]
    a.send(c.Ack(pack_ranges(ranges_of(got_a[:10]))))
    b.send(c.Ack(pack_ranges(ranges_of(got_b[:5]))))
    outstanding = set(range(1, 31)) - set(done)
    sdir = broker.data_dir / stream_dir_name("s")

    def saved():
        cs = consumers.load_all(str(sdir))
        return "g" in cs and set(cs["g"][1].outstanding) == outstanding

    assert wait_for(saved, bool, 10), "the acknowledgements were not saved"
    broker.kill()
    for m in (admin, a, b):
        m.close()
    broker.restart()
    m = join(broker.endpoint)
    again = take(m, len(outstanding))
    assert set(again) == outstanding                    # exactly what was not acknowledged
    m.send(c.Ack(pack_ranges(ranges_of(again))))
    publish(broker.endpoint, 1)
    assert take(m, 1) == [31]
    m.close()
