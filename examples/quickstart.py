"""ZEPS quick start: publish 10 messages with confirms, then read them back.

Start a broker first (``make run``, or ``zeps broker``), then::

    python examples/quickstart.py [--endpoint tcp://127.0.0.1:7470] [--stream quickstart]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

from zeps.clients import Client, ZepsError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:7470")
    parser.add_argument("--stream", default="quickstart")
    args = parser.parse_args()
    try:
        # Publish: confirms=True lets us wait until the broker says the messages are durable.
        with Client(args.endpoint, args.stream, confirms=True, timeout=5) as pub:
            first = pub.info().last + 1
            for i in range(10):
                pub.publish("greetings.en" if i % 2 else "greetings.fr", f"hello #{i}")
            last = pub.wait_for_confirms()
        print(f"published sequences {first}..{last} to stream {args.stream!r}")

        # Subscribe from the first of them: history is replayed, then it would continue live.
        with Client(args.endpoint, args.stream, timeout=5) as sub_client:
            sub = sub_client.subscribe("greetings.", from_seq=first)
            for _ in range(10):
                msg = sub.next(timeout=5)
                print(f"{msg.sequence:>6}  {msg.key:<14} {msg.body.decode()}")
    except ZepsError as e:
        print(f"quickstart: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
