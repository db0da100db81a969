"""Publish JSON order events to a ZEPS stream (the pipeline's producer).

Each event is ``{"order_id", "region", "amount", "event_time"}`` with key ``orders.<region>``;
event times spread over ``minutes`` minutes so the Spark job has several windows to fill.
Deterministic for a given seed, so the expected aggregates can be computed independently.

    python -m examples.pipeline.publisher --endpoint tcp://127.0.0.1:7470 --count 2000
"""
from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta, timezone
from typing import List, Tuple

from zeps.clients import Client

REGIONS = ("eu", "us", "apac")
BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def make_orders(count: int, minutes: int = 5, seed: int = 7) -> List[dict]:
    rnd = random.Random(seed)
    orders = []
    for i in range(count):
        t = BASE_TIME + timedelta(milliseconds=(i * minutes * 60_000) // max(count, 1))
        orders.append({
            "order_id": i + 1,
            "region": REGIONS[rnd.randrange(len(REGIONS))],
            "amount": round(rnd.uniform(5, 500), 2),
            "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        })
    return orders


def publish_orders(endpoint: str, stream: str, orders: List[dict]) -> int:
    """Publish with confirms; return the sequence of the last one (durable when this returns)."""
    msgs: List[Tuple[str, bytes]] = [
        (f"orders.{o['region']}", json.dumps(o, separators=(",", ":")).encode()) for o in orders]
    with Client(endpoint, stream, confirms=True) as c:
        c.publish_batch(msgs)
        return c.wait_for_confirms(timeout=30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:7470")
    ap.add_argument("--stream", default="orders")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--minutes", type=int, default=5)
    args = ap.parse_args(argv)
    last = publish_orders(args.endpoint, args.stream, make_orders(args.count, args.minutes))
    print(f"published {args.count} orders to {args.stream!r}; last sequence {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
