"""Stream name <-> directory name: never escapes the data directory, reversible."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.journal import DataDir, InvalidStreamNameError, JournalConfig, list_streams
from zeps.journal.names import stream_dir_name, stream_from_dir_name
from .property_examples import examples

DANGEROUS = ["../../etc", ".", "..", "...", "a/b", "/abs", "nul\x00byte", "\x00", ".hidden",
             "a/../..", "%2E%2E", "%", "LOCK", "back\\slash", "sp ace", "é", "日本",
             "-dash", "trailing.", "~home", "a" * 255]


@pytest.mark.parametrize("name", DANGEROUS)
def test_dangerous_names_stay_inside(tmp_path, name):
    d = stream_dir_name(name)
    assert d and "/" not in d and "\x00" not in d and not d.startswith(".")
    assert d not in (".", "..")
    assert os.path.dirname(os.path.join(str(tmp_path), d)) == str(tmp_path)
    assert stream_from_dir_name(d) == name


def test_examples():
    assert stream_dir_name("orders") == "orders"
    assert stream_dir_name("orders.eu-1_x") == "orders.eu-1_x"
    assert stream_dir_name("../../etc") == "%2E.%2F..%2Fetc"
    assert stream_dir_name(".") == "%2E"
    assert stream_dir_name("..") == "%2E."
    assert stream_dir_name("a%b") == "a%25b"
    assert stream_dir_name("é") == "%C3%A9"


@pytest.mark.parametrize("bad", ["", None, b"bytes", "é" * 128, "a" * 256])
def test_refused_names(bad):
    with pytest.raises(InvalidStreamNameError):
        stream_dir_name(bad)


@pytest.mark.parametrize("d", [".", "..", "", ".x", "%2e", "%2", "%ZZ", "a%2Fb%", "%C3",
                               "lost+found", "é", "%61"])
def test_non_canonical_dir_names_are_not_streams(d):
    assert stream_from_dir_name(d) is None


def test_list_streams_decodes_back(tmp_path):
    names = ["../../etc", ".", "..", "a/b", "orders", "日本", "nul\x00", ".hidden", "x" * 200,
             "LOCK", "/" * 86, "é" * 127, "%" * 255, "/" * 85 + "x"]
    with DataDir(tmp_path / "data", JournalConfig(fsync="never")) as dd:
        for n in names:
            dd.journal(n).append_batch([("k", n.encode())])
        os.mkdir(tmp_path / "data" / "lost+found")          # not a stream
        (tmp_path / "data" / "stray.txt").write_text("x")
        assert dd.streams() == sorted(names)
        assert list_streams(str(tmp_path / "data")) == sorted(names)
        for n in names:
            assert dd.reader(n).read_batch(1)[0].body == n.encode()
    # nothing was created outside the data directory
    assert sorted(os.listdir(tmp_path)) == ["data"]


@settings(max_examples=examples(300), deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_property_round_trip(name):
    raw = name.encode("utf-8", "surrogatepass")
    d = stream_dir_name(name)
    assert "/" not in d and "\x00" not in d and not d.startswith(".") and len(d) <= 255
    assert d != "LOCK"
    if sum(1 if (chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-")) else 3
           for b in raw) + (2 if name.startswith(".") else 0) > 255:
        assert "~" in d                  # long: hashed; the real name lives in NAME (see above)
        assert stream_from_dir_name(d) is None
        return
    assert stream_from_dir_name(d) == name


def test_reserved_and_long_names_do_not_collide():
    assert stream_dir_name("LOCK") == "%4COCK" and stream_from_dir_name("%4COCK") == "LOCK"
    a, b = stream_dir_name("/" * 86), stream_dir_name("/" * 85 + "%")
    assert a != b and len(a) <= 255 and len(b) <= 255
    assert stream_dir_name("/" * 86) == a             # stable: the same directory every time
