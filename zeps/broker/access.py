"""Who may connect and what each may do, in the broker core: the CurveZMQ key a connection
authenticated with, the allow-list of keys (a key removed from it is revoked at once), and the
ACL (its rights apply at once to attached clients).

A mixin of :class:`~zeps.broker.core.BrokerCore` (pure, like the rest of the core); the shell
calls :meth:`Access.identify`, :meth:`Access.set_allowed_keys` and :meth:`Access.set_acl`.
"""
from __future__ import annotations

from typing import Optional

from zeps.protocol.reasons import NOT_ALLOWED, Reason


class Access:
    """Keys, the allow-list and the ACL of the broker core."""

    def identify(self, identity: bytes, user: Optional[str]) -> None:
        """The shell learnt the key a connection authenticated with (CurveZMQ ``User-Id``)."""
        if user:
            self.users[identity] = user
            if self.allowed_keys is not None and user not in self.allowed_keys:
                self.revoked[identity] = False  # revoked between its handshake and now
            s = self.sessions.get(identity)
            if s is not None:
                s.user = user

    def set_allowed_keys(self, keys) -> None:
        """The CURVE allow-list (at start, and reloaded on SIGHUP): the public keys (Z85) that
        may connect. The authenticator judges only new handshakes, so a connection whose key is
        no longer among them is revoked here, as NATS closes a revoked user's connections: its
        session is forgotten (detached, subscriptions and peering gone), it is told so with one
        INVALID ``not allowed: ...``, and every later command on that connection is refused the
        same way, whatever the state (a new session cannot start on it). A key allowed again
        is served again (from a new ATTACH). Costs one look per connection, once per reload."""
        self.allowed_keys = allowed = frozenset(keys)
        before, self.revoked = self.revoked, {}
        for identity, user in self.users.items():
            if user not in allowed:          # its refusals stay ERROR if it chose them
                s = self.sessions.get(identity)
                self.revoked[identity] = before.get(identity, s is not None and s.reasons)
        for identity in self.revoked.keys() - before.keys():
            self.log("key_revoked", client=identity.hex(), key=self.users[identity])
            self.forget(identity)
            self._refuse_revoked(identity)

    def _refuse_revoked(self, identity: bytes) -> None:
        """INVALID (or ERROR, code NOT_ALLOWED, fields ``connect`` and no stream) to a
        connection whose key was revoked; it has no session to hold the choice."""
        user = self.users.get(identity)
        reason = Reason.key_revoked(self.acl.who(user) if self.acl is not None
                                    else f"client {user!r}")
        self.outbox.append((identity, reason.frame(self.revoked[identity])))
        self.invalids[reason.label] += 1

    def set_acl(self, acl) -> None:
        """New access rules (at start, or reloaded on SIGHUP) apply at once to attached clients:
        a client that lost the right to read loses its subscriptions, with INVALID; nobody is
        disconnected."""
        self.acl = acl
        for s in list(self.sessions.values()):
            if s.stream is None:
                continue
            self._set_rights(s)
            if not s.may_subscribe and s.subscriptions:
                st = self.streams.get(s.stream)
                if st is not None:
                    st.unsubscribe_all(s)
                self._invalid(s.identity, f"{NOT_ALLOWED}{acl.who(s.user)} may no longer read "
                                          f"stream {s.stream!r}: subscriptions removed")
