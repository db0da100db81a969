"""Refused handshakes: what the broker logs about a client that could not connect. Pure code.

A client with the wrong security settings never gets as far as a ZEPS command: ZeroMQ closes its
connection during the handshake. Two sources say why (the I/O shell, :mod:`zeps.broker.server`,
feeds both in):

* the ZAP authenticator (:class:`zeps.broker.security.CurveServer`) refuses a CurveZMQ key that
  is on neither the allow-list nor the ACL's ``[clients]``: it knows the client's address and
  public key and the ZAP status (``400 Unknown key``) -- :meth:`HandshakeRefusals.zap_refused`;
* the ROUTER socket's monitor reports handshakes that fail before any key is known
  (``EVENT_HANDSHAKE_FAILED_PROTOCOL``: a plaintext client meeting a CurveZMQ broker, or the
  other way round, or a client whose ``--server-key`` is another broker's key, so that its HELLO
  does not decrypt; ``EVENT_HANDSHAKE_FAILED_NO_DETAIL``) -- :meth:`HandshakeRefusals.
  monitor_event`. libzmq 4.3 does not say the peer's address in these events (their endpoint is
  the broker's own), and such a connection is closed before the broker could ask its
  descriptor, so those lines say ``peer=unknown``.

Each refusal is one ``handshake_refused`` line (``peer``, ``key`` when known, ``why``: a short
code, ``reason``: what it means and what to change), at most one per peer and ``why`` every
``interval`` seconds (:class:`RefusalLimiter`): a misconfigured client retries several times a
second, and a hostile one may try on purpose. What was not logged is counted, and one
``handshakes_refused_unlogged`` line per interval gives the count. The clock is passed in
(``now``), so the limits are tested without waiting.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional, Tuple

import zmq

__all__ = ["RefusalLimiter", "HandshakeRefusals", "REFUSAL_INTERVAL", "MAX_PEERS",
           "HANDSHAKE_EVENTS"]

#: Seconds between two lines about the same peer (and reason), and between two summaries.
REFUSAL_INTERVAL = 10.0
#: Peers remembered at once: beyond them (a flood from many addresses), refusals are counted.
MAX_PEERS = 1024
#: The monitor events of failed handshakes.
HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)

_PROTOCOL_NAMES = {int(getattr(zmq, n)): n[len("PROTOCOL_ERROR_"):]
                   for n in dir(zmq) if n.startswith("PROTOCOL_ERROR_")}


class RefusalLimiter:
    """At most one line per key (a peer address and reason) every ``interval`` seconds.

    :meth:`admit` says whether to log a refusal; the ones it holds back are counted, and
    :meth:`summary` hands out the count once per ``interval``. At most ``max_peers`` keys are
    remembered (those of the last ``interval`` seconds): past that every refusal is counted, so
    memory and work per refusal stay bounded whatever a flood of addresses does.
    """

    def __init__(self, interval: float = REFUSAL_INTERVAL, max_peers: int = MAX_PEERS):
        self.interval = float(interval)
        self.max_peers = max_peers
        self._last: "OrderedDict[object, float]" = OrderedDict()  # key -> when last logged
        self.suppressed = 0              # refusals held back since the last summary
        self._peers: set = set()         # their keys (at most max_peers)
        self._due: Optional[float] = None   # when the next summary may go out

    def admit(self, key, now: float) -> bool:
        last = self._last
        while last:                                  # forget what is older than an interval
            oldest, t = next(iter(last.items()))
            if now - t < self.interval:
                break
            del last[oldest]
        if key not in last and len(last) < self.max_peers:
            last[key] = now                          # newest at the end: oldest first above
            return True
        self.suppressed += 1
        if len(self._peers) < self.max_peers:
            self._peers.add(key)
        if self._due is None:
            self._due = now + self.interval
        return False

    def count(self, n: int, now: float) -> None:
        """``n`` refusals seen but not told apart (the authenticator kept no more): held back."""
        if n > 0:
            self.suppressed += n
            if self._due is None:
                self._due = now + self.interval

    def summary(self, now: float) -> Optional[Tuple[int, int]]:
        """``(refusals, keys)`` held back, once ``interval`` seconds passed since the first of
        them; None before, or when none was held back."""
        if not self.suppressed or now < self._due:
            return None
        out = (self.suppressed, len(self._peers))
        self.suppressed = 0
        self._peers = set()
        self._due = None
        return out


def _protocol_reason(value: int, curve: bool) -> Tuple[str, str]:
    """(why, reason) of an ``EVENT_HANDSHAKE_FAILED_PROTOCOL`` with libzmq's error ``value``."""
    if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        if curve:
            return ("not-curve", "the client does not use CurveZMQ (a plaintext client): it needs "
                                 "the broker's public key (--server-key) and a key pair "
                                 "(--client-key)")
        return ("curve-client", "the client uses CurveZMQ but this broker runs without "
                                "--curve-secret")
    if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return ("server-key", "the client's CurveZMQ HELLO does not decrypt with this broker's "
                              "key: the client was given another public key as --server-key")
    name = _PROTOCOL_NAMES.get(value, "UNKNOWN")
    return ("protocol", f"ZeroMQ handshake error {name} (0x{value:08x})")


class HandshakeRefusals:
    """Turns refused handshakes into rate-limited log lines: ``log(event, **fields)`` is called
    with ``handshake_refused`` (fields ``peer``, ``key``, ``why``, ``reason``) and
    ``handshakes_refused_unlogged`` (``count``, ``peers``, ``seconds``). ``curve``: whether the
    broker is a CurveZMQ server (it changes what a mechanism mismatch means)."""

    def __init__(self, log: Callable[..., None], curve: bool,
                 interval: float = REFUSAL_INTERVAL, max_peers: int = MAX_PEERS):
        self.log = log
        self.curve = curve
        self.limiter = RefusalLimiter(interval, max_peers)
        self.refused = 0                 # every refused handshake seen

    def _refused(self, peer: str, key: Optional[str], why: str, reason: str, now: float) -> None:
        self.refused += 1
        if self.limiter.admit((peer, why), now):
            self.log("handshake_refused", peer=peer, key=key, why=why, reason=reason)
        self.tick(now)

    def zap_refused(self, address: str, key: Optional[str], status: str, text: str,
                    now: float) -> None:
        """The ZAP handler refused a client at ``address`` with public ``key`` (Z85 text, None
        if it had none) and status ``status`` (``"400"``) and ``text``."""
        reason = f"ZAP {status} {text}".rstrip()
        if status == "400":
            reason += (": this key is on neither the allow-list (--allow) nor the ACL's "
                       "[clients]")
        self._refused(address or "unknown", key, "not-allowed", reason, now)

    def lost(self, n: int, now: float) -> None:
        """``n`` refusals the authenticator only counted (a flood): in the next summary."""
        self.refused += n
        self.limiter.count(n, now)

    def monitor_event(self, event: int, value: int, now: float) -> None:
        """A handshake-failed event of the broker's socket monitor. ``HANDSHAKE_FAILED_AUTH``
        is left to :meth:`zap_refused`, which knows the peer and its key."""
        if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            why, reason = _protocol_reason(value, self.curve)
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            # The client closed the connection mid-handshake: what one with the other security
            # mechanism does when it sees the broker's greeting first (the race decides which
            # side reports the mismatch).
            why, reason = "no-detail", (
                "the client closed the connection during the handshake: " + (
                    "a plaintext client does so at a CurveZMQ broker (it needs --server-key and "
                    "--client-key)" if self.curve else
                    "a CurveZMQ client does so at a broker without --curve-secret"))
        else:
            return
        self._refused("unknown", None, why, reason, now)

    def tick(self, now: float) -> None:
        """Log how many refusals were held back, at most once per interval."""
        s = self.limiter.summary(now)
        if s is not None:
            self.log("handshakes_refused_unlogged", count=s[0], peers=s[1],
                     seconds=self.limiter.interval)

    @property
    def unreported(self) -> bool:
        """Refusals held back and not yet summed up (the shell then calls :meth:`tick`)."""
        return self.limiter.suppressed > 0
