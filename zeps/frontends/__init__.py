"""Front ends: other pub-sub protocols spoken by the broker over the same journal.

* CHP, the Clustered Hashmap Protocol (``shared/spec/chp-12.txt``, the Guide's Clone pattern):
  a snapshot ROUTER on port P, a publisher PUB on P+1 and a collector SUB (or PULL) on P+2.
* The Event BUS protocol (``shared/spec/event-bus.txt``, micro-toolkit/event-bus-zeromq):
  a snapshot ROUTER on P, a publisher PUB on P+1 and a collector ROUTER on P+2.

``zeps broker --chp PORT:STREAM`` / ``--bus PORT:STREAM`` runs them (docs/protocol.md, "Front
ends"). The codecs (``chp_codec``, ``bus_codec``, with ``wire``), the per-front-end state
(``chp``, ``bus``, with ``snapshots``, ``ttl`` and ``counters``), the front end's ZEPS
peering with its broker (``link``) and the ``PORT:STREAM`` specs (``spec``) are pure: frames
and ``now`` in, frames and decisions out, no socket, no event loop, no clock read. The I/O
shells own the sockets and a greenlet each: ``shell`` (what both share; it reads each socket
through ``capped``), ``chp_server`` (with a SNAPSHOT peering per CHP snapshot) and
``bus_server``. Nothing is imported here, so
importing a codec loads no shell.
"""
