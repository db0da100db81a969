"""Streams written with the journal library directly, not through the broker: the quickest way
to give the broker a stream of 10^7 messages (batches of 10,000 records, fsync ``never``, then one
sync when the directory is closed). The broker is started on the data directory afterwards.
"""
from __future__ import annotations

from zeps.journal import DataDir, JournalConfig

from bench.systems import KEY, body

BATCH = 10_000


def grow(data_dir: str, stream: str, upto: int, size: int) -> int:
    """Append messages of ``size`` bytes (key :data:`~bench.systems.KEY`) to ``stream`` in
    ``data_dir`` until it holds ``upto``; returns its last sequence. The data directory must
    not be in use by a broker."""
    with DataDir(data_dir, JournalConfig(fsync="never")) as dd:
        j = dd.journal(stream)
        batch = [(KEY, body(size))] * BATCH
        while j.last_seq < upto:
            j.append_batch(batch[:min(BATCH, upto - j.last_seq)])
        dd.sync_all()
        return j.last_seq
