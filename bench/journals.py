"""Streams written with the journal library directly, not through the broker: the quickest way
to give the broker a stream of 10^7 messages (appends of 10,000 messages as batch records of 100,
as an SDK publishing with batches stores them; fsync ``never``, then one sync when the directory
is closed). The broker is started on the data directory afterwards.
"""
from __future__ import annotations

from zeps.journal import DataDir, JournalConfig
from zeps.protocol import decode
from zeps.protocol.batch import encode_publish_batch

from bench.systems import KEY, body

BATCH = 10_000
#: Messages per batch record: what an SDK publishing with batches (publish_batch of 100) stores.
GROUP = 100


def grow(data_dir: str, stream: str, upto: int, size: int) -> int:
    """Append messages of ``size`` bytes (key :data:`~bench.systems.KEY`) to ``stream`` in
    ``data_dir`` until it holds ``upto``; returns its last sequence. The data directory must
    not be in use by a broker."""
    with DataDir(data_dir, JournalConfig(fsync="never")) as dd:
        j = dd.journal(stream)
        group = decode(encode_publish_batch([(KEY, body(size))] * GROUP))
        while j.last_seq < upto:
            left = upto - j.last_seq
            if left >= BATCH:
                j.append_batch([group] * (BATCH // GROUP))
            else:
                j.append_batch([(KEY, body(size))] * left)
        dd.sync_all()
        return j.last_seq
