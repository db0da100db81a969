"""A program that ends, or drops a client, without ``close()``: what happens to its publishes;
and the copy of a client a forked child has (``zeps.clients.lifetime``).

``publish()`` returns once ZeroMQ or the client's queue has the message (natural batching,
issue 20), so a loop of publishes ends with some of them still in the client. At interpreter
exit every client left open is closed as ``close()`` does (``zeps.clients.exiting``: they are
sent and processed, within the longest timeout of those clients); a client garbage-collected
while the program runs drops what it held, and says how many.
"""
from __future__ import annotations

import gc
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.measure import wait_for
from tests.sessions import run_in_session
from zeps.clients import Client, ZepsTimeout

REPO = Path(__file__).resolve().parent.parent
FAST = dict(timeout=5.0, heartbeat=1.0)

# Publishes N numbered messages in a tight loop and ends without close().
PUBLISH_AND_EXIT = """
import sys
from zeps.clients import Client
cl = Client(sys.argv[1], sys.argv[2], create=True)
for i in range(int(sys.argv[3])):
    cl.publish("k", b"%08d" % i)
"""

# Attaches three clients, says so, waits for a line on stdin, publishes, ends without close().
ATTACH_WAIT_PUBLISH = """
import sys
from zeps.clients import Client
clients = [Client(sys.argv[1], "held%d" % i, timeout=3.0, create=True) for i in range(3)]
print("attached", flush=True)
sys.stdin.readline()
for cl in clients:
    for i in range(50):
        cl.publish("k", b"x" * 100)
print("published", flush=True)
"""


# Publishes, forks a child that ends at once (its interpreter exits normally), then goes on.
FORK_THEN_PUBLISH = """
import os, sys
from zeps.clients import Client
cl = Client(sys.argv[1], "forked", create=True, timeout=3.0)
cl.publish("k", b"before")
pid = os.fork()
if pid == 0:
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
cl.publish("k", b"after")
cl.close()
print("ok")
"""


# What a script's call did: "name: returned", "name: ClientForked" or the error's type.
ATTEMPT = """
from zeps.clients import ClientForked

def attempt(name, call):
    try:
        call()
        return name + ": returned"
    except ClientForked:
        return name + ": ClientForked"
    except Exception as e:
        return name + ": " + type(e).__name__
"""


# A client subscribed and publishing, holding a message received and not handed out yet; a forked
# child tries every kind of call on its copy, then makes a client of its own; a fork-started
# multiprocessing pool's worker publishes; the parent goes on.
FORK_THEN_CALL = ATTEMPT + """
import multiprocessing, os, sys, time
from zeps.clients import Client
cl = Client(sys.argv[1], "forked2", create=True, timeout=3.0)
sub = cl.subscribe("", live=True)
cl.publish("k", b"before")
cl.publish("k", b"held")
cl.flush()
first = sub.next(timeout=10)
deadline = time.monotonic() + 10
while sub.buffered < 1 and time.monotonic() < deadline:
    cl.info()                          # a request: the client reads what came meanwhile
assert sub.buffered == 1, sub.buffered

def work(_):
    return attempt("pool publish", lambda: cl.publish("k", b"worker"))

def new_client():
    with Client(sys.argv[1], "forked2", timeout=3.0) as own:
        own.publish("k", b"child-new")

pid = os.fork()
if pid == 0:
    got = [attempt("publish", lambda: cl.publish("k", b"child")),
           attempt("flush", cl.flush),
           attempt("info", cl.info),
           attempt("next", lambda: sub.next(timeout=1)),
           attempt("for", lambda: [m for m in sub]),
           attempt("consume", lambda: cl.consume("nobody")),
           attempt("snapshot", cl.snapshot),
           attempt("close", cl.close),
           attempt("new client", new_client)]
    print("\\n".join(got), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
with multiprocessing.get_context("fork").Pool(1) as pool:
    print(pool.map(work, [0])[0], flush=True)
cl.publish("k", b"after")
got = [first] + [sub.next(timeout=10) for _ in range(3)]
print("parent:", [m.body.decode() for m in got], flush=True)
cl.close()
"""


# A durable consumer's member that took one message; a forked child tries its copy (and acks the
# message the parent took); then the parent reads on.
FORK_CONSUMER = ATTEMPT + """
import os, sys
from zeps.clients import Client
cl = Client(sys.argv[1], "forked3", create=True, timeout=3.0)
cl.add_consumer("work")
spare = cl.consume("work", timeout=3.0)       # a member closed before the fork
spare.close()
for i in range(4):
    cl.publish("k", b"m%d" % i)
cl.flush()
con = cl.consume("work", timeout=3.0)
first = con.next()
first.ack()

pid = os.fork()
if pid == 0:
    got = [attempt("next", lambda: con.next(timeout=1)),
           attempt("ack", first.ack),
           attempt("for", lambda: [m for m in con]),
           attempt("batches", lambda: list(con.batches())),
           attempt("close", con.close),
           attempt("closed member's next", lambda: spare.next(timeout=1))]
    print("\\n".join(got), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
rest = []
for _ in range(3):
    m = con.next(timeout=10)
    m.ack()
    rest.append(m.body.decode())
print("parent:", [first.body.decode()] + rest, flush=True)
con.close()
cl.close()
"""


# An AsyncClient connected on a loop of the parent, holding a message received and not handed
# out yet; a forked child calls its copy on a loop of its own, then makes a client of its own;
# the parent goes on.
FORK_ASYNC = """
import asyncio, os, sys, time
from zeps.clients import AsyncClient, ClientForked
loop = asyncio.new_event_loop()
ac = AsyncClient(sys.argv[1], "forked4", create=True, timeout=3.0)

async def setup():
    await ac.connect()
    sub = await ac.subscribe("", live=True)
    await ac.publish("k", b"before")
    await ac.publish("k", b"held")
    await ac.flush()
    first = await sub.next(timeout=10)
    deadline = time.monotonic() + 10
    while sub.buffered < 1 and time.monotonic() < deadline:
        await ac.info()
    assert sub.buffered == 1, sub.buffered
    return sub, first

sub, first = loop.run_until_complete(setup())

async def attempt(name, call):
    try:
        await asyncio.wait_for(call(), 10)
        return name + ": returned"
    except ClientForked:
        return name + ": ClientForked"
    except Exception as e:
        return name + ": " + type(e).__name__

async def child():
    async def subscribe():
        async for m in ac.subscribe(""):
            pass
    async def consume():
        ac.consume("nobody")
    async def new_client():
        async with AsyncClient(sys.argv[1], "forked4", timeout=3.0) as own:
            await own.publish("k", b"child-new")
            await own.flush()
    return [await attempt("publish", lambda: ac.publish("k", b"child")),
            await attempt("flush", ac.flush),
            await attempt("info", ac.info),
            await attempt("next", lambda: sub.next(timeout=1)),
            await attempt("async for", subscribe),
            await attempt("consume", consume),
            await attempt("snapshot", ac.snapshot),
            await attempt("close", ac.close),
            await attempt("new client", new_client)]

pid = os.fork()
if pid == 0:
    print("\\n".join(asyncio.run(child())), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status

async def rest():
    await ac.publish("k", b"after")
    got = [first] + [await sub.next(timeout=10) for _ in range(3)]
    print("parent:", [m.body.decode() for m in got], flush=True)
    await ac.close()

loop.run_until_complete(rest())
"""


# An AsyncClient connected and subscribed on a loop of the parent; a forked child drops the loop
# (and the subscription) and collects them; the parent asks the kernel what its loop's epoll
# watches, before and after.
FORK_DROP_LOOP = """
import asyncio, gc, os, sys
from zeps.clients import AsyncClient
loop = asyncio.new_event_loop()
ac = AsyncClient(sys.argv[1], "forked6", create=True, timeout=3.0)

async def setup():
    await ac.connect()
    return await ac.subscribe("", live=True)

sub = loop.run_until_complete(setup())

def watched():
    with open("/proc/self/fdinfo/%d" % loop._selector.fileno()) as f:
        return {int(line.split()[1]) for line in f if line.startswith("tfd:")}

zmq_fds = {s.FD for s in ac._conn._owned}
assert zmq_fds and zmq_fds <= watched(), (zmq_fds, watched())
pid = os.fork()
if pid == 0:
    sub = loop = None
    gc.collect()
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print("still watched:", sorted(zmq_fds & watched()) == sorted(zmq_fds), flush=True)

async def rest():
    await ac.publish("k", b"after")
    print("parent:", (await sub.next(timeout=10)).body.decode(), flush=True)
    await ac.close()

loop.run_until_complete(rest())
"""


# A snapshot iterated in part (a small window: the rest is still at the broker); a forked child
# goes on iterating its copy; then the parent does.
FORK_SNAPSHOT = """
import os, sys
from zeps.clients import Client, ClientForked
from zeps.clients.snapshot_io import SnapshotIterator
with Client(sys.argv[1], "forked5", create=True, confirms=True) as cl:
    for i in range(300):
        cl.publish("k.%03d" % i, b"v" * 100)
    cl.wait_for_confirms(10)
it = iter(SnapshotIterator(sys.argv[1], "forked5", window=2048, timeout=5.0))
first = next(it)
pid = os.fork()
if pid == 0:
    try:
        n = sum(1 for _ in it)
        print("child: ended after", n, flush=True)
    except ClientForked:
        print("child: ClientForked", flush=True)
    except Exception as e:
        print("child:", type(e).__name__, e, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
keys = [first.key] + [m.key for m in it]
print("parent:", len(keys), keys == ["k.%03d" % i for i in range(300)], flush=True)
"""


def run_script(script, *args, timeout=120):
    """Run ``script`` in a session of its own (a child it forked is killed with it)."""
    return run_in_session([sys.executable, "-c", script, *args], timeout=timeout,
                          what="the script", env=dict(os.environ, PYTHONPATH=str(REPO)))


def read_all(endpoint, stream, n):
    with Client(endpoint, stream, **FAST) as cl:
        sub = cl.subscribe("")
        return [sub.next(timeout=10) for _ in range(n)]


def test_a_program_that_ends_without_close_has_every_publish_stored(broker):
    n = 20_000
    r = run_script(PUBLISH_AND_EXIT, broker.endpoint, "exit", str(n))
    assert r.returncode == 0, r.stderr
    msgs = read_all(broker.endpoint, "exit", n)
    assert [m.body for m in msgs] == [b"%08d" % i for i in range(n)]
    assert [m.sequence for m in msgs] == list(range(1, n + 1))
    with Client(broker.endpoint, "exit", **FAST) as cl:
        assert cl.info().last == n            # none twice, none more


def test_a_program_whose_broker_never_answers_still_exits_and_says_so(broker):
    """The broker is stopped (SIGSTOP: connected, never answering) when the program ends: the
    close at exit waits for DETACH-OK, at most the clients' timeout for all of them together,
    warns, and the program exits."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", ATTACH_WAIT_PUBLISH, broker.endpoint],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "attached"
        os.kill(broker.proc.pid, signal.SIGSTOP)
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == "published"
    waited = [float(t) for t in re.findall(r"no DETACH-OK from \S+ within (\S+)s", err)]
    assert len(waited) == 3, err
    # one deadline for all three (the longest timeout), not one timeout each
    assert sum(waited) <= 3.0 + 1e-6, waited


def test_a_client_collected_without_close_logs_the_publishes_it_drops(broker, caplog):
    """While the broker is stopped its connection fills, then the client's queue, until a
    publish times out (nothing moves any more); the client is then dropped: the warning gives
    how many publishes it held."""
    cl = Client(broker.endpoint, "dropped", create=True, timeout=3.0, heartbeat=60.0)
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        body = b"x" * 4096
        with pytest.raises(ZepsTimeout):
            for _ in range(1_000_000):
                cl.publish("k", body)
        held = cl._p.unfinished_publishes()
        assert held > 0
        caplog.set_level(logging.WARNING, logger="zeps.client")
        del cl
        gc.collect()
        # collected here, or in the client's sender thread if it held the client just then
        expected = f"without close(): {held} publish(es) it still held were dropped"
        assert expected in wait_for(lambda: caplog.text, lambda t: expected in t, 10)
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)


def test_a_closed_client_says_nothing_when_collected(broker, caplog):
    cl = Client(broker.endpoint, "closed", create=True, **FAST)
    for i in range(1000):
        cl.publish("k", b"%d" % i)
    cl.close()
    with caplog.at_level(logging.WARNING, logger="zeps.client"):
        del cl
        gc.collect()
    assert "garbage-collected" not in caplog.text


def test_a_forked_child_leaves_its_parents_clients_alone_at_exit(broker):
    """The child's copy of the parent's client shares the parent's socket and ZeroMQ context:
    the child's exit must not close it (it would wait for a DETACH-OK that cannot come)."""
    r = run_script(FORK_THEN_PUBLISH, broker.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert "DETACH-OK" not in r.stderr and "zeps:" not in r.stderr, r.stderr
    msgs = read_all(broker.endpoint, "forked", 2)
    assert [m.body for m in msgs] == [b"before", b"after"]


def test_a_forked_childs_copy_raises_client_forked_and_the_parent_goes_on(broker):
    """Before, any call on the copy in the child spun for ever inside ZeroMQ."""
    r = run_script(FORK_THEN_CALL, broker.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines == ["publish: ClientForked", "flush: ClientForked", "info: ClientForked",
                     "next: ClientForked", "for: ClientForked", "consume: ClientForked",
                     "snapshot: ClientForked", "close: returned", "new client: returned",
                     "pool publish: ClientForked",
                     "parent: ['before', 'held', 'child-new', 'after']"], r.stdout
    msgs = read_all(broker.endpoint, "forked2", 4)
    assert [m.body for m in msgs] == [b"before", b"held", b"child-new", b"after"]


def test_a_forked_childs_consumer_raises_client_forked_and_hands_nothing_twice(broker):
    """Before, the child's copy handed out the parent's prefetched message (``next`` returned
    m1, which the parent handed out too) and then spun for ever in ``close``."""
    r = run_script(FORK_CONSUMER, broker.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [
        "next: ClientForked", "ack: ClientForked", "for: ClientForked", "batches: ClientForked",
        "close: returned", "closed member's next: ZepsError",    # closed, as in the parent
        "parent: ['m0', 'm1', 'm2', 'm3']"], r.stdout


def test_a_forked_childs_async_client_raises_client_forked(broker):
    """Before, the copy's ``publish`` returned and its message went nowhere (``flush`` waited
    out its timeout), its subscription handed out the parent's held message again, and an
    AsyncClient made in the child never connected (the parent's context)."""
    r = run_script(FORK_ASYNC, broker.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [
        "publish: ClientForked", "flush: ClientForked", "info: ClientForked",
        "next: ClientForked", "async for: ClientForked", "consume: ClientForked",
        "snapshot: ClientForked", "close: returned", "new client: returned",
        "parent: ['before', 'held', 'child-new', 'after']"], r.stdout
    msgs = read_all(broker.endpoint, "forked4", 4)
    assert [m.body for m in msgs] == [b"before", b"held", b"child-new", b"after"]
    with Client(broker.endpoint, "forked4", **FAST) as cl:
        assert cl.info().last == 4                    # nothing else from the child


def test_a_forked_child_that_drops_its_loop_leaves_the_parents_sockets_watched(broker):
    """Finalized in the child, the parent's asyncio sockets unregistered themselves from the
    epoll the child shares with the parent: the parent's loop no longer watched them (its next
    delivery came when a timer happened to look, 1 s later). The child's copy of the client
    keeps them, and they forget their loop (``lifetime.disown``)."""
    r = run_script(FORK_DROP_LOOP, broker.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ["still watched: True", "parent: after"], r.stdout


def test_a_snapshot_resumed_in_a_forked_child_raises_client_forked(start_broker):
    """The child may hand out what its copy had already received, then raises; the parent's
    iteration goes on to the end."""
    b = start_broker(None, "--key-index")
    r = run_script(FORK_SNAPSHOT, b.endpoint, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ["child: ClientForked", "parent: 300 True"], r.stdout
