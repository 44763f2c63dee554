"""LS datagrams in: one datagram checked and turned into a :class:`Message`.

:class:`LsDecoder` checks a datagram's structure, MAC, session, order and freshness.
It is pure, so the sync inbox can run it on the caller's thread (one thread hop less
latency) and the async inbox on the event loop. :class:`Message` is what every inbox
delivers, LS or bulk.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from coorp._errors import PeerError

from .._errors import (
    AuthenticationError,
    MalformedFrameError,
    ReplayError,
    StaleError,
)
from ..wire import (
    MAC_BYTES,
    Keyring,
    MacKey,
    canonical_fields,
    ls_header_prefix,
    split_datagram,
)
from ._lssessions import DEFAULT_WINDOW, LsSession, SessionTable

__all__ = ["LsDecoder", "Message"]


class Message(msgspec.Struct, frozen=True):
    """One whole message as delivered to the application (read-only)."""

    kind: Literal["ls", "bulk"]
    robot: str
    """The sending robot (authenticated with the team key)."""
    channel: str
    """The LS channel or bulk stream name."""
    seq: int
    """Per-channel sequence number (LS) or message id (bulk), increasing."""
    payload: bytes | memoryview
    """``bytes`` for LS; for bulk, a writable ``memoryview`` over the message's own
    receive buffer (no copy was made; ``bytes(payload)`` makes one)."""
    sent_ns: int
    """Sender's ``CLOCK_MONOTONIC`` when the application called ``send``."""
    received_ns: int
    """Receiver's ``CLOCK_MONOTONIC`` when the message was complete."""
    first_byte_ns: int
    """Receiver's clock at the first byte (bulk) or at arrival (LS)."""
    deadline_ns: int | None
    """LS deadline on the sender's clock; None for bulk."""
    peer: str
    """Network address it came from."""

    @property
    def latency_ns(self) -> int:
        """``received_ns − sent_ns``: the one-way latency when sender and receiver share
        a clock (same host, or synchronized clocks); otherwise meaningless."""
        return self.received_ns - self.sent_ns


@dataclass(frozen=True, slots=True)
class _Canonical:
    """What a session's datagram prefix stands for: names already validated, the MAC
    key of the pair (None: we hold none, so such datagrams take the full parse)."""

    robot: str
    channel: str
    session: int
    mac: MacKey | None


class LsDecoder:
    """Datagram -> :class:`Message`, or a :class:`~coorp.PeerError` saying why not.

    A datagram is accepted only if it is addressed to this receiver's robot
    (``dest``), its MAC verifies under the key of the pair (sender, receiver), it
    carries the session this receiver opened for (sender, channel) — sessions are
    handed out over an authenticated connection (:meth:`open_session`) and live only
    as long as this decoder, so a restarted receiver rejects every old session —,
    its sequence number was not accepted before and is inside the session's
    anti-replay window (reordered datagrams are accepted and counted as such), and it
    is fresh: sent at most ``max_age_ns`` before now, on the sender's clock mapped to
    ours. Sessions, quotas and per-flow counts live in a
    :class:`~._lssessions.SessionTable`.
    """

    def __init__(
        self,
        keys: Keyring,
        robot: str,
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        max_age_ns: int = 2_000_000_000,
        max_sessions: int = 4096,
        sessions_per_member: int | None = None,
        replay_window: int = DEFAULT_WINDOW,
    ) -> None:
        self._keys = keys
        self.robot = robot
        self._clock = clock
        self.max_age_ns = max_age_ns
        self.table = SessionTable(
            per_member=sessions_per_member if sessions_per_member is not None else max_sessions,
            max_sessions=max_sessions,
            window=replay_window,
        )
        self._sessions = self.table._sessions  # read without the lock on the fast path
        self._macs: dict[str, MacKey] = {}
        # Open sessions by their datagrams' constant prefix: the fast path for
        # datagrams in the canonical layout our senders use (see decode).
        self._canonical: dict[bytes, _Canonical] = {}
        self._lock = self.table.lock

    def open_session(
        self,
        robot: str,
        channel: str,
        sender_now_ns: int,
        on_gone: Callable[[], None] | None = None,
    ) -> int:
        """A new session for ``robot``'s ``channel`` (replacing an older one, whose
        ``on_gone`` is called); :class:`LimitedError` when ``robot`` is over its quota."""
        session = int.from_bytes(os.urandom(8), "big") >> 1
        self._install_session(robot, channel, session, self._clock() - sender_now_ns, on_gone)
        return session

    def _install_session(
        self,
        robot: str,
        channel: str,
        session: int,
        offset_ns: int,
        on_gone: Callable[[], None] | None = None,
    ) -> None:
        prefix = ls_header_prefix(robot, self.robot, channel, session)
        try:
            mac: MacKey | None = self._mac(robot)
        except PeerError:
            mac = None
        s, ended = self.table.open(robot, channel, session, offset_ns, prefix, on_gone)
        with self._lock:
            for old in ended:
                self._canonical.pop(old.prefix, None)
            self._canonical[prefix] = _Canonical(robot, channel, s.session, mac)
        for old in ended:
            if old.on_gone is not None:
                old.on_gone()

    def _mac(self, robot: str) -> MacKey:
        key = self._macs.get(robot)
        if key is None:
            key = self._keys.mac(self.robot, robot)
            if len(self._macs) < 4096:
                self._macs[robot] = key
        return key

    def refresh(
        self, robot: str, channel: str, session: int, sender_now_ns: int, sent: int, last_seq: int
    ) -> LsSession | None:
        """A keep-alive of the session: re-measure the clock offset (drift), update its
        loss count from the sender's; None if the session is gone."""
        return self.table.report(
            robot, channel, session, self._clock() - sender_now_ns, sent, last_seq
        )

    def detach(self, robot: str, channel: str, session: int) -> None:
        self.table.detach(robot, channel, session)

    @property
    def sessions(self) -> int:
        return len(self.table)

    def flows(self) -> dict[str, dict[str, int]]:
        """Per-flow counts, ``"robot/channel"`` -> received, lost, reordered, replayed,
        sessions."""
        return self.table.flows()

    def offset_ns(self, robot: str, channel: str) -> int | None:
        """The session's clock offset (receiver − sender, an upper bound), or None."""
        s = self._sessions.get((robot, channel))
        return None if s is None else s.offset_ns

    def decode(self, data: bytes | bytearray | memoryview, peer: str) -> Message:
        now = self._clock()
        # Fast path: a datagram in our senders' own layout whose constant prefix is an
        # open session's needs no parsing of names (they are the session's, validated
        # when it opened); its fixed-width fields are read with one unpack. Anything
        # else takes the full parse, which accepts and rejects exactly as before.
        canon = canonical_fields(data) if type(data) is bytes else None
        known = None if canon is None else self._canonical.get(canon[0])
        if canon is not None and known is not None and known.mac is not None:
            _, seq, sent_ns, deadline_ns, start = canon
            view = memoryview(data)
            end = len(view) - MAC_BYTES
            if not hmac.compare_digest(known.mac.datagram_mac(view[:end]), view[end:]):
                raise AuthenticationError(f"datagram MAC does not verify for {known.robot!r}")
            robot, channel, session, payload = (
                known.robot,
                known.channel,
                known.session,
                view[start:end],
            )
        else:
            robot, channel, session, seq, sent_ns, deadline_ns, payload = self._parse(data)
        self._admit(robot, channel, session, seq, sent_ns, now)
        return Message(
            "ls", robot, channel, seq, bytes(payload), sent_ns, now, now, deadline_ns, peer
        )

    def _parse(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[str, str, int, int, int, int, memoryview]:
        """The full parse and MAC check of any datagram."""
        if len(data) <= MAC_BYTES:
            raise MalformedFrameError(f"datagram of {len(data)} bytes is too short")
        # Structure first (bounded; nothing is trusted yet): the header names the
        # sender, whose pair key must have made the MAC. Names are checked only by
        # equality with validated ones (this robot, a session opened here); any other
        # datagram is parsed again with every check, and fails as it always did.
        header, payload, signed, mac = split_datagram(data, check_names=False)
        if header.dest != self.robot or (header.robot, header.channel) not in self._sessions:
            header, payload, signed, mac = split_datagram(data)
        if header.dest != self.robot:
            raise AuthenticationError(
                f"datagram for robot {header.dest!r} reached {self.robot!r} (misdirected "
                "or replayed from another robot)"
            )
        if not hmac.compare_digest(self._mac(header.robot).datagram_mac(signed), mac):
            raise AuthenticationError(f"datagram MAC does not verify for {header.robot!r}")
        return (
            header.robot,
            header.channel,
            header.session,
            header.seq,
            header.sent_ns,
            header.deadline_ns,
            payload,
        )

    def _admit(
        self, robot: str, channel: str, session: int, seq: int, sent_ns: int, now: int
    ) -> None:
        """Session, window and freshness of an authenticated datagram; records it."""
        with self._lock:
            s = self._sessions.get((robot, channel))
            if s is None or s.session != session:
                raise StaleError(
                    f"{robot}/{channel}: session {session} is not open "
                    "here (an old session, or this receiver restarted)"
                )
            try:
                s.window.check(seq)
            except ReplayError as exc:
                raise ReplayError(f"{robot}/{channel}: {exc}") from None
            age = now - (sent_ns + s.offset_ns)
            if age > self.max_age_ns:
                raise StaleError(
                    f"{robot}/{channel}: datagram {seq} is "
                    f"{age / 1e9:.1f} s old (limit {self.max_age_ns / 1e9:g} s)"
                )
            s.window.commit(seq)
            if age < 0:
                s.offset_ns += age  # it came sooner than the offset allowed: tighten
