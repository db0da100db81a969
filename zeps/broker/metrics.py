"""Prometheus metrics of the broker (``prometheus-client``), served on ``/metrics``.

Nothing is counted on the hot path for them: the core and its streams keep plain integer
counters (``zeps.broker.stream.COUNTERS``, ``BrokerCore.invalids``), and a custom collector reads
them, through :mod:`zeps.broker.monitor`, when Prometheus scrapes. The one metric fed as things
happen is the fsync latency histogram: the I/O shell times each ``Journal.sync`` it runs in the
thread pool (``--fsync interval``) and calls :meth:`Metrics.observe_fsync`.

Series (``stream`` and ``client`` labels as in ``/streamz`` and ``/connz``):

=====================================  =======  ====================================================
``zeps_messages_in_total``             counter  messages appended, every stream, since start (a
                                                deleted stream's traffic stays counted: totals
                                                never go down)
``zeps_messages_out_total``            counter  DELIVERs produced, every stream, since start
``zeps_bytes_in_total`` / ``_out``     counter  their bytes as credit counts them (seq, key, body)
``zeps_streams_deleted_total``         counter  streams deleted (STREAM-DELETE) since start
``zeps_messages_deleted_total``        counter  messages the deleted streams held
``zeps_stream_messages_in_total``      counter  per open stream (from 0 when it was opened)
``zeps_stream_messages_out_total``     counter  per open stream
``zeps_stream_bytes_in_total`` / out   counter  per open stream
``zeps_stream_head_sequence``          gauge    last sequence in the journal
``zeps_stream_first_sequence``         gauge    first sequence kept (retention)
``zeps_stream_size_bytes``             gauge    journal size on disk
``zeps_stream_confirms_pending``       gauge    publishes appended, not yet confirmed durable
``zeps_clients``                       gauge    clients by ``stream`` and ``mode`` (monitor.MODES)
``zeps_stream_max_lag_messages``       gauge    the most any subscriber of the stream is behind
``zeps_subscriber_lag_messages``       gauge    per subscriber (the MAX_LAG_SERIES most behind)
``zeps_confirms_pending``              gauge    every stream
``zeps_stream_consumers``              gauge    durable consumers of the open stream (loaded)
``zeps_consumer_lag_messages``         gauge    per consumer (``stream``, ``consumer``; the
                                                MAX_CONSUMER_SERIES most behind): head - floor
``zeps_consumer_lag_seconds``          gauge    age of its first message above the floor,
                                                relative to the stream's newest
``zeps_consumer_pending``              gauge    messages its members hold unacknowledged
``zeps_consumer_outstanding``          gauge    pending plus those waiting to go again
``zeps_consumer_members``              gauge    members (peerings that CONSUMEd)
``zeps_consumer_delivered_total``      counter  messages handed to members (each delivery)
``zeps_consumer_acked_total``          counter  messages acknowledged
``zeps_consumer_redelivered_total``    counter  messages given again (ack wait, NAK, a member
                                                gone)
``zeps_consumer_dead_lettered_total``  counter  messages sent to the dead-letter stream after
                                                max_deliver
``zeps_consumer_dropped_total``        counter  messages dropped after max_deliver (no
                                                dead-letter stream)
``zeps_consumer_bad_acks_total``       counter  ACK/NAK/PROGRESS of sequences the member did
                                                not hold
``zeps_streams_open``                  gauge    journals open
``zeps_invalid_total``                 counter  INVALIDs sent, by ``reason`` (reasons.LABELS)
``zeps_invalid_frames_total``          counter  frames that were not ZEPS commands at all
``zeps_fsync_seconds``                 histo.   duration of each group fsync of a journal
=====================================  =======  ====================================================

plus the ``process_*`` metrics of ``prometheus-client`` (CPU, memory, open files).

With a :class:`~zeps.broker.monitor.Redactor`, the ``stream``, ``client`` and ``consumer``
labels are its stable hashes, as in the redacted ``/streamz``, ``/connz`` and ``/consumerz``.

Per-subscriber series are capped at :data:`MAX_LAG_SERIES`, the subscribers most behind: a
broker with 10,000 clients would otherwise spend ~0.4 s of its only thread on each scrape
(``prometheus-client`` writes ~30 µs per series), and Prometheus would keep a series per
connection; ``zeps_stream_max_lag_messages`` covers every subscriber, ``/connz`` lists them all.
Likewise per-consumer series (11 each) are given to the :data:`MAX_CONSUMER_SERIES` consumers
most behind (a broker may hold 1,024 consumers per stream): ``zeps_stream_consumers`` counts
them all, ``/consumerz`` lists them all. The consumer counters are kept in the consumer's file,
so they go on from where they were after a restart (and start again from 0 if the consumer is
deleted and added again); a consumer that drops out of the most behind loses its series until it
is back among them.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, PlatformCollector, ProcessCollector
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from zeps.protocol.reasons import LABELS

from . import monitor

#: fsync takes ~0.1 ms on tmpfs, ~1 ms on a good SSD, 10-100 ms on a busy disk.
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Subscribers given their own lag series (the most behind first).
MAX_LAG_SERIES = 100
#: Consumers given their own series (the most behind first).
MAX_CONSUMER_SERIES = 100
#: The per-consumer counters: (counter in ``Group.counters``, help).
_CONSUMER_COUNTERS = (
    ("delivered", "Messages the consumer handed to its members (each delivery)"),
    ("acked", "Messages of the consumer acknowledged"),
    ("redelivered", "Messages of the consumer given again (ack wait passed, NAK, member gone)"),
    ("dead_lettered", "Messages of the consumer sent to its dead-letter stream after "
     "max_deliver deliveries"),
    ("dropped", "Messages of the consumer dropped after max_deliver deliveries (no "
     "dead-letter stream)"),
    ("bad_acks", "ACK, NAK or PROGRESS of sequences the member did not hold"),
)


class _CoreCollector:
    """Reads the core at scrape time (the registry calls :meth:`collect`)."""

    def __init__(self, core, redact=None):
        self.core = core
        self.redact = redact

    def collect(self):
        core, redact = self.core, self.redact
        totals = monitor.traffic(core)
        for name, key, doc in (("zeps_messages_in", "in_msgs", "Messages appended to journals"),
                               ("zeps_messages_out", "out_msgs", "DELIVERs produced"),
                               ("zeps_bytes_in", "in_bytes", "Bytes of messages appended "
                                "(sequence, key and body, as credit counts them)"),
                               ("zeps_bytes_out", "out_bytes", "Bytes of DELIVERs produced "
                                "(sequence, key and body, as credit counts them)")):
            yield CounterMetricFamily(name, doc, value=totals[key])
        yield CounterMetricFamily("zeps_streams_deleted", "Streams deleted (STREAM-DELETE)",
                                  value=core.streams_deleted)
        yield CounterMetricFamily("zeps_messages_deleted", "Messages the deleted streams held "
                                  "(their traffic stays in zeps_messages_in_total...)",
                                  value=core.messages_deleted)

        per_stream = {
            "in_msgs": CounterMetricFamily("zeps_stream_messages_in", "Messages appended to "
                                           "the stream since it was opened", labels=["stream"]),
            "out_msgs": CounterMetricFamily("zeps_stream_messages_out", "DELIVERs produced "
                                            "from the stream since it was opened",
                                            labels=["stream"]),
            "in_bytes": CounterMetricFamily("zeps_stream_bytes_in", "Bytes appended to the "
                                            "stream since it was opened", labels=["stream"]),
            "out_bytes": CounterMetricFamily("zeps_stream_bytes_out", "Bytes delivered from "
                                             "the stream since it was opened", labels=["stream"]),
            "head_seq": GaugeMetricFamily("zeps_stream_head_sequence", "Last sequence in the "
                                          "stream's journal", labels=["stream"]),
            "first_seq": GaugeMetricFamily("zeps_stream_first_sequence", "First sequence kept "
                                           "in the stream's journal", labels=["stream"]),
            "size_bytes": GaugeMetricFamily("zeps_stream_size_bytes", "Size of the stream's "
                                            "journal on disk", labels=["stream"]),
            "confirms_pending": GaugeMetricFamily("zeps_stream_confirms_pending", "Publishes "
                                                  "appended but not yet confirmed durable",
                                                  labels=["stream"]),
            "max_lag": GaugeMetricFamily("zeps_stream_max_lag_messages", "Messages between the "
                                         "stream's head and its furthest-behind subscriber",
                                         labels=["stream"]),
            "consumers": GaugeMetricFamily("zeps_stream_consumers", "Durable consumers of the "
                                           "stream (loaded by the broker)", labels=["stream"]),
        }
        clients = GaugeMetricFamily("zeps_clients", "Clients by stream and mode "
                                    "(live, catching_up, historical, congested, not_subscribed, "
                                    "unattached)", labels=["stream", "mode"])
        lag = GaugeMetricFamily("zeps_subscriber_lag_messages", "Messages between a "
                                f"subscriber's position and its stream's head (the "
                                f"{MAX_LAG_SERIES} most behind)", labels=["stream", "client"])
        pending = 0
        for st in core.streams.values():
            doc = monitor.stream_doc(core, st, redact)
            for key, family in per_stream.items():
                if key in doc:
                    family.add_metric([doc["name"]], doc[key])
            pending += doc["confirms_pending"]
            for mode, n in doc["modes"].items():
                clients.add_metric([doc["name"], mode], n)
        for row in monitor.connz(core, 0.0, sort="lag", limit=MAX_LAG_SERIES,
                                 redact=redact)["connections"]:
            if row["lag"] is None:                     # the rest do not subscribe
                break
            lag.add_metric([row["stream"], row["client"]], row["lag"])
        unattached = sum(1 for s in core.sessions.values() if s.stream is None)
        clients.add_metric(["", "unattached"], unattached)
        yield from per_stream.values()
        yield clients
        yield lag
        yield from self._consumers()
        yield GaugeMetricFamily("zeps_confirms_pending", "Publishes appended but not yet "
                                "confirmed durable, every stream", value=pending)
        yield GaugeMetricFamily("zeps_streams_open", "Streams whose journals are open",
                                value=len(core.streams))
        invalid = CounterMetricFamily("zeps_invalid", "INVALID replies sent, by the reason's "
                                      "prefix (zeps.protocol.reasons)", labels=["reason"])
        for reason in LABELS:
            invalid.add_metric([reason], core.invalids.get(reason, 0))
        yield invalid
        yield CounterMetricFamily("zeps_invalid_frames", "Frames received that were not ZEPS "
                                  "commands", value=core.bad_frames_total)

    def _consumers(self):
        """The per-consumer series of the MAX_CONSUMER_SERIES consumers most behind."""
        labels = ["stream", "consumer"]
        gauges = {
            "lag": GaugeMetricFamily("zeps_consumer_lag_messages", "Messages between the "
                                     "consumer's floor (all acknowledged up to it) and its "
                                     f"stream's head (the {MAX_CONSUMER_SERIES} most behind)",
                                     labels=labels),
            "lag_seconds": GaugeMetricFamily("zeps_consumer_lag_seconds", "How much older the "
                                             "consumer's first message above its floor is than "
                                             "the stream's newest", labels=labels),
            "pending": GaugeMetricFamily("zeps_consumer_pending", "Messages the consumer's "
                                         "members hold, not acknowledged", labels=labels),
            "outstanding": GaugeMetricFamily("zeps_consumer_outstanding", "Messages of the "
                                             "consumer not acknowledged: held, or waiting to "
                                             "go again", labels=labels),
            "members": GaugeMetricFamily("zeps_consumer_members", "Members of the consumer "
                                         "(peerings that CONSUMEd)", labels=labels),
        }
        counters = {key: CounterMetricFamily(f"zeps_consumer_{key}", doc, labels=labels)
                    for key, doc in _CONSUMER_COUNTERS}
        for row in monitor.consumerz(self.core, sort="lag", limit=MAX_CONSUMER_SERIES,
                                     redact=self.redact)["consumers"]:
            names = [row["stream"], row["name"]]
            for key, family in (*gauges.items(), *counters.items()):
                family.add_metric(names, row[key])
        yield from gauges.values()
        yield from counters.values()


class Metrics:
    """The broker's Prometheus registry: the core's numbers, fsync latency, the process;
    stream and client labels hashed by ``redact`` (a :class:`~zeps.broker.monitor.Redactor`)
    if given."""

    def __init__(self, core, redact=None):
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(core, redact))
        self.fsync = Histogram("zeps_fsync_seconds", "Duration of one journal fsync "
                               "(group commit, --fsync interval)", buckets=FSYNC_BUCKETS,
                               registry=self.registry)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def observe_fsync(self, seconds: float) -> None:
        """One journal fsync took ``seconds`` (called from the sync greenlet)."""
        self.fsync.observe(seconds)

    def exposition(self) -> bytes:
        """The metrics in Prometheus's text format."""
        return generate_latest(self.registry)
