"""Durable consumers' files (issue 19, docs/consumers.md "What the broker stores"):
``<stream dir>/consumers/<name>.json``, one a consumer, its settings and its state.

The broker's group state machine (:mod:`zeps.broker.groups`) owns what the state means; this
module only keeps it on disk, with no sockets and no clock:

* :class:`ConsumerConfig` - the CONSUMER-ADD settings; :class:`ConsumerState` - the cursor
  ``next``, every outstanding (handed out, not acknowledged) sequence with its delivery count,
  the messages lost to retention not yet reported, and the monotonic counters.
* :func:`save` writes a consumer's file whole: a temporary file in the same directory
  (``<name>.json.tmp``; a consumer's file always ends in ``.json``), fsync, rename over the old
  one, fsync of the directory. A crash (SIGKILL, power loss) leaves the old file or the new one,
  never a mix. ``sync=False`` (a broker with ``fsync=never``) skips the fsyncs, not the rename.
* :func:`load_all` reads every consumer of a stream. A file that is torn, garbage, too large
  (:data:`MAX_FILE`, checked before reading), of another version, with a value out of range, or
  whose name is not its consumer's name is ignored with a logged warning, never half-loaded and
  never an exception; a leftover temporary file (a crash while writing) is removed.
* :class:`Saver` writes off the caller's thread (the broker's loop): :meth:`Saver.submit` only
  records the newest state of a consumer (so a consumer whose state changes every round costs
  one write per the thread's turn, not one per change) and returns at once.

The file (JSON): ``{"version": 2, "config": {...}, "state": {"next": N, "outstanding":
[[seq, deliveries], [seq, deliveries, count], ...] (sorted), "skipped": N, "counters":
{...}}}``: an entry of three is ``count`` consecutive sequences from ``seq`` with the same
delivery count (a consumer's outstanding messages are mostly such runs: 65,536 messages handed
out once and not acknowledged are one entry, and were 65,536, some 100 ms of encoding a save).
A state with no run longer than one message is written as version 1, which has pairs only (an
older broker reads it); both are read. Every integer is ``0 <= v < 2**64``; a file names at
most :data:`MAX_OUTSTANDING` outstanding messages. Files are written only under a stream
directory that exists: a Saver that writes for a stream deleted in the meantime fails (counted
in :attr:`Saver.errors`) instead of making the stream's directory again.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from ..protocol.commands import ACK_EXPLICIT, ACK_NONE, START_ALL, START_NEW
from ..protocol.consumer import bad_consumer_name
from .segment import fsync_dir, write_atomic

log = logging.getLogger("zeps.journal")

DIR = "consumers"
SUFFIX = ".json"
TMP_SUFFIX = ".json.tmp"
VERSION = 2
#: The versions read: 1 (each outstanding message a pair), 2 (runs).
VERSIONS = (1, 2)
#: The most outstanding messages a file may name (the broker holds at most 65,536 a consumer).
MAX_OUTSTANDING = 1 << 17
#: The largest consumer file read (checked before reading) or written: 16 MiB.
MAX_FILE = 16 << 20
#: The counters every state has (0 when a file does not name one).
COUNTERS = ("acked", "redelivered", "dead_lettered", "bad_acks")
_U64 = 2 ** 64
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _uint(v: object, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < _U64:
        raise ValueError(f"{what} must be an integer from 0 to 2**64-1, not {v!r}")
    return v


@dataclass(frozen=True)
class ConsumerConfig:
    """The CONSUMER-ADD settings (the fields and defaults of
    :class:`zeps.protocol.commands.ConsumerAdd`). Not checked when made (the broker checks
    CONSUMER-ADD); :meth:`from_json` checks what it reads."""
    name: str
    patterns: Tuple[str, ...] = ("",)
    start: int = START_ALL
    start_value: int = 0
    ack: int = ACK_EXPLICIT
    ack_wait_ms: int = 30_000
    max_deliver: int = 0
    max_ack_pending: int = 1000
    dead_letter: str = ""
    flags: int = 0

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["patterns"] = list(self.patterns)
        return d

    @classmethod
    def from_json(cls, d: object) -> "ConsumerConfig":
        """The settings from :meth:`to_json`'s dict; ValueError (the reason) if a field is
        missing or bad. Keys it does not know are ignored."""
        if not isinstance(d, dict):
            raise ValueError("the consumer's config is not a JSON object")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in d:
                raise ValueError(f"the consumer's config has no {f.name!r}")
            v = d[f.name]
            if f.name in ("name", "dead_letter"):
                if not isinstance(v, str):
                    raise ValueError(f"{f.name} must be a string, not {v!r}")
            elif f.name == "patterns":
                if not isinstance(v, list) or not all(isinstance(p, str) for p in v):
                    raise ValueError(f"patterns must be a list of strings, not {v!r}")
                v = tuple(v)
            else:
                _uint(v, f.name)
            values[f.name] = v
        why = bad_consumer_name(values["name"])
        if why:
            raise ValueError(why)
        if not START_ALL <= values["start"] <= START_NEW:
            raise ValueError(f"start must be {START_ALL} to {START_NEW}, not {values['start']}")
        if not ACK_EXPLICIT <= values["ack"] <= ACK_NONE:
            raise ValueError(f"ack must be {ACK_EXPLICIT} to {ACK_NONE}, not {values['ack']}")
        return cls(**values)


def _zero_counters() -> Dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


@dataclass
class ConsumerState:
    """What is saved of a running consumer."""
    next: int                      # the next sequence the consumer reads from the journal
    #: sequence -> deliveries so far, of the messages handed out and not acknowledged: an int,
    #: or a record whose ``deliveries`` is read when the state is written (the broker hands a
    #: copy of its dict of records, so its loop does not build this one entry at a time)
    outstanding: Dict[int, object]
    skipped: int = 0               # messages lost to retention not yet reported
    counters: Dict[str, int] = field(default_factory=_zero_counters)

    def copy(self) -> "ConsumerState":
        """A copy sharing nothing mutable but the records ``outstanding`` may hold."""
        return ConsumerState(self.next, dict(self.outstanding), self.skipped,
                             dict(self.counters))

    def to_json(self) -> dict:
        runs: list = []
        first = last = n = -1
        out = self.outstanding
        for seq in sorted(out):                   # ints: mostly in order already, a fast sort
            got = out[seq]
            d = got if type(got) is int else got.deliveries
            if seq == last + 1 and d == n:
                last = seq
                continue
            if first >= 0:
                runs.append([first, n] if last == first else [first, n, last - first + 1])
            first = last = seq
            n = d
        if first >= 0:
            runs.append([first, n] if last == first else [first, n, last - first + 1])
        return {"next": self.next, "outstanding": runs, "skipped": self.skipped,
                "counters": dict(self.counters)}

    @classmethod
    def from_json(cls, d: object) -> "ConsumerState":
        """The state from :meth:`to_json`'s dict; ValueError (the reason) if it is bad (a
        sequence twice included)."""
        if not isinstance(d, dict):
            raise ValueError("the consumer's state is not a JSON object")
        for k in ("next", "outstanding", "skipped", "counters"):
            if k not in d:
                raise ValueError(f"the consumer's state has no {k!r}")
        pairs = d["outstanding"]
        if not isinstance(pairs, list):
            raise ValueError("outstanding must be a list of [sequence, deliveries]")
        outstanding: Dict[int, object] = {}
        for p in pairs:
            if not isinstance(p, list) or len(p) not in (2, 3):
                raise ValueError(f"an outstanding entry must be [sequence, deliveries] or "
                                 f"[sequence, deliveries, count], not {p!r}")
            seq = _uint(p[0], "an outstanding sequence")
            n = _uint(p[1], "a delivery count")
            count = _uint(p[2], "a run's count") if len(p) == 3 else 1
            if not 1 <= count <= MAX_OUTSTANDING - len(outstanding):
                raise ValueError(f"a run of {count} outstanding messages (at most "
                                 f"{MAX_OUTSTANDING} in all)")
            if seq + count > _U64:
                raise ValueError(f"a run from {seq} of {count} passes 2**64-1")
            for s in range(seq, seq + count):
                if s in outstanding:
                    raise ValueError(f"sequence {s} is outstanding twice")
                outstanding[s] = n
        raw = d["counters"]
        if not isinstance(raw, dict):
            raise ValueError("counters must be a JSON object")
        counters = _zero_counters()
        for k, v in raw.items():
            counters[k] = _uint(v, f"counter {k!r}")
        return cls(_uint(d["next"], "next"), outstanding, _uint(d["skipped"], "skipped"),
                   counters)


def consumers_dir(stream_dir) -> str:
    """``<stream_dir>/consumers``."""
    return os.path.join(os.fspath(stream_dir), DIR)


def _path(stream_dir, name: str) -> str:
    why = bad_consumer_name(name)
    if why:
        raise ValueError(why)
    return os.path.join(consumers_dir(stream_dir), name + SUFFIX)


def encode(config: ConsumerConfig, state: ConsumerState) -> bytes:
    """The file's bytes; ValueError if they would be over :data:`MAX_FILE` (never loaded)."""
    st = state.to_json()
    # Version 1 where no run is longer than one message: a broker before runs reads it.
    version = VERSION if any(len(r) == 3 for r in st["outstanding"]) else 1
    data = json.dumps({"version": version, "config": config.to_json(), "state": st},
                      separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_FILE:
        raise ValueError(f"consumer {config.name!r}: its file would be {len(data)} bytes, "
                         f"more than {MAX_FILE}")
    return data


def decode(data: bytes) -> Tuple[ConsumerConfig, ConsumerState]:
    """A file's settings and state; ValueError (the reason) if it is not a whole valid one."""
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("version") not in VERSIONS:
        raise ValueError(f"version {d.get('version')!r}, not one of {VERSIONS}")
    return ConsumerConfig.from_json(d.get("config")), ConsumerState.from_json(d.get("state"))


def save(stream_dir, config: ConsumerConfig, state: ConsumerState, sync: bool = True) -> None:
    """Write the consumer's file whole (temporary file, fsync, rename, directory fsync; without
    the fsyncs if not ``sync``). The stream directory must exist (its ``consumers`` directory is
    made if missing). Raises ValueError (a bad name, too large) or OSError."""
    path = _path(stream_dir, config.name)
    data = encode(config, state)
    cdir = consumers_dir(stream_dir)
    try:
        os.mkdir(cdir)          # not makedirs: never makes a deleted stream's directory again
        if sync:
            fsync_dir(os.fspath(stream_dir))
    except FileExistsError:
        pass
    write_atomic(path, data, sync)          # its temporary file is <name>.json.tmp


def remove(stream_dir, name: str, sync: bool = True) -> None:
    """Delete the consumer's file (and a leftover temporary one); a missing file is fine. With
    ``sync`` the directory is fsynced when something was deleted."""
    path = _path(stream_dir, name)
    gone = False
    for p in (path, path[:-len(SUFFIX)] + TMP_SUFFIX):
        try:
            os.unlink(p)
            gone = True
        except FileNotFoundError:
            pass
    if gone and sync:
        fsync_dir(consumers_dir(stream_dir))


def _load(path: str) -> Tuple[ConsumerConfig, ConsumerState]:
    fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_FILE:
            raise ValueError(f"{size} bytes, more than {MAX_FILE}")
        chunks = []
        left = MAX_FILE + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE:
        raise ValueError(f"more than {MAX_FILE} bytes")
    return decode(data)


def load_all(stream_dir) -> Dict[str, Tuple[ConsumerConfig, ConsumerState]]:
    """Every consumer of the stream, by name ({} if it has none). Bad files are ignored with a
    warning; leftover temporary files are removed. Never raises for a file's content."""
    cdir = consumers_dir(stream_dir)
    try:
        entries = sorted(os.listdir(cdir))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as e:
        log.warning("consumers of %s: cannot list %s: %s", stream_dir, cdir, e)
        return {}
    out: Dict[str, Tuple[ConsumerConfig, ConsumerState]] = {}
    for entry in entries:
        path = os.path.join(cdir, entry)
        if entry.endswith(TMP_SUFFIX):
            log.warning("consumers of %s: removing %s, left by a write that did not finish",
                        stream_dir, path)
            try:
                os.unlink(path)
            except OSError as e:
                log.warning("consumers of %s: cannot remove %s: %s", stream_dir, path, e)
            continue
        if not entry.endswith(SUFFIX):
            log.warning("consumers of %s: ignoring %s (not a consumer's file)", stream_dir, path)
            continue
        name = entry[:-len(SUFFIX)]
        try:
            if bad_consumer_name(name):
                raise ValueError("its name is not a consumer name")
            config, state = _load(path)
            if config.name != name:
                raise ValueError(f"it holds consumer {config.name!r}")
        except (OSError, ValueError) as e:
            log.warning("consumers of %s: ignoring %s: %s", stream_dir, path, e)
            continue
        out[name] = (config, state)
    return out


_REMOVE = None


class Saver:
    """Writes consumers' files on a thread of its own, in order per consumer, coalescing: only
    the newest of a consumer's submits and removes not yet started is done (a submit then a
    remove deletes the file; a remove then a submit writes it). :meth:`close` it (it flushes).

    A write or remove that failed with an I/O error (a full disk) is tried again every
    ``retry_after`` seconds until it succeeds or a newer one of the consumer replaces it (a
    consumer that went quiet after it kept its stale file, and a broker restarted then handed
    out again what had been acknowledged since; found by review), but not once its stream's
    directory is gone (the stream was deleted: its file must not bring the directory back).
    A consumer's first failure is logged, and its first success after."""

    def __init__(self, sync: bool = True, retry_after: float = 1.0):
        self.sync = sync
        self.retry_after = retry_after
        self.errors = 0                  # writes/removes that failed (each counted)
        self.written = 0                 # writes/removes done (coalesced submits are not)
        self._cond = threading.Condition()
        # (stream_dir, name) -> (config, state), or _REMOVE; dicts keep insertion order
        self._pending: Dict[Tuple[str, str], Optional[Tuple[ConsumerConfig, ConsumerState]]] = {}
        self._failed: Dict[Tuple[str, str], Optional[Tuple[ConsumerConfig, ConsumerState]]] = {}
        self._retry_at = 0.0             # when the failed ones are tried again (monotonic)
        self._submitted = 0              # operations submitted
        self._done = 0                   # operations submitted before the last batch finished
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="zeps-consumers", daemon=True)
        self._thread.start()

    def _put(self, key: Tuple[str, str], op) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the consumer Saver is closed")
            self._pending.pop(key, None)
            self._failed.pop(key, None)          # replaced: not tried again
            self._pending[key] = op
            self._submitted += 1
            self._cond.notify_all()

    def submit(self, stream_dir, config: ConsumerConfig, state_copy: ConsumerState) -> None:
        """Write this state of the consumer (a copy the caller will not change, but for the
        delivery counts of records in ``outstanding``, read when it is written) soon; returns
        at once. RuntimeError once closed."""
        self._put((os.fspath(stream_dir), config.name), (config, state_copy))

    def remove(self, stream_dir, name: str) -> None:
        """Delete the consumer's file soon (after its earlier submits)."""
        self._put((os.fspath(stream_dir), name), _REMOVE)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until everything submitted before this call is written; False on timeout."""
        with self._cond:
            want = self._submitted
            return self._cond.wait_for(lambda: self._done >= want, timeout)

    def close(self) -> None:
        """Write what is pending, then stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        failing = set()                  # the consumers whose last try failed (logged once)
        while True:
            with self._cond:
                wait = self._retry_at - time.monotonic() if self._failed else None
                if wait is None or wait > 0:
                    self._cond.wait_for(lambda: self._pending or self._closed, wait)
                if self._failed and (self._closed or time.monotonic() >= self._retry_at):
                    for key, op in self._failed.items():     # their time to be tried again
                        self._pending.setdefault(key, op)
                    self._failed = {}
                if not self._pending:
                    if self._closed:                # and nothing left
                        return
                    continue
                batch, self._pending = self._pending, {}
                upto = self._submitted
            for key, op in batch.items():
                stream_dir, name = key
                try:
                    if op is _REMOVE:
                        remove(stream_dir, name, self.sync)
                    else:
                        save(stream_dir, op[0], op[1], self.sync)
                    self.written += 1
                    if key in failing:
                        failing.discard(key)
                        log.warning("consumers of %s: consumer %r saved again", stream_dir, name)
                except Exception as e:      # noqa: BLE001 - counted, logged, tried again
                    self.errors += 1
                    # tried again: an I/O error (a full disk) where the stream still is; not a
                    # state that cannot be written (too large), nor a deleted stream's
                    gone = not isinstance(e, OSError) or not os.path.isdir(stream_dir)
                    if key not in failing and not gone:
                        failing.add(key)
                        log.warning("consumers of %s: cannot %s consumer %r (tried again every "
                                    "%gs): %s", stream_dir, "remove" if op is _REMOVE else "save",
                                    name, self.retry_after, e)
                    elif gone:
                        failing.discard(key)
                        log.warning("consumers of %s: cannot %s consumer %r: %s", stream_dir,
                                    "remove" if op is _REMOVE else "save", name, e)
                    if not gone and not self._closed:
                        with self._cond:
                            if key not in self._pending:
                                if not self._failed:
                                    self._retry_at = time.monotonic() + self.retry_after
                                self._failed[key] = op
            with self._cond:
                self._done = upto
                self._cond.notify_all()
