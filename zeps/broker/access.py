"""Who may connect and what each may do, in the broker core: the CurveZMQ key a connection
authenticated with, the allow-list of keys (a key removed from it is revoked at once), and the
ACL (its rights apply at once to attached clients).

A mixin of :class:`~zeps.broker.core.BrokerCore` (pure, like the rest of the core); the shell
calls :meth:`Access.identify`, :meth:`Access.set_allowed_keys` and :meth:`Access.set_acl`.
"""
from __future__ import annotations

from typing import Optional

from zeps.protocol.reasons import Reason


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
        """New access rules (at start, or reloaded on SIGHUP) apply at once to attached clients,
        each told with one INVALID; nobody is disconnected:

        * a client left with no right on its stream is detached (it was still answered
          STREAM-INFO, SEQ-AT and STREAM-ID);
        * a client that lost the right to read loses its subscriptions, its membership of a
          durable consumer (what it held goes to the other members) and its SNAPSHOT under way
          (a member and a snapshot went on being fed), and its DELIVERs not sent yet are
          dropped."""
        self.acl = acl
        for s in list(self.sessions.values()):
            if s.stream is None:
                continue
            self._set_rights(s)
            who, name = acl.who(s.user), s.stream
            st = self.streams.get(name)
            if not (s.may_subscribe or s.may_publish):
                if st is not None:
                    st.detach(s)
                else:
                    s.detached()
                self._end_peering(s)
                self._invalid(s.identity, Reason.not_allowed(who, "attach", name, "detached"))
                continue
            if s.may_subscribe or not (s.subscriptions or s.consumer or s.snapshot):
                continue
            if st is not None:
                st.unsubscribe_all(s)
            if s.consumer is not None:
                self.member_left(s)
            s.snapshot = None
            self.snapshotting.pop(s.identity, None)
            self._end_peering(s)
            self._invalid(s.identity, Reason.not_allowed(
                who, "subscribe", name, "subscriptions, consumer and snapshot ended"))
