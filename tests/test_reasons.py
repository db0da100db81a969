"""Refusals as codes and fields (REASONS-SELECT, ERROR; zeps/protocol/reasons.py), in-process:
the codec, the broker core (tests/core_harness.py) and the client's peering, no sockets.

A ZEPS/1 client gets INVALID, its text cut at 255 bytes, exactly as before; a client that sent
REASONS-SELECT gets ERROR, nothing cut, and the SDK acts on its code and fields instead of
parsing the text back. No text sent to a client names a server path. The same against a real
broker process: tests/test_reasons_broker.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core_harness import Core, core_fixture, make_fixture  # noqa: F401 (fixtures)
from tests.test_client_peering import deliver, feed, peering, sent
from zeps.clients.errors import InvalidError, NoStream, PatternRemoved
from zeps.clients.peering import ABSENT
from zeps.clients.requests import RequestKind
from zeps.protocol import LATEST_LIVE, ProtocolError, decode, encode, encode_invalid
from zeps.protocol import commands as c
from zeps.protocol.deliver import deliver_cost
from zeps.protocol.reasons import (LABELS, PATTERN_REMOVED, Code, Reason, label,
                                   without_paths)

#: The longest pattern a SUBSCRIBE can carry (a ZEPS string: 255 bytes), of characters that
#: repr() writes as 4 each: the reason naming it is over 1,000 characters.
LONG_REGEX = "~" + "\x01" * 254


def old_pattern_removed_text(pattern: str, strikes: int = 3) -> str:
    """What the broker said before REASONS-SELECT existed, as the INVALID a ZEPS/1 client
    still gets."""
    return f"{PATTERN_REMOVED}regular expression {pattern[1:]!r} timed out {strikes} times"


# ------------------------------------------------------------------ codec

def test_the_new_commands_have_the_bytes_docs_protocol_md_gives():
    assert encode(c.ReasonsSelect()).hex() == "aaa53e"
    assert encode(c.ReasonsSelectOk()).hex() == "aaa53f"
    assert encode(c.Error(4, ("~a",), "x")).hex() == \
        "aaa540" "0004" "0001" "00000002" "7e61" "00000001" "78"


@given(st.integers(0, 0xFFFF), st.lists(st.text(min_size=200, max_size=2000), max_size=3),
       st.text(min_size=300, max_size=3000))
def test_an_error_carries_long_fields_and_text_whole(code, fields, text):
    cmd = c.Error(code, tuple(fields), text)
    assert decode(encode(cmd)) == cmd


def test_a_forged_field_count_is_refused_before_anything_is_read():
    frame = bytes.fromhex("aaa540" "0004" "ffff") + b"\x00" * 16
    with pytest.raises(ProtocolError, match="truncated ERROR"):
        decode(frame)


def test_invalid_is_still_cut_at_255_bytes():
    text = old_pattern_removed_text(LONG_REGEX)
    assert len(text) > 1000
    cut = decode(encode_invalid(text)).reason
    assert len(cut.encode()) == 255 and cut.endswith("...") and text.startswith(cut[:-3])


# ------------------------------------------------------------------ reasons

def test_each_constructor_gives_the_code_its_prefix_says():
    reasons = [Reason.not_attached("CREDIT"), Reason.limit("max_clients", 3),
               Reason.limit("admin_rate", 2.5), Reason.pattern_removed("~a", 3),
               Reason.not_allowed("key 'k'", "publish", "s"),
               Reason.window_too_small(7, 900, 100), Reason.no_stream("s"),
               Reason.no_stream("s", created_on_attach=False),
               Reason.publish_rejected(Reason.not_allowed("key 'k'", "publish", "s")),
               Reason.publish_rejected("body of 9 bytes is over the broker's limit of 8"),
               Reason.failed("cannot open stream 's'", OSError(13, "Permission denied", "/x/s"))]
    for r in reasons:
        assert Reason.of(r.text).code is r.code and label(r.text) == r.label in LABELS
    assert Reason.limit("admin_rate", 2.5).fields == ("admin_rate", "2.5")
    assert Reason.publish_rejected(Reason.not_allowed("k", "publish", "s")).fields == (
        "not_allowed", "publish", "s")
    assert Reason.pattern_removed(LONG_REGEX, 3).text == old_pattern_removed_text(LONG_REGEX)


def test_a_failure_is_told_without_the_paths_in_it():
    assert without_paths("'/srv/zeps data/x' exists and is not a directory") == \
        "<path> exists and is not a directory"
    assert without_paths("cannot create segment /srv/d/x/00000001.log: No space left") == \
        "cannot create segment <path>: No space left"
    assert without_paths("[Errno 13] Permission denied: \"/srv/it's/x\"") == \
        "[Errno 13] Permission denied: <path>"
    assert without_paths("entry 1/2 of a/b: 2^64-1 / 3") == "entry 1/2 of a/b: 2^64-1 / 3"
    assert Reason.failed("cannot open stream '/s'", OSError(2, "No such file", "/a/b")).text \
        == "cannot open stream '/s': [Errno 2] No such file: <path>"


# ------------------------------------------------------------------ the broker core

def _removed(h: Core, *idents: bytes) -> dict:
    """Subscribe each client to LONG_REGEX, let it strike out (as the matcher reports a match
    that ran out of time), and return what each got."""
    for ident in idents:
        h.send(ident, c.Attach("s"), c.Credit(1 << 20), c.Subscribe(LONG_REGEX, LATEST_LIVE))
        assert c.SubscribeOk() in h.take(ident)
    for _ in range(3):
        h.core.streams["s"].regex_timed_out(LONG_REGEX, "k")
    h.publish("k")
    return {ident: h.take(ident) for ident in idents}


def test_a_client_that_selected_reasons_is_told_the_removed_regex_in_full(core):
    core.send(b"x", c.ReasonsSelect())
    assert core.take(b"x") == [c.ReasonsSelectOk()]
    got = _removed(core, b"x", b"plain")
    text = old_pattern_removed_text(LONG_REGEX)
    assert got[b"x"] == [c.Error(Code.PATTERN_REMOVED, (LONG_REGEX,), text)]
    # a ZEPS/1 client: INVALID, exactly the bytes it got before the extension
    assert got[b"plain"] == [decode(encode_invalid(text))]
    assert core.core.invalids["pattern_removed"] == 2


def test_reasons_select_is_allowed_before_attach_and_lasts_for_the_connection(core):
    core.send(b"x", c.ReasonsSelect(), c.Credit(5), c.Attach("s"), c.Detach(),
              c.Subscribe("", 0))
    assert core.take(b"x") == [
        c.ReasonsSelectOk(), c.Error(Code.NOT_ATTACHED, ("CREDIT",), "not attached: CREDIT before ATTACH"),
        c.AttachOk(), c.DetachOk(),
        c.Error(Code.NOT_ATTACHED, ("SUBSCRIBE",), "not attached: SUBSCRIBE before ATTACH")]
    core.send(b"y", c.Credit(5))                              # another client: ZEPS/1 as ever
    assert core.take(b"y") == [c.Invalid("not attached: CREDIT before ATTACH")]


def test_every_kind_of_refusal_comes_with_its_code_and_fields(make):
    h = make(max_subscriptions=1, max_message=10, auto_create=False)
    h.send(b"a", c.ReasonsSelect(), c.Attach("nope"), c.StreamCreate("s"), c.Attach("s"),
           c.Publish("k", b"x" * 11), c.Subscribe("a", 0), c.Subscribe("b", 0))
    got = [m for m in h.take(b"a") if isinstance(m, c.Error)]
    assert [(m.code, m.fields) for m in got] == [
        (Code.NO_STREAM, ("nope",)),
        (Code.PUBLISH_REJECTED, ("other",)),
        (Code.LIMIT, ("max_subscriptions", "1"))]
    assert all(len(m.text) > 20 for m in got)


def test_no_refusal_names_a_server_path_the_log_does(core):
    root = str(Path(core.datadir.path).resolve())
    (Path(core.datadir.path) / "blocked").write_text("a file where the stream's directory goes")
    core.send(b"plain", c.Attach("blocked"))
    core.send(b"x", c.ReasonsSelect(), c.Attach("blocked"))
    [plain] = core.take(b"plain")
    [_ok, structured] = core.take(b"x")
    assert plain.reason.startswith("cannot open stream 'blocked': ")
    assert structured.text == plain.reason and structured.code == Code.OTHER
    for text in (plain.reason, structured.text):
        assert root not in text and core.datadir.path not in text and "/" not in text, text
    assert root in core.logged("attach_failed")[0]["error"]          # the operator sees it


# ------------------------------------------------------------------ the client's peering

def settle(p, stop=(RequestKind.SUBSCRIBE, RequestKind.RESUBSCRIBE)) -> list:
    """Answer the peering's requests as a broker with REASONS-SELECT and none of the later
    extensions would (up to a SUBSCRIBE); what it sent meanwhile."""
    out = sent(p)
    while p.outstanding and p.outstanding[0].kind not in stop:
        kind = p.outstanding[0].kind
        feed(p, {RequestKind.REASONS_SELECT: c.ReasonsSelectOk(), RequestKind.ATTACH: c.AttachOk()}.get(
            kind, c.Invalid("unknown command")))
        out += sent(p)
    return out


def attached_selecting(**kw):
    p = peering(reasons=True, **kw)
    assert p.outbox[0] == encode(c.ReasonsSelect())           # ATTACH's refusal is coded too
    settle(p)
    assert p.attached
    return p


def test_the_peering_drops_a_removed_pattern_the_error_names_and_never_resubscribes_it():
    p = attached_selecting()
    for pattern in ("eu.", LONG_REGEX):
        p.subscribe(pattern, 0, False, 0.0)
        feed(p, c.SubscribeOk())
    p.start_delivery()
    r = Reason.pattern_removed(LONG_REGEX, 3)
    feed(p, c.Error(r.code, r.fields, r.text))
    with pytest.raises(PatternRemoved) as e:
        p.check()
    assert e.value.pattern == LONG_REGEX and e.value.code is Code.PATTERN_REMOVED
    assert list(p.patterns) == ["eu."]
    deliver(p, 1, key="eu.fr")
    assert [m.key for m in p.take()] == ["eu.fr"]
    p.connection_lost("test")
    p.reconnect(1.0)
    out = settle(p, stop=())
    assert out[0] == c.ReasonsSelect() and c.Attach("s") in out
    assert [x for x in out if isinstance(x, c.Subscribe)] == [c.Subscribe("eu.", 1)]


def test_the_same_cut_invalid_from_an_older_broker_names_no_pattern():
    """Without the extension (the text cut at 255 bytes) the SDK can only say so: this is what
    REASONS-SELECT fixes."""
    p = peering()
    sent(p)
    feed(p, c.AttachOk())
    p.subscribe(LONG_REGEX, 0, False, 0.0)
    feed(p, c.SubscribeOk())
    feed(p, decode(encode_invalid(old_pattern_removed_text(LONG_REGEX))))
    with pytest.raises(PatternRemoved) as e:
        p.check()
    assert e.value.pattern is None


def test_window_advice_is_read_from_its_fields():
    p = attached_selecting(window=1000)
    p.subscribe("", 0, False, 0.0)
    feed(p, c.SubscribeOk())
    p.start_delivery()
    r = Reason.window_too_small(7, 5000, 1000)
    feed(p, c.Error(r.code, r.fields, "credit window too small: (text a program need not read)"))
    assert p.credit_window == 2 * 5000 and p.error is None


def test_an_older_broker_answers_reasons_select_with_invalid_and_the_attach_goes_on():
    p = peering(reasons=True)
    sent(p)
    feed(p, c.Invalid("unknown command 62"))
    feed(p, c.AttachOk())
    assert p.attached and p.attach_error is None


def test_a_refused_attach_raises_by_code():
    p = peering(reasons=True)
    sent(p)
    feed(p, c.ReasonsSelectOk())
    r = Reason.no_stream("s", created_on_attach=False)
    feed(p, c.Error(r.code, r.fields, r.text))
    # no stream: kept for the reads, which raise it (readers do not create streams)
    assert p.state is ABSENT and p.attach_error is None
    err = p.no_stream("SUBSCRIBE")
    assert isinstance(err, NoStream) and err.fields == ("s",) and err.reason == r.text


def test_a_code_this_side_does_not_know_is_other_and_answers_the_request():
    p = attached_selecting()
    info = p.request(c.StreamInfo(), RequestKind.INFO, 0.0)
    feed(p, c.Error(999, ("a",), "a refusal of a newer broker"))
    assert isinstance(info.error, InvalidError) and info.error.code is Code.OTHER
    assert info.error.fields == ("a",)


def test_a_window_advice_costs_exactly_what_deliver_costs():
    assert Reason.window_too_small(1, deliver_cost(3, 10), 5).fields[1] == str(deliver_cost(3, 10))


def test_every_limit_the_broker_names_has_its_text():
    """Each ``Reason.limit("name", ...)`` in zeps/ names a limit the reasons know: one that did
    not (``max_consumers``, ``max_members``) raised KeyError where the client should have got
    its INVALID "limit: ..." (the core logged an internal error instead)."""
    import ast

    from zeps.protocol import reasons
    named = set()
    for path in Path(reasons.__file__).resolve().parents[1].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "limit" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "Reason" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                named.add(node.args[0].value)
    assert {"max_clients", "max_consumers", "max_members", "max_total_consumers"} <= named
    assert named - set(reasons._LIMITS) == set()
    for name in named:
        assert Reason.limit(name, 1).text.startswith("limit: ")
