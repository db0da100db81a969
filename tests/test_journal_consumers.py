"""Durable consumers' files (zeps.journal.consumers, issue 19): the settings and state round
trip, removal, bad files ignored (never half-loaded, never an exception), leftover temporary
files removed, and the background Saver (coalescing, order per consumer, flush, errors)."""
from __future__ import annotations

import json
import logging
import os

import pytest
from hypothesis import given, settings, strategies as st

from zeps.journal import consumers as cs
from zeps.journal.consumers import ConsumerConfig, ConsumerState, Saver
from zeps.protocol.commands import ACK_ALL, CONSUMER_KEY_ORDER, START_TIME
from .property_examples import examples

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def config(name="orders", **kw):
    return ConsumerConfig(name, **kw)


def state(n=0):
    return ConsumerState(next=100 + n, outstanding={5: 1, 7: n + 2, 90 + n: 3}, skipped=n,
                         counters={"acked": n, "redelivered": 1, "dead_lettered": 0,
                                   "bad_acks": 2})


def file_of(d, name="orders"):
    return os.path.join(cs.consumers_dir(d), name + ".json")


def test_config_round_trips_with_every_field():
    c = ConsumerConfig("a-b_c.1", patterns=("x.", "~^y[0-9]+$"), start=START_TIME,
                       start_value=2**63, ack=ACK_ALL, ack_wait_ms=5, max_deliver=3,
                       max_ack_pending=65536, dead_letter="dlq", flags=CONSUMER_KEY_ORDER)
    assert ConsumerConfig.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert ConsumerConfig.from_json(config().to_json()) == config()


@pytest.mark.parametrize("change", [
    {"name": None}, {"name": ""}, {"name": ".hidden"}, {"name": "a/b"}, {"name": "x" * 65},
    {"patterns": "abc"}, {"patterns": [1]}, {"start": 4}, {"start": -1}, {"start": True},
    {"ack": 3}, {"ack_wait_ms": 1.5}, {"max_deliver": 2**64}, {"dead_letter": 7},
    {"flags": "1"}])
def test_a_bad_config_is_refused(change):
    d = config().to_json()
    d.update(change)
    with pytest.raises(ValueError):
        ConsumerConfig.from_json(d)


@pytest.mark.parametrize("missing", [f for f in config().to_json()])
def test_a_config_missing_a_field_is_refused(missing):
    d = config().to_json()
    del d[missing]
    with pytest.raises(ValueError, match=missing):
        ConsumerConfig.from_json(d)


def test_a_new_state_has_every_counter_at_zero_and_copy_shares_nothing():
    s = ConsumerState(next=1, outstanding={})
    assert s.counters == dict.fromkeys(cs.COUNTERS, 0)
    s2 = state()
    c = s2.copy()
    c.outstanding[1] = 1
    c.counters["acked"] += 1
    assert c != s2 and s2 == state()


states = st.builds(
    ConsumerState, next=U64, outstanding=st.dictionaries(U64, U64, max_size=50),
    skipped=U64, counters=st.dictionaries(st.sampled_from(cs.COUNTERS), U64))


@settings(max_examples=examples(80), deadline=None)
@given(s=states)
def test_state_round_trips_through_the_file(tmp_path_factory, s):
    d = tmp_path_factory.mktemp("s")
    cs.save(d, config(), s, sync=False)
    got = cs.load_all(d)
    expected = ConsumerState(s.next, s.outstanding, s.skipped,
                             {**dict.fromkeys(cs.COUNTERS, 0), **s.counters})
    assert got == {"orders": (config(), expected)}
    with open(file_of(d), "rb") as f:
        raw = json.load(f)
    runs = raw["state"]["outstanding"]
    assert raw["version"] == (2 if any(len(r) == 3 for r in runs) else 1)
    assert expand(runs) == sorted([q, n] for q, n in s.outstanding.items())
    for (q, n, *k), (r, m, *_) in zip(runs, runs[1:]):      # each run as long as it can be
        assert not (r == q + (k[0] if k else 1) and m == n) and (not k or k[0] > 1)


def expand(runs) -> list:
    """The [sequence, deliveries] pairs of a file's runs."""
    return [[q + i, n] for q, n, *k in runs for i in range(k[0] if k else 1)]


def test_outstanding_runs_are_one_entry_a_run_and_a_version_1_file_is_read(tmp_path):
    """65,536 messages handed out once and not acknowledged are one entry (they were 65,536:
    some 100 ms of encoding a save); a file of pairs, as version 1 wrote it, still loads."""
    out = {q: 1 for q in range(10, 10 + 65_536)}
    out.update({5: 2, 10 + 65_536: 3})
    s = ConsumerState(next=70_000, outstanding=out)
    data = cs.encode(config(), s)
    assert json.loads(data)["state"]["outstanding"] == [[5, 2], [10, 1, 65_536], [65_546, 3]]
    assert len(data) < 400
    v1 = json.dumps({"version": 1, "config": config().to_json(),
                     "state": {"next": 9, "outstanding": [[3, 1], [4, 1], [7, 2]],
                               "skipped": 0, "counters": {}}}).encode()
    assert cs.decode(v1)[1].outstanding == {3: 1, 4: 1, 7: 2}


def test_save_replaces_the_file_and_load_all_reads_every_consumer(tmp_path):
    assert cs.load_all(tmp_path) == {}               # no consumers directory
    cs.save(tmp_path, config("a"), state(1))
    cs.save(tmp_path, config("b", patterns=("k",)), state(2))
    cs.save(tmp_path, config("a"), state(3))
    assert cs.load_all(tmp_path) == {"a": (config("a"), state(3)),
                                     "b": (config("b", patterns=("k",)), state(2))}
    assert sorted(os.listdir(cs.consumers_dir(tmp_path))) == ["a.json", "b.json"]


def test_save_refuses_a_bad_name_and_never_makes_the_stream_directory(tmp_path):
    with pytest.raises(ValueError):
        cs.save(tmp_path, config("../escape"), state())
    with pytest.raises(ValueError):
        cs.remove(tmp_path, "../escape")
    gone = tmp_path / "deleted-stream"
    with pytest.raises(FileNotFoundError):
        cs.save(gone, config(), state())
    assert not gone.exists()


def test_remove_is_idempotent(tmp_path):
    cs.save(tmp_path, config("a"), state())
    cs.save(tmp_path, config("b"), state())
    cs.remove(tmp_path, "a")
    cs.remove(tmp_path, "a")
    cs.remove(tmp_path / "no-such-stream", "a")
    assert list(cs.load_all(tmp_path)) == ["b"]


def test_remove_takes_a_leftover_temporary_file_with_it(tmp_path):
    cs.save(tmp_path, config(), state())
    (tmp_path / "consumers" / "orders.json.tmp").write_bytes(b"{")
    cs.remove(tmp_path, "orders")
    assert os.listdir(cs.consumers_dir(tmp_path)) == []


def _valid_bytes():
    return cs.encode(config(), state())


def _edited(**kw):
    d = json.loads(_valid_bytes())
    for where, change in kw.items():
        if where == "top":
            d.update(change)
        else:
            d[where].update(change)
    return json.dumps(d).encode()


BAD_FILES = {
    "empty": b"",
    "not json": b"\x00\xff garbage",
    "a list": b"[1, 2]",
    "torn": _valid_bytes()[:-1],
    "torn in half": _valid_bytes()[:len(_valid_bytes()) // 2],
    "version 3": _edited(top={"version": 3}),
    "no state": _edited(top={"state": None}),
    "no config": _edited(top={"config": "x"}),
    "negative sequence": _edited(state={"outstanding": [[-1, 1]]}),
    "float deliveries": _edited(state={"outstanding": [[3, 1.0]]}),
    "bool sequence": _edited(state={"outstanding": [[True, 1]]}),
    "short pair": _edited(state={"outstanding": [[3]]}),
    "a sequence twice": _edited(state={"outstanding": [[3, 1], [3, 2]]}),
    "runs overlapping": _edited(state={"outstanding": [[3, 1, 2], [4, 1]]}),
    "a run of none": _edited(state={"outstanding": [[3, 1, 0]]}),
    "a run too long": _edited(state={"outstanding": [[3, 1, cs.MAX_OUTSTANDING + 1]]}),
    "four numbers": _edited(state={"outstanding": [[3, 1, 1, 1]]}),
    "a run past 2**64": _edited(state={"outstanding": [[2**64 - 1, 1, 2]]}),
    "next too large": _edited(state={"next": 2**64}),
    "negative skipped": _edited(state={"skipped": -1}),
    "counters a list": _edited(state={"counters": [1]}),
    "string counter": _edited(state={"counters": {"acked": "1"}}),
    "no next": json.dumps({"version": 1, "config": config().to_json(),
                           "state": {"outstanding": [], "skipped": 0, "counters": {}}}).encode(),
    "bad ack": _edited(config={"ack": 9}),
}


@pytest.mark.parametrize("why", list(BAD_FILES))
def test_a_bad_file_is_ignored_with_a_warning_and_the_others_load(tmp_path, caplog, why):
    cs.save(tmp_path, config("good"), state())
    (tmp_path / "consumers" / "orders.json").write_bytes(BAD_FILES[why])
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        assert cs.load_all(tmp_path) == {"good": (config("good"), state())}
    assert "orders.json" in caplog.text


def test_every_torn_prefix_of_a_file_is_ignored(tmp_path):
    data = _valid_bytes()
    p = tmp_path / "consumers"
    p.mkdir()
    for n in range(0, len(data), 7):
        (p / "orders.json").write_bytes(data[:n])
        assert cs.load_all(tmp_path) == {}
    (p / "orders.json").write_bytes(data)
    assert cs.load_all(tmp_path) == {"orders": (config(), state())}


def test_a_file_whose_name_is_not_its_consumers_is_ignored(tmp_path, caplog):
    cs.save(tmp_path, config("a"), state())
    os.rename(file_of(tmp_path, "a"), file_of(tmp_path, "b"))
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        assert cs.load_all(tmp_path) == {}
    assert "holds consumer 'a'" in caplog.text


def test_odd_entries_are_ignored(tmp_path, caplog):
    cs.save(tmp_path, config("a"), state())
    p = tmp_path / "consumers"
    (p / ".hidden.json").write_bytes(_valid_bytes())     # not a consumer name
    (p / "notes.txt").write_bytes(b"x")
    (p / "dir.json").mkdir()
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        assert list(cs.load_all(tmp_path)) == ["a"]
    for entry in (".hidden.json", "notes.txt", "dir.json"):
        assert entry in caplog.text


def test_a_file_over_the_bound_is_ignored_unread(tmp_path, caplog):
    p = tmp_path / "consumers"
    p.mkdir()
    with open(p / "orders.json", "wb") as f:    # sparse: a valid start, then zeros
        f.write(_valid_bytes())
        f.truncate(cs.MAX_FILE + 1)
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        assert cs.load_all(tmp_path) == {}
    assert f"more than {cs.MAX_FILE}" in caplog.text


def test_save_refuses_a_state_whose_file_would_be_over_the_bound(tmp_path):
    big = ConsumerState(next=1, outstanding={q: 2**63 + (q & 1)      # no two make a run
                                             for q in range(2**63, 2**63 + 500_000)})
    with pytest.raises(ValueError, match="more than"):
        cs.save(tmp_path, config(), big)


def test_a_leftover_temporary_file_is_ignored_and_removed(tmp_path, caplog):
    cs.save(tmp_path, config(), state(1))
    tmp = tmp_path / "consumers" / "orders.json.tmp"
    tmp.write_bytes(cs.encode(config(), state(2))[:40])
    (tmp_path / "consumers" / "other.json.tmp").write_bytes(cs.encode(config("other"), state()))
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        assert cs.load_all(tmp_path) == {"orders": (config(), state(1))}
    assert sorted(os.listdir(tmp_path / "consumers")) == ["orders.json"]
    assert "orders.json.tmp" in caplog.text


# ----------------------------------------------------------------------------- the Saver

@pytest.fixture
def saver():
    s = Saver(sync=False)
    yield s
    s.close()


def test_the_saver_writes_and_flush_waits_for_it(tmp_path, saver):
    saver.submit(tmp_path, config(), state(1))
    assert saver.flush(timeout=30)
    assert cs.load_all(tmp_path) == {"orders": (config(), state(1))}
    saver.remove(tmp_path, "orders")
    assert saver.flush(timeout=30)
    assert cs.load_all(tmp_path) == {}
    assert saver.flush(timeout=30)          # nothing pending: at once
    assert (saver.errors, saver.written) == (0, 2)


def test_the_saver_coalesces_a_consumers_submits_to_the_newest(tmp_path, saver):
    with saver._cond:                       # the thread cannot take anything meanwhile
        for n in range(1000):
            saver.submit(tmp_path, config("a"), state(n))
            saver.submit(tmp_path, config("b"), state(n + 1))
    assert saver.flush(timeout=30)
    assert cs.load_all(tmp_path) == {"a": (config("a"), state(999)),
                                     "b": (config("b"), state(1000))}
    assert saver.written == 2


def test_the_saver_keeps_many_submits_in_flight_ending_with_the_newest(tmp_path, saver):
    for n in range(300):
        saver.submit(tmp_path, config(), state(n))
    assert saver.flush(timeout=30)
    assert cs.load_all(tmp_path) == {"orders": (config(), state(299))}
    assert 1 <= saver.written <= 300 and saver.errors == 0


@pytest.mark.parametrize("held", [True, False], ids=["coalesced", "one by one"])
def test_the_saver_keeps_the_order_of_submits_and_removes(tmp_path, saver, held):
    def run(ops):
        if held:
            with saver._cond:
                ops()
        else:
            ops()
        assert saver.flush(timeout=30)
        return cs.load_all(tmp_path)

    def submit_remove():
        saver.submit(tmp_path, config(), state(1))
        saver.remove(tmp_path, "orders")
    assert run(submit_remove) == {}

    def submit_remove_submit():
        saver.submit(tmp_path, config(), state(1))
        saver.remove(tmp_path, "orders")
        saver.submit(tmp_path, config(max_deliver=5), state(2))
    assert run(submit_remove_submit) == {"orders": (config(max_deliver=5), state(2))}

    def remove_then_another_submits():
        saver.remove(tmp_path, "orders")
        saver.submit(tmp_path, config("other"), state(3))
    assert run(remove_then_another_submits) == {"other": (config("other"), state(3))}
    assert saver.errors == 0


def test_the_saver_counts_a_failed_write_and_goes_on(tmp_path, saver, caplog):
    gone = tmp_path / "deleted-stream"
    with caplog.at_level(logging.WARNING, logger="zeps.journal"):
        saver.submit(gone, config(), state())
        saver.submit(tmp_path, config(), state())
        assert saver.flush(timeout=30)
    assert saver.errors == 1 and saver.written == 1
    assert not gone.exists()                # a deleted stream's directory is not made again
    assert "cannot save consumer 'orders'" in caplog.text
    assert list(cs.load_all(tmp_path)) == ["orders"]


def test_close_writes_what_is_pending_and_refuses_more(tmp_path):
    s = Saver(sync=True)
    with s._cond:
        s.submit(tmp_path, config(), state(4))
    s.close()
    s.close()
    assert cs.load_all(tmp_path) == {"orders": (config(), state(4))}
    with pytest.raises(RuntimeError):
        s.submit(tmp_path, config(), state(5))
    assert s.flush(timeout=0)


def test_a_save_that_failed_is_tried_again_without_a_newer_submit(tmp_path, caplog):
    """A consumer whose save failed (a full disk, an I/O error) and that then went quiet kept its
    stale file: a restart handed out again what had been acknowledged (found by review). The
    Saver tries it again until it is written; a stream deleted meanwhile is not made again."""
    from tests.measure import wait_for
    s = Saver(sync=False, retry_after=0.01)
    try:
        blocker = tmp_path / "consumers"
        blocker.write_bytes(b"not a directory")          # every save fails while it is there
        with caplog.at_level(logging.WARNING, logger="zeps.journal"):
            s.submit(tmp_path, config(), state(7))
            assert wait_for(lambda: s.errors, lambda n: n >= 3, 30) >= 3
            blocker.unlink()                             # the disk is well again
            assert wait_for(lambda: cs.load_all(tmp_path), bool, 30) == {
                "orders": (config(), state(7))}
        assert caplog.text.count("cannot save consumer 'orders'") == 1
        assert "saved again" in caplog.text
        gone = tmp_path / "deleted-stream"
        s.submit(gone, config(), state(1))                # its directory is not there
        assert s.flush(timeout=30) and not s._failed and not gone.exists()
    finally:
        s.close()
