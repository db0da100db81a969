"""Durable consumers through the SDK against a real broker (issue 19): add (idempotent), consume
and ack, the position kept across a new connection (it resumes after the last ack), two members
sharing the messages, a nak given again, a member whose connection drops rejoining, info /
list / delete, and asyncio."""
from __future__ import annotations

import asyncio

import pytest

from tests.measure import wait_for
from zeps.clients import AsyncClient, Client
from zeps.clients.errors import InvalidError, NoStream, ZepsTimeout


def publish(endpoint, n, stream="s", start=0):
    with Client(endpoint, stream, confirms=True) as pub:
        for i in range(start, start + n):
            pub.publish(f"k.{i % 3}", f"m{i}".encode())
        pub.wait_for_confirms(10)


def test_consume_ack_and_resume_after_the_last_ack(start_broker):
    b = start_broker()
    publish(b.endpoint, 10)
    with Client(b.endpoint, "s") as c:
        assert c.add_consumer("work", ack_wait=30) == 1
        assert c.add_consumer("work", ack_wait=30) == 1            # the same again: OK
        with pytest.raises(InvalidError, match="other settings"):
            c.add_consumer("work", ack_wait=5)
        assert c.consumers() == ("work",)
        with c.consume("work", timeout=10) as msgs:
            got = [msgs.next() for _ in range(6)]
            for m in got:
                m.ack()
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(6)]
        info = c.consumer_info("work")
        assert info["floor"] == 6 and info["config"]["ack_wait_ms"] == 30_000
        with c.consume("work", timeout=10) as msgs:               # a new connection
            m = msgs.next()
            assert m.sequence == 7 and m.body == b"m6"
            batch = []
            while len(batch) < 3:             # what has arrived by each call: one or more
                batch += msgs.next_batch()
            assert [x.sequence for x in batch] == [8, 9, 10]
            for x in [m, *batch]:
                x.ack()
            with pytest.raises(ZepsTimeout):
                msgs.next(timeout=0.3)
        info = c.consumer_info("work")
        assert info["floor"] == 10 and info["acked"] == 10 and info["bad_acks"] == 0
        member = c.consume("work", timeout=10)
        c.delete_consumer("work")                          # its members are detached
        assert c.consumers() == ()
        with pytest.raises(InvalidError, match="no consumer"):
            member.next()
        member.close()
        with pytest.raises(InvalidError, match="no consumer"):
            c.consume("work", timeout=10)
    with Client(b.endpoint, "missing") as c:
        with pytest.raises(NoStream):
            c.add_consumer("work")


def test_two_members_share_and_a_nak_comes_again(start_broker):
    b = start_broker()
    publish(b.endpoint, 40)
    with Client(b.endpoint, "s") as c:
        c.add_consumer("grp", max_ack_pending=5)
        one, two = c.consume("grp", timeout=10), c.consume("grp", timeout=10)
        seen = {one: [], two: []}
        naked = None
        try:
            while sum(map(len, seen.values())) < 41:
                for member in (one, two):
                    m = member.poll(0.05)
                    if m is None:
                        continue
                    seen[member].append(m.sequence)
                    if naked is None:
                        naked = m.sequence
                        m.nak()
                    else:
                        m.ack()
        finally:
            one.close()
            two.close()
        assert seen[one] and seen[two]                       # both had some
        everything = sorted(seen[one] + seen[two])
        assert everything.count(naked) == 2                  # given again after the nak
        assert sorted(set(everything)) == list(range(1, 41)) and len(everything) == 41
        assert c.consumer_info("grp")["floor"] == 40


def test_a_member_whose_broker_restarts_rejoins_and_gets_the_unacked_again(start_broker):
    b = start_broker()
    publish(b.endpoint, 5)
    with Client(b.endpoint, "s") as c:
        c.add_consumer("work")
    with Client(b.endpoint, "s") as c:
        msgs = c.consume("work", timeout=20)
        first = msgs.next()
        first.ack()
        second = msgs.next()                     # held, not acknowledged
        msgs.next_batch()                        # the ack of 1 leaves with this ask
        floor = wait_for(lambda: c.consumer_info("work")["floor"], lambda f: f >= 1, 10)
        assert floor == 1                        # ... and is taken before the broker stops
        b.stop()
        b.restart()
        again = msgs.next()
        second.ack()                             # from before the reconnect: nothing
        assert again.sequence == 2 and msgs.reconnects == 1
        again.ack()
        msgs.close()
        info = c.consumer_info("work")
        assert info["floor"] == 2 and info["bad_acks"] == 0   # the stale ack never left


def test_asyncio(start_broker):
    b = start_broker()
    publish(b.endpoint, 4)

    async def main():
        async with AsyncClient(b.endpoint, "s") as c:
            await c.add_consumer("work", start=3)
            got = []
            async with c.consume("work", timeout=10) as msgs:
                async for m in msgs:
                    got.append(m.sequence)
                    m.ack()
                    if m.sequence == 4:
                        break
            info = await c.consumer_info("work")
            return got, info, await c.consumers()

    got, info, names = asyncio.run(main())
    assert got == [3, 4] and info["floor"] == 4 and names == ("work",)
