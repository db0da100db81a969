"""Codec hot path: encode a DELIVER, decode a PUBLISH — beside baselines measured in the same run.

Baselines: the bare minimum (one ``struct.pack``/``unpack_from`` of the header plus the same
concatenation or slicing, no checks), and msgpack of the same fields (a common alternative).

    python -m bench.bench_codec [--n 300000]
"""
from __future__ import annotations

import argparse
import struct
import timeit

import msgpack

from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_deliver

KEY = "eu.fr.paris"
BODY = b"x" * 100


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300_000)
    n = ap.parse_args(argv).n
    key = KEY.encode()
    pub_frame = encode(c.Publish(KEY, BODY))
    head = struct.Struct(">2sBQB")
    u32 = struct.Struct(">I")
    packed = msgpack.packb([KEY, BODY])

    def floor_encode():
        return b"".join((head.pack(b"\xaa\xa5", 7, 12345, len(key)), key, u32.pack(len(BODY)), BODY))

    def floor_decode():
        klen = pub_frame[3]
        blen = u32.unpack_from(pub_frame, 4 + klen)[0]
        return pub_frame[4:4 + klen].decode(), pub_frame[8 + klen:8 + klen + blen]

    cases = [
        ("encode DELIVER: zeps encode_deliver()", lambda: encode_deliver(12345, key, BODY)),
        ("encode DELIVER: zeps encode(Deliver(...))", lambda: encode(c.Deliver(12345, KEY, BODY))),
        ("encode DELIVER: baseline struct floor", floor_encode),
        ("encode DELIVER: baseline msgpack", lambda: msgpack.packb([12345, KEY, BODY])),
        ("decode PUBLISH: zeps decode()", lambda: decode(pub_frame)),
        ("decode PUBLISH: baseline struct floor", floor_decode),
        ("decode PUBLISH: baseline msgpack", lambda: msgpack.unpackb(packed)),
    ]
    assert floor_decode() == (KEY, BODY) and decode(pub_frame) == c.Publish(KEY, BODY)
    print(f"{n} calls each, key {len(key)} B, body {len(BODY)} B, best of 5\n")
    print("| operation | ns/call | calls/s |")
    print("|---|---:|---:|")
    for name, fn in cases:
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n
        print(f"| {name} | {best * 1e9:.0f} | {1 / best:,.0f} |")


if __name__ == "__main__":
    main()
