"""What a look at the ACL costs the broker: the same whatever the number of rules and names
the ACL holds for other clients. An ACL of one rule per tenant is an ordinary one, and every
ATTACH, PRODUCER, name of a LIST-STREAMS page and attached client of a reload looks at it.
The work is counted as the Python lines run (a trace hook), not timed."""
from __future__ import annotations

import random
import sys

from zeps.broker.acl import parse_acl
from zeps.protocol import commands as c
from zeps.protocol import encode

from .core_harness import Core, make_fixture  # noqa: F401 (the make fixture)

ADMIN, READER = "A" * 40, "R" * 40


def acl(others: int):
    """``admin`` may do anything, ``r`` reads ``public.*``; ``others`` more clients, each with
    a rule of its own, and a rule for every client naming ``others`` prefixes."""
    lines = ["[clients]", f'admin = "{ADMIN}"', f'r = "{READER}"']
    lines += [f'c{i} = "{i:040d}"' for i in range(others)]
    lines += ["[[allow]]", 'clients = ["admin"]', 'publish = ["*"]', 'subscribe = ["*"]',
              'admin = ["*"]', "[[allow]]", 'clients = ["r"]', 'subscribe = ["public.*"]']
    for i in range(others):
        lines += ["[[allow]]", f'clients = ["c{i}"]', f'publish = ["c{i:05d}.*"]',
                  f'subscribe = ["c{i:05d}.*", "shared"]']
    every = [f'"o{i:05d}.*"' for i in range(others)] + ['"p"']
    lines += ["[[allow]]", 'clients = ["*"]', "subscribe = [" + ", ".join(every) + "]"]
    return parse_acl("\n".join(lines))


def lines_run(step) -> int:
    """The Python lines run while ``step()`` runs."""
    n = 0

    def trace(frame, event, _arg):
        nonlocal n
        if event == "line":
            n += 1
        return trace
    sys.settrace(trace)
    try:
        step()
    finally:
        sys.settrace(None)
    return n


def costs(make, others: int):
    """The lines run by a LIST-STREAMS page over 200 streams (100 hidden), an ATTACH, and a
    reload with 50 attached clients."""
    h = make(fsync="never", admin_burst=100_000, max_total_streams=10**6)
    rules = acl(others)
    h.core.set_acl(rules)
    h.core.identify(b"admin", ADMIN)
    for i in range(200):                 # a listing looks at each: half of them hidden
        name = f"{'public' if i % 2 else 'secret'}.{i:03d}"
        h.core.receive(b"admin", [encode(c.StreamCreate(name, 0, 0, 0, 0))], h.now)
    readers = [b"r%d" % i for i in range(50)]
    for ident in readers:
        h.core.identify(ident, READER)
        h.send(ident, c.Attach("public.001"))
    h.collect()
    h.box.clear()
    listing = lines_run(lambda: h.send(b"r0", c.ListStreamsPage("")))
    [page] = h.take(b"r0")
    assert len(page.streams) == 100
    h.core.identify(b"new", READER)
    attach = lines_run(lambda: h.send(b"new", c.Attach("public.003")))
    assert isinstance(h.take(b"new")[0], c.AttachOk)
    reload = lines_run(lambda: h.core.set_acl(rules))
    return listing, attach, reload


def test_a_look_at_the_acl_costs_the_same_whatever_rules_it_holds_for_others(make):
    """Each look walked every rule of the ACL: 3,000 other clients' rules made a page of
    LIST-STREAMS 93x dearer in lines run (0.3 s of the loop for 1,024 names with 5,000
    rules), an ATTACH 13x, and a reload with 50 attached clients 130x."""
    small, large = costs(make, 5), costs(make, 3000)
    for what, a, b in zip(("listing", "attach", "reload"), small, large):
        assert b <= a * 1.1 + 50, (what, a, b)


def test_merged_rights_grant_exactly_what_the_rules_grant():
    """The merged names (prefixes grouped by length) agree with each rule's own names."""
    rng = random.Random(7)
    alphabet = "ab."
    for _ in range(300):
        rules = []
        for _r in range(rng.randrange(1, 4)):
            names = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 4)))
                     + rng.choice(["", "*"]) for _ in range(rng.randrange(0, 4))]
            rules.append((rng.choice(["k", "*"]), names, rng.random() < 0.05))
        text = f'[clients]\nk = "{"K" * 40}"\n'
        for who, names, every in rules:
            subs = names + (["*"] if every else [])
            text += (f'[[allow]]\nclients = ["{who}"]\nsubscribe = ['
                     + ", ".join(f'"{n}"' for n in subs) + "]\n")
        a = parse_acl(text)
        for key in ("K" * 40, "X" * 40, None):
            for _s in range(10):
                stream = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 5)))
                want = any((who == "*" or key == "K" * 40)
                           and (every or stream in names
                                or any(n.endswith("*") and stream.startswith(n[:-1])
                                       for n in names))
                           for who, names, every in rules)
                assert a.may_subscribe(key, stream) is want, (text, key, stream)
