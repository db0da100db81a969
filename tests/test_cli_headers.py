"""Headers through ``zeps replay`` and ``zeps subscribe --json`` (issue 18 item 7): a message
with headers gets a ``headers`` list (values as bodies are: UTF-8 text or base64), from the
journal and through the broker alike; a message without keeps the JSON it always had."""
from __future__ import annotations

import json

from tests.test_cli import zeps
from zeps.clients import Client

HEADERS = [("uuid", bytes(range(240, 256))), ("ttl", b"30")]
WANT = [{"name": "uuid", "value": "8PHy8/T19vf4+fr7/P3+/w==", "encoding": "base64"},
        {"name": "ttl", "value": "30", "encoding": "utf8"}]


def test_replay_and_subscribe_json_keep_the_headers(broker):
    with Client(broker.endpoint, "s", confirms=True, timeout=10) as pub:
        pub.publish("k", b"with", headers=HEADERS)
        pub.publish("k", b"without")
        pub.wait_for_confirms(10)
    for source in (["--data-dir", broker.data_dir], ["--endpoint", broker.endpoint]):
        r = zeps("replay", "s", *source)
        assert r.returncode == 0, r.stderr
        got = [json.loads(line) for line in r.stdout.splitlines()]
        assert [(m["body"], m.get("headers")) for m in got] == [("with", WANT), ("without", None)]
        assert set(got[1]) == {"stream", "sequence", "key", "body", "encoding", "timestamp",
                               "time"}                        # as it always was
    r = zeps("subscribe", "s", "--json", "--from-seq", "1", "--count", "2",
             "--endpoint", broker.endpoint)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line).get("headers") for line in r.stdout.splitlines()] == [WANT, None]
