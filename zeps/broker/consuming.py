"""Durable consumers in the broker core (ids 80-92, docs/consumers.md): the handlers of
CONSUMER-ADD, CONSUME, ACK, NAK, PROGRESS, CONSUMER-INFO/LIST/DELETE, the pump step that hands
messages to members, the timers, and what happens to a member's DELIVER its pipe did not take.
Pure logic, no sockets; a mixin of :class:`~zeps.broker.core.BrokerCore`, which owns
``consumers`` (stream name -> consumer name -> :class:`~zeps.broker.groups.Group`).

* **Loading.** A stream's consumers are read from its directory the first time a consumer
  command names the stream (small files; administration touches the disk on the loop, as
  stream administration does) and stay in memory until the stream is deleted; a timer tick
  visits only those with timers or unsaved changes (``consumers_ticking``).
* **Saving.** A consumer whose state changed is handed to ``consumer_store`` at most every
  :data:`~zeps.broker.groups.SAVE_INTERVAL`: the shell's :class:`zeps.journal.consumers.Saver`
  writes it off the loop (in-process tests use the synchronous store). A save costs in
  proportion to the consumer's outstanding messages (up to 65,536, each ACK of one of them
  makes it due), so saves are paid from a budget of :data:`SAVE_RATE` outstanding messages a
  second over all consumers, the longest unsaved first (and while it waits for that budget,
  the others from a second one, :data:`SIDE_RATE`): what the loop and the Saver spend on
  saving does not grow with the consumers and their pending messages; a big consumer is saved
  less often (a crash then gives more of its messages again).
* **Handing out.** In the round's pump step, each consumer with members and work (messages due
  again, or the journal past its cursor) hands out up to ``CONSUMER_STEP`` messages: due ones
  first, in sequence order, then new ones read from the journal at its cursor. A message goes to
  the next member in turn that has the credit for it, room under ``max_ack_pending`` and a pipe
  that is not congested (one that has not sits the rest of the round out: a round costs
  O(members + messages)); when none has, the consumer sleeps until a member event (CREDIT, ACK,
  NAK, a member joining, its congestion ending, a timer) wakes it. A consumer without members
  costs a round nothing (the step visits ``consumers_pumping``, those with members); one
  asleep, or with nothing due and nothing new in its stream, two comparisons.
* **Rights first**, then the bounds, then the work: every command needs the right to
  subscribe to the attached stream; CONSUMER-ADD and the administration commands are paid from
  the client's command budget.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Dict, Optional

from zeps.journal import consumers as store
from zeps.protocol import commands as c, deliver_ts_from_deliver, encode
from zeps.protocol.consumer import MAX_ACK_RANGES, unpack_ranges
from zeps.protocol.headers import encode_block
from zeps.protocol.reasons import Reason

from .consumer_settings import MAX_DELAY_MS, config_of, why_bad
from .groups import CONSUMER_STEP, MAX_CONSUMERS, MAX_MEMBERS, MAX_PENDING, Group
from .headers import Headed, replay_frame
from .session import DETACH_FRAME, Session
from .stream import unsent_position

#: Saves are paid from a budget: this many outstanding messages a second, over all consumers
#: (each save costs 1 + its consumer's outstanding messages) ...
SAVE_RATE = 100_000
#: ... of which at most this many are saved up (at least the largest consumer's save) ...
SAVE_BURST = 2 * (MAX_PENDING + 1)
#: ... and while the longest unsaved consumer waits for that budget, the others behind it are
#: paid from a second one of this many a second (so that one large consumer does not hold back
#: the saves of small ones), with as many saved up.
SIDE_RATE = SAVE_RATE // 4

#: The least credit a message costs (as a DELIVER: sequence and key length).
MIN_COST = 9
#: The ACK frame's largest ranges field (checked before it is read).
MAX_ACK_BYTES = MAX_ACK_RANGES * 16


class SyncStore:
    """The consumer store of a core without a shell (tests): writes at once, on the caller's
    thread. The shell gives the core a :class:`zeps.journal.consumers.Saver` instead."""

    def __init__(self, sync: bool = False):
        self.sync = sync

    def submit(self, stream_dir, config, state) -> None:
        store.save(stream_dir, config, state, sync=self.sync)

    def remove(self, stream_dir, name) -> None:
        store.remove(stream_dir, name)


class Consuming:
    """The consumer handlers, pump and timers (see the module docstring)."""

    # ------------------------------------------------------------------ the consumers
    def _groups_of(self, st) -> Dict[str, Group]:
        gs = self.consumers.get(st.name)
        if gs is None:
            gs = self.consumers[st.name] = {}
            end = min(self.journal_ends.pop(st.name, st.journal.next_seq), st.journal.next_seq)
            for name, (config, state) in store.load_all(st.journal.stream_dir).items():
                g = gs[name] = Group(st.name, config, state.next, state.outstanding,
                                     state.counters, state.skipped, self.outstanding)
                g.stream_dir = st.journal.stream_dir
                g.ticking = self.consumers_ticking
                g.pumping = self.consumers_pumping
                self._rewind(st, g, end)
            self.consumers_held += len(gs)
        return gs

    def _rewind(self, st, g: Group, end: int) -> None:
        """A consumer's file is synced at every save, the journal under ``fsync=interval``
        only now and then: after a power loss the file may name a cursor past the journal's
        end as recovered (``end``: when the broker first opened the stream, before anything
        was appended since). New messages take those sequences again; the cursor comes back
        to ``end`` so that they are delivered (:meth:`Group.rewind`; logged), but never
        below the sequence the consumer was told to start at (``START_SEQUENCE`` past the
        end: nothing was lost, it waits for that sequence)."""
        if g.config.start == c.START_SEQUENCE:
            end = max(end, g.config.start_value)
        was = g.next
        if was <= end:
            return
        dropped = g.rewind(end)
        self.log("consumer_rewound", stream=st.name, consumer=g.config.name, next=was,
                 to=end, outstanding_dropped=dropped)

    def _group(self, s: Session, name: str) -> Optional[Group]:
        """Consumer ``name`` of the client's stream (INVALID if there is none)."""
        g = self._groups_of(self.streams[s.stream]).get(name)
        if g is None:
            self._invalid(s.identity, f"no consumer {name!r} on stream {s.stream!r} "
                                      f"(CONSUMER-ADD first)")
        return g

    def _may_consume(self, s: Session) -> bool:
        if not s.may_subscribe:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "subscribe",
                                                         s.stream))
            return False
        return True

    def _save(self, g: Group) -> None:
        g.dirty = False
        state = store.ConsumerState(next=g.next, outstanding=g.outstanding(), skipped=g.skipped,
                                    counters=dict(g.counters))
        self.consumer_store.submit(g.stream_dir, g.config, state)

    # ------------------------------------------------------------------ handlers
    def _on_consumer_add(self, s: Session, cmd: c.ConsumerAdd) -> None:
        if not self._may_consume(s) or self._over_budget(s):
            return
        st = self.streams[s.stream]
        why = why_bad(cmd, st.name)
        if why is None and cmd.dead_letter and self.acl is not None \
                and not self.acl.may_publish(s.user, cmd.dead_letter):
            why = Reason.not_allowed(self.acl.who(s.user), "publish", cmd.dead_letter)
        if why is not None:
            self._invalid(s.identity, why)
            return
        gs = self._groups_of(st)
        config = config_of(cmd)
        g = gs.get(cmd.name)
        if g is not None:
            if g.config != config:
                self._invalid(s.identity, f"consumer {cmd.name!r} exists with other settings "
                                          f"(CONSUMER-DELETE it first)")
                return
            self.outbox.append((s.identity, encode(c.ConsumerAddOk(g.floor + 1))))
            return
        if len(gs) >= MAX_CONSUMERS:
            self._invalid(s.identity, Reason.limit("max_consumers", MAX_CONSUMERS))
            return
        if self.consumers_held >= self.config.max_total_consumers:
            self._invalid(s.identity, Reason.limit("max_total_consumers",
                                                   self.config.max_total_consumers))
            return
        why = self._dead_letter_refusal(cmd.dead_letter) if cmd.dead_letter else None
        if why is not None:                  # a new consumer's: an existing one's was checked
            self._invalid(s.identity, why)
            return
        if st.queued_publishes:
            st.append_queued()
        if cmd.start == c.START_SEQUENCE:
            start = max(cmd.start_value, st.first_seq)
        elif cmd.start == c.START_TIME:
            start = max(st.seq_at(cmd.start_value), st.first_seq)
        elif cmd.start == c.START_NEW:
            start = st.journal.next_seq
        else:
            start = st.first_seq
        g = gs[cmd.name] = Group(st.name, config, start, budget=self.outstanding)
        self.consumers_held += 1
        g.stream_dir = st.journal.stream_dir
        g.ticking = self.consumers_ticking
        g.pumping = self.consumers_pumping
        self._save(g)
        self.log("consumer_added", stream=st.name, consumer=cmd.name, start=start)
        self.outbox.append((s.identity, encode(c.ConsumerAddOk(start))))

    def _on_consume(self, s: Session, cmd: c.Consume) -> None:
        if not self._may_consume(s):
            return
        why = None
        if s.consumer is not None:
            why = "this peering already joined a consumer (one per peering)"
        elif s.subscribed or s.snapshot is not None:
            why = "CONSUME on a peering that subscribed or takes a snapshot (use another one)"
        if why:
            self._invalid(s.identity, why)
            return
        g = self._group(s, cmd.name)
        if g is None:
            return
        if len(g.members) >= MAX_MEMBERS:
            self._invalid(s.identity, Reason.limit("max_members", MAX_MEMBERS))
            return
        st = self.streams[s.stream]
        lost = g.trim(st.first_seq)
        if lost:
            self.log("consumer_skipped", stream=st.name, consumer=cmd.name, messages=lost,
                     first_kept=st.first_seq)
        skipped, g.skipped = g.skipped, 0
        g.join(s)
        s.consumer = g
        g.asleep = False
        if skipped:
            g.dirty = True
        self.outbox.append((s.identity, encode(c.ConsumeOk(g.floor, g.next, skipped))))

    def _member_group(self, s: Session, what: str) -> Optional[Group]:
        g = s.consumer
        if g is None:
            self._invalid(s.identity, f"{what} without CONSUME: this peering is no consumer's "
                                      f"member")
        return g

    def _on_ack(self, s: Session, cmd: c.Ack) -> None:
        g = self._member_group(s, "ACK")
        if g is None:
            return
        if len(cmd.ranges) > MAX_ACK_BYTES:                # the size first
            self._invalid(s.identity, f"an ACK carries at most {MAX_ACK_RANGES} ranges")
            return
        try:
            ranges = unpack_ranges(cmd.ranges)
        except ValueError as exc:
            self._invalid(s.identity, str(exc))
            return
        acked, _bad = g.ack(s.identity, ranges)
        if acked:
            g.asleep = False

    def _on_nak(self, s: Session, cmd: c.Nak) -> None:
        g = self._member_group(s, "NAK")
        if g is not None and g.nak(s.identity, cmd.sequence,
                                   min(cmd.delay_ms, MAX_DELAY_MS) / 1000.0, self.now):
            g.asleep = False

    def _on_progress(self, s: Session, cmd: c.Progress) -> None:
        g = self._member_group(s, "PROGRESS")
        if g is not None:
            g.progress(s.identity, cmd.sequence, self.now)

    def _on_consumer_info(self, s: Session, cmd: c.ConsumerInfo) -> None:
        if not self._may_consume(s) or self._over_budget(s):
            return
        g = self._group(s, cmd.name)
        if g is None:
            return
        st = self.streams[s.stream]
        info = self.consumer_info(st, g)
        dead = info["config"].get("dead_letter")
        if dead and self.acl is not None and not self.acl.may_attach(s.user, dead):
            # a stream the ACL hides from this client's listing is not named to it here either
            info["config"]["dead_letter"] = ""
            info["config"]["dead_letter_hidden"] = True
        self.outbox.append((s.identity, encode(c.ConsumerInfoOk(
            json.dumps(info, separators=(",", ":"))))))

    def consumer_info(self, st, g: Group) -> dict:
        """What CONSUMER-INFO, /varz and the metrics say of a consumer."""
        last = st.journal.last_seq
        floor = g.floor
        lag_seconds = 0.0
        if floor < last:
            try:
                recs = st.journal.read_batch(max(floor + 1, st.first_seq), 1)
                rec = recs[0] if recs else None              # the first still there (compaction)
            except Exception:                                # a bad record: no age
                rec = None
            if rec is not None:                              # behind the newest message
                lag_seconds = max(0.0, (st.info().newest - rec.timestamp) / 1e9)
        return {"name": g.config.name, "stream": st.name, "config": g.config.to_json(),
                "floor": floor, "next": g.next, "last": last,
                "lag": max(0, last - floor), "lag_seconds": round(lag_seconds, 3),
                "pending": g.pending, "outstanding": len(g.out), "members": len(g.members),
                "paused": self.outstanding.reason().text if g.held_back() else "",
                **g.counters}

    def _on_consumer_list(self, s: Session, cmd) -> None:
        if not self._may_consume(s) or self._over_budget(s):
            return
        names = tuple(sorted(self._groups_of(self.streams[s.stream])))
        self.outbox.append((s.identity, encode(c.ConsumerListOk(names))))

    def _on_consumer_delete(self, s: Session, cmd: c.ConsumerDelete) -> None:
        if not self._may_consume(s) or self._over_budget(s):
            return
        g = self._group(s, cmd.name)
        if g is None:
            return
        st = self.streams[s.stream]
        for ident in list(g.members):
            other = self.sessions.get(ident)
            if other is not None and other is not s:
                st.detach(other)
                self._end_peering(other)
                self._tell(other, DETACH_FRAME)
        if s.consumer is g:
            s.consumer = None
        self.consumers_pumping.pop(g, None)
        g.forget()                                  # what it held leaves the budget
        del self._groups_of(st)[cmd.name]
        self.consumers_held -= 1
        self.consumer_store.remove(st.journal.stream_dir, cmd.name)
        self.log("consumer_deleted", stream=st.name, consumer=cmd.name)
        self.outbox.append((s.identity, encode(c.ConsumerDeleteOk())))

    # ------------------------------------------------------------------ membership
    def member_left(self, s: Session) -> None:
        """The member's peering ended (DETACH, expiry, its connection gone, its stream
        deleted): what it held goes to the others."""
        g, s.consumer = s.consumer, None
        if g is not None and g.leave(s.identity):
            g.asleep = False

    def consumer_unsent(self, s: Session, frame: bytes) -> None:
        """A DELIVER to a member did not go out (its pipe is full): the credit comes back and
        the message goes again, first; the delivery does not count."""
        seq, cost = unsent_position(frame)
        s.credit += cost
        s.consumer.unhand(seq, s.identity)

    # ------------------------------------------------------------------ the pump step
    def pump_consumers(self, now: float) -> bool:
        """One step of every consumer that has members and work. True if one stopped at its
        bound with more to do (run the next round at once). Only the consumers with members
        are looked at (``consumers_pumping``): a round looked at every consumer loaded, of
        every open stream (1,024 a stream; 1,000 streams: 28 ms a round, every client
        waiting), which any client that may subscribe creates with CONSUMER-ADD. They are
        taken in turn, from one further each round: room in the broker's budget of
        outstanding messages, freed by an ACK, goes to the first consumer with work, which
        was always the same one (the oldest), and the others could wait for ever."""
        more = False
        gs = list(self.consumers_pumping)
        if len(gs) > 1:
            k = self.consumers_turn % len(gs)
            self.consumers_turn = k + 1
            gs = gs[k:] + gs[:k]
        for g in gs:
            st = self.streams.get(g.stream)
            if st is None or self.consumers.get(g.stream, {}).get(g.config.name) is not g:
                del self.consumers_pumping[g]         # deleted since (its stream, or itself)
                continue
            if not g.members or g.asleep:
                continue
            new = g.next < st.journal.next_seq
            if new and g.room <= 0:                   # at its bound, or the broker's
                self._held_back(st, g)
                new = False
            if (new or g.has_ready(now)) and self._pump_group(st, g, now):
                more = True
        return more

    def _held_back(self, st, g: Group) -> None:
        """Log (once until half the budget is free) that the broker's budget of outstanding
        messages pauses consumers (:mod:`zeps.broker.outstanding`)."""
        if g.held_back() and self.outstanding.pause_to_log():
            self.log("consumers_paused", stream=st.name, consumer=g.config.name,
                     reason=self.outstanding.reason().text, held=self.outstanding.held)

    def _pump_group(self, st, g: Group, now: float) -> bool:
        j = st.journal
        first = st.first_seq
        if g.next < first:
            lost = g.trim(first)
            self.log("consumer_skipped", stream=st.name, consumer=g.config.name,
                     messages=lost, first_kept=first)
        budget = CONSUMER_STEP
        # The members in turn; the one served goes to the back (round robin), one that cannot
        # take a message leaves the queue for the rest of the round: nothing in the pump step
        # gives it credit or room, so a round visits each member once plus once per message
        # handed out (1,000 idle members beside a busy one cost every message 1,000 visits).
        queue = deque(g.members_in_turn())
        cfg = g.config

        def give(rec) -> bool:
            while queue:
                m = queue.popleft()
                s = m.session
                if len(m.held) >= cfg.max_ack_pending or s.congested_until or s.credit < MIN_COST:
                    continue
                frame, cost = replay_frame(s, rec, rec.frame)
                if s.credit < cost:
                    st.window_advice(s, rec.sequence, cost)
                    continue
                s.credit -= cost
                if s.timestamps and frame is rec.frame:
                    frame = deliver_ts_from_deliver(frame, rec.timestamp)
                self.outbox.append((s.identity, frame))
                s.delivered += 1
                st.delivered_total += 1
                st.delivered_bytes += cost
                g.hand(rec.sequence, m, rec.key, now)
                queue.append(m)
                return True
            return False

        blocked = opening = False
        while budget:                                  # 1. messages due again
            seq = g.pop_ready(now)
            if seq is None:
                break
            budget -= 1
            try:
                rec = j.read_at(seq)
            except Exception as exc:                   # a bad record: it cannot be delivered
                self.log("consumer_read_failed", stream=st.name, consumer=cfg.name,
                         sequence=seq, error=str(exc))
                rec = None
            if rec is None:                            # retention or compaction removed it
                g.drop(seq, False)
                continue
            o = g.out[seq]
            if o.key is None and g.park_loaded(seq, rec.key):
                continue                               # behind its key's earlier message
            if cfg.max_deliver and o.deliveries >= cfg.max_deliver:
                done = self._dead_letter(st, g, rec, o.deliveries)
                if done is False:
                    g.put_back(seq)                # its stream is being opened: next round
                    blocked = opening = True
                    break
                g.drop(seq, done is True)
                continue
            if not give(rec):
                g.put_back(seq)
                blocked = True
                break
        while budget and not blocked and g.room > 0 and g.next < j.next_seq \
                and not (g.key_order and g.unknown_keys):
            try:                                       # 2. new messages
                records = j.read_batch(g.next, max_records=min(budget, g.room), max_bytes=1 << 20)
            except Exception as exc:
                self.log("consumer_read_failed", stream=st.name, consumer=cfg.name,
                         sequence=g.next, error=str(exc))
                blocked = True
                break
            if not records:
                break
            for rec in records:
                seq = rec.sequence
                if seq < g.next:
                    continue
                if budget == 0 or g.room <= 0:
                    break
                budget -= 1
                if not any(rec.key.startswith(p) for p in cfg.patterns):
                    g.next = seq + 1
                    g.dirty = True
                    continue
                if g.park(seq, rec.key):
                    g.next = seq + 1
                    continue
                if not give(rec):
                    blocked = True
                    break
                g.next = seq + 1
        if budget == 0:
            return True
        if not blocked and g.next < j.next_seq:
            self._held_back(st, g)
        g.asleep = blocked and not opening             # no member can take one: wait for one
        return False

    def _dead_letter_refusal(self, name: str) -> Optional[Reason]:
        """Why the dead-letter stream ``name`` could not be created now (None: it exists, or
        it could): a consumer creates only the stream an ATTACH would create (``--auto-create``,
        ``max_total_streams``; the ACL's publish right is the client's, checked at
        CONSUMER-ADD)."""
        if name in self.catalogue:
            return None
        if not self.config.auto_create:
            return Reason.no_stream(name, created_on_attach=False)
        if len(self.catalogue) >= self.config.max_total_streams:
            return Reason.limit("max_total_streams", self.config.max_total_streams)
        return None

    def _dead_letter(self, st, g: Group, rec, deliveries: int) -> Optional[bool]:
        """Publish ``rec`` to the consumer's dead-letter stream: True done; False: that stream
        is being opened, the message waits; None: it was dropped (counted and logged) -- the
        consumer has no dead-letter stream, or it cannot be created (``--auto-create no`` and
        deleted since CONSUMER-ADD, ``max_total_streams``, ``max_streams`` open and busy) or
        opened (the open failed: logged once a round's try)."""
        name = g.config.dead_letter
        if not name:
            self.log("consumer_max_deliver", stream=st.name, consumer=g.config.name,
                     sequence=rec.sequence, deliveries=deliveries)
            return None
        dst = self.streams.get(name)
        if dst is None:
            why = self._dead_letter_refusal(name)
            failed = self.dead_letter_failed.pop(name, None)
            if why is None and failed is not None:
                why = Reason.failed(f"cannot open stream {name!r}", failed)
            if why is None:
                why = self._no_room_to_open()
            if why is not None:
                self.log("consumer_dead_letter_dropped", stream=st.name, consumer=g.config.name,
                         sequence=rec.sequence, to=name, reason=why.text)
                return None
            if not self.datadir.is_open(name):          # opened off the loop first
                if name not in self.opening:
                    self.opening[name] = []
                    self._to_open.append(name)
                    self.dead_letter_opens.add(name)
                return False
            dst = self.stream(name)
        headers = list(rec.headers)               # what it adds: DEAD_LETTER_HEADERS at most
        headers += [("zeps-stream", st.name.encode()), ("zeps-consumer", g.config.name.encode()),
                    ("zeps-sequence", str(rec.sequence).encode()),
                    ("zeps-deliveries", str(deliveries).encode())]
        self.queued += 1
        dst.publish(self.dead_letter_publisher, rec.key, Headed(rec.body, encode_block(headers)))
        self.log("consumer_dead_letter", stream=st.name, consumer=g.config.name,
                 sequence=rec.sequence, to=name)
        return True

    # ------------------------------------------------------------------ timers
    def consumer_timers(self, now: float) -> None:
        """Ack deadlines and NAK delays that passed; save the consumers whose state changed,
        as far as the budget goes (:data:`SAVE_RATE`), the longest unsaved first. Only the
        consumers with timers or unsaved changes are visited (``consumers_ticking``; a
        consumer leaves it once quiet): the loaded consumers of every stream a consumer
        command ever named stay in memory, and a tick does not grow with them."""
        dirty = []
        ticking = self.consumers_ticking
        visited = list(ticking)
        for g in visited:
            if self.consumers.get(g.stream, {}).get(g.config.name) is not g:
                del ticking[g]                              # deleted since: never saved again
                continue
            if g.next_deadline() <= now:
                if g.expire(now) or g.has_ready(now):
                    g.asleep = False
            if g.dirty:
                dirty.append(g)
        if dirty:
            self._save_dirty(dirty, now)
        for g in visited:
            if g in ticking and g.quiet():
                del ticking[g]

    def _save_dirty(self, dirty, now: float) -> None:
        """Save the consumers ``dirty`` as far as the budgets go (see the module docstring)."""
        elapsed = now - self.save_tokens_at
        self.save_tokens_at = now
        tokens = min(SAVE_BURST, self.save_tokens + elapsed * SAVE_RATE)
        side = min(SIDE_RATE, self.save_side_tokens + elapsed * SIDE_RATE)
        head_waits = False
        dirty.sort(key=lambda g: g.saved_at)
        for g in dirty:
            cost = 1 + len(g.out)
            if not head_waits and cost <= tokens:
                tokens -= cost
            elif not head_waits:
                head_waits = True       # it is next: the budget grows until it can pay
                continue
            elif cost <= side:
                side -= cost
            else:
                continue
            g.saved_at = now
            self._save(g)
        self.save_tokens, self.save_side_tokens = tokens, side

    def consumer_deadline(self) -> float:
        t = float("inf")
        for g in self.consumers_ticking:
            if g.members or g.out:
                t = min(t, g.next_deadline())
        return t

    def save_consumers(self) -> None:
        """Save every consumer whose state changed (at shutdown)."""
        for gs in self.consumers.values():
            for g in gs.values():
                if g.dirty:
                    self._save(g)
