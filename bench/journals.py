"""Streams written with the journal library directly, not through the broker: the quickest way
to give the broker a stream of 10^7 messages (appends of 10,000 messages as batch records of 100,
as an SDK publishing with batches stores them; fsync ``never``, then one sync when the directory
is closed). The broker is started on the data directory afterwards.
"""
from __future__ import annotations

from zeps.journal import DataDir, JournalConfig
from zeps.protocol import decode
from zeps.protocol.batch import encode_publish_batch

from bench.systems import POOL, groups, messages

BATCH = 10_000
#: Messages per batch record: what an SDK publishing with batches (publish_batch of 100) stores.
GROUP = 100


def grow(data_dir: str, stream: str, upto: int, size: int) -> int:
    """Append the suite's :func:`~bench.systems.messages` of ``size`` bytes, cycled, to ``stream``
    in ``data_dir`` until it holds ``upto``; returns its last sequence. The data directory must
    not be in use by a broker."""
    with DataDir(data_dir, JournalConfig(fsync="never")) as dd:
        j = dd.journal(stream)
        records = [decode(encode_publish_batch(g)) for g in groups(size, GROUP)]
        while j.last_seq < upto:
            left = upto - j.last_seq
            if left >= BATCH:                  # BATCH is a multiple of POOL: the cycle goes on
                j.append_batch(records * (BATCH // POOL))
            else:
                pool = messages(size)
                j.append_batch([pool[i % POOL] for i in range(left)])
        dd.sync_all()
        return j.last_seq
