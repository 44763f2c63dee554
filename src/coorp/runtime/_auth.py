"""Authentication: the team key, per-connection frame MACs with counters, datagram MACs.

Threat model: anyone on the network can send, replay, truncate or reorder packets;
only team members hold the pre-shared key. So

* every frame after the server's greeting carries ``HMAC-SHA256`` over a direction
  label, the *receiver's* random per-connection nonce, a counter and the body. A
  frame copied from another connection fails (other nonce), a frame copied back to
  its sender fails (other direction label), a frame replayed within its connection
  fails (counter not above the last one);
* every LS datagram carries an HMAC over all its bytes, and the receiver keeps the
  highest sequence number per (robot, channel, session). A replay of a datagram from
  a session the receiver still remembers is rejected; remembered sessions are
  bounded (LRU), which is the documented limit of replay protection for UDP.

Different uses get different keys derived from the team key, so a MAC made for one
purpose is never valid for another.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import OrderedDict
from pathlib import Path

from ._errors import AuthenticationError, MalformedFrameError, ReplayError, RuntimeUsageError
from ._wire import (
    MAC_BYTES,
    NONCE_BYTES,
    Envelope,
    Hello,
    Message,
    decode_message,
    encode_envelope,
    encode_message,
)

__all__ = [
    "MIN_KEY_BYTES",
    "DatagramAuthenticator",
    "FrameOpener",
    "FrameSealer",
    "TeamKey",
    "new_nonce",
    "open_hello",
    "seal_hello",
]

MIN_KEY_BYTES = 16
#: Environment variable read by the CLI when no key file is configured (hex).
KEY_ENV = "COORP_TEAM_KEY"

CLIENT_TO_SERVER = b"c2s"
SERVER_TO_CLIENT = b"s2c"


class TeamKey:
    """The pre-shared key of a team; its bytes never appear in ``repr`` or logs."""

    __slots__ = ("_datagram", "_stream")

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes | bytearray):
            raise RuntimeUsageError(
                f"team key must be bytes, got {type(secret).__name__}; "
                "use TeamKey.from_hex() or TeamKey.from_file() for text"
            )
        if len(secret) < MIN_KEY_BYTES:
            raise RuntimeUsageError(
                f"team key has {len(secret)} bytes; at least {MIN_KEY_BYTES} are required "
                "(generate one with: python -c 'import secrets; print(secrets.token_hex(32))')"
            )
        secret = bytes(secret)
        # Keyed HMAC states, copied per message: saves the key schedule on every MAC
        # (a third of the cost for a small LS datagram).
        self._stream = hmac.new(
            hmac.digest(secret, b"coorp v1 stream frames", "sha256"), digestmod=hashlib.sha256
        )
        self._datagram = hmac.new(
            hmac.digest(secret, b"coorp v1 ls datagrams", "sha256"), digestmod=hashlib.sha256
        )

    @classmethod
    def from_hex(cls, text: str) -> TeamKey:
        try:
            return cls(bytes.fromhex(text.strip()))
        except ValueError:
            raise RuntimeUsageError("team key is not valid hex") from None

    @classmethod
    def from_file(cls, path: str | Path) -> TeamKey:
        """A key file holds the key as hex text (recommended) or as raw bytes."""
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise RuntimeUsageError(f"cannot read team key file {p}: {exc.strerror}") from None
        try:
            text = raw.decode("ascii").strip()
            if text and all(c in "0123456789abcdefABCDEF" for c in text) and len(text) % 2 == 0:
                return cls(bytes.fromhex(text))
        except UnicodeDecodeError:
            pass
        return cls(raw)

    @classmethod
    def coerce(cls, key: TeamKey | bytes | str) -> TeamKey:
        """Accept a key object, raw bytes, or a hex string."""
        if isinstance(key, TeamKey):
            return key
        if isinstance(key, str):
            return cls.from_hex(key)
        return cls(key)

    def __repr__(self) -> str:
        return "TeamKey(<secret>)"

    def frame_mac(self, label: bytes, nonce: bytes, counter: int, body: bytes) -> bytes:
        h = self._stream.copy()
        h.update(b"".join((label, nonce, counter.to_bytes(8, "big"), body)))
        return h.digest()

    def datagram_mac(self, data: bytes | bytearray | memoryview) -> bytes:
        h = self._datagram.copy()
        h.update(data)
        return h.digest()


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def seal_hello(hello: Hello) -> bytes:
    """The one unauthenticated frame: counter 0, no MAC."""
    return encode_envelope(0, encode_message(hello), b"")


def open_hello(env: Envelope) -> Hello:
    if env.counter != 0 or env.mac:
        raise MalformedFrameError("expected the server's greeting first")
    msg = decode_message(env.body)
    if not isinstance(msg, Hello):
        raise MalformedFrameError(f"expected a greeting, got {type(msg).__name__}")
    return msg


class FrameSealer:
    """Outgoing half of a connection: numbers and MACs frames for the peer's nonce."""

    __slots__ = ("_counter", "_key", "_label", "_peer_nonce")

    def __init__(self, key: TeamKey, label: bytes, peer_nonce: bytes) -> None:
        self._key = key
        self._label = label
        self._peer_nonce = peer_nonce
        self._counter = 0

    def seal(self, msg: Message) -> bytes:
        self._counter += 1
        body = encode_message(msg)
        mac = self._key.frame_mac(self._label, self._peer_nonce, self._counter, body)
        return encode_envelope(self._counter, body, mac)


class FrameOpener:
    """Incoming half: verifies MACs made for *our* nonce and rejects reused counters."""

    __slots__ = ("_key", "_label", "_last", "_nonce")

    def __init__(self, key: TeamKey, label: bytes, own_nonce: bytes) -> None:
        self._key = key
        self._label = label
        self._nonce = own_nonce
        self._last = 0

    def open(self, env: Envelope) -> Message:
        if len(env.mac) != MAC_BYTES:
            raise AuthenticationError("frame carries no MAC")
        expected = self._key.frame_mac(self._label, self._nonce, env.counter, env.body)
        if not hmac.compare_digest(expected, env.mac):
            raise AuthenticationError("frame MAC does not verify under the team key")
        # Verified first, so an attacker cannot probe counters with forged frames.
        if env.counter <= self._last:
            raise ReplayError(f"frame counter {env.counter} already used (last {self._last})")
        self._last = env.counter
        return decode_message(env.body)


class DatagramAuthenticator:
    """Signs LS datagrams and checks them, with per-session replay windows."""

    def __init__(self, key: TeamKey, *, max_sessions: int = 4096) -> None:
        self._key = key
        self._max_sessions = max_sessions
        self._highest: OrderedDict[tuple[str, str, int], int] = OrderedDict()

    def sign(self, data: bytes | bytearray | memoryview) -> bytes:
        return self._key.datagram_mac(data)

    def verify(self, signed: bytes | memoryview, mac: bytes | memoryview) -> None:
        if not hmac.compare_digest(self._key.datagram_mac(signed), mac):
            raise AuthenticationError("datagram MAC does not verify under the team key")

    def accept_sequence(self, robot: str, channel: str, session: int, seq: int) -> None:
        """Record ``seq``; raise :class:`ReplayError` if it is not newer than the last.

        Only called after :meth:`verify`, so forged datagrams never evict sessions.
        An older datagram that arrives late is rejected too: on an LS channel it is
        stale anyway (keep-last freshness).
        """
        k = (robot, channel, session)
        last = self._highest.get(k)
        if last is not None:
            if seq <= last:
                raise ReplayError(f"{robot}/{channel}: sequence {seq} not newer than {last}")
            self._highest.move_to_end(k)
        self._highest[k] = seq
        if len(self._highest) > self._max_sessions:
            self._highest.popitem(last=False)
