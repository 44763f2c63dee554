"""Authentication: team and robot keys, per-connection frame MACs, LS datagram MACs.

Principals are the team's robots plus the permit service (:data:`LEADER`). Every
pair of principals has its own key, derived from the team's secret:

* ``link(r)`` — robot ``r`` and the permit service;
* ``pair(a, b)`` — robots ``a`` and ``b`` (inbox connections, LS datagrams).

The leader holds the team secret (:class:`TeamKey`) and can derive every key. A robot
holds a :class:`RobotKey` (``coorp keys`` writes one file per robot): its own link
key and its pair keys, nothing else. So a robot can act only as itself: to join as
``r2``, or to send ``r2``'s frames or datagrams to anyone, one needs a key only
``r2`` (and the leader) has. A :class:`TeamKey` can act as any robot (tests, a
single-host deployment, the leader's own tools).

With the key of a pair,

* every frame after the server's greeting carries ``HMAC-SHA256`` over a direction
  label, the *receiver's* random per-connection nonce, a counter and the body: a
  frame copied from another connection fails (other nonce), reflected to its sender
  fails (other label), replayed within its connection fails (counter);
* every LS datagram names its sender, its receiver, its channel and a session the
  receiver handed out (over an authenticated connection) and is MACed whole under
  the pair's key; the receiver accepts only sessions it opened itself, each sequence
  number once (an anti-replay window), and datagrams inside a freshness window (see
  :mod:`._receiver`, :mod:`._lssessions`).

Different uses get different keys derived from each pair key, so a MAC made for one
purpose is never valid for another.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from .._errors import (
    AuthenticationError,
    MalformedFrameError,
    ReplayError,
    RuntimeUsageError,
)
from ._format import (
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
    "LEADER",
    "MIN_KEY_BYTES",
    "FrameOpener",
    "FrameSealer",
    "Keyring",
    "MacKey",
    "RobotKey",
    "TeamKey",
    "check_key_dir_mode",
    "check_key_file_mode",
    "load_key_file",
    "new_nonce",
    "open_hello",
    "seal_hello",
]

MIN_KEY_BYTES = 16
#: Environment variable read by the CLI when no key file is configured (hex).
KEY_ENV = "COORP_TEAM_KEY"
#: The permit service as a principal (not a valid robot name).
LEADER = "@leader"

CLIENT_TO_SERVER = b"c2s"
SERVER_TO_CLIENT = b"s2c"
_ROBOT_KEY_MAGIC = "# coorp robot key"


class MacKey:
    """The key of one pair of principals, as keyed MAC states copied per message (saves
    the key schedule on every MAC).

    Frames are MACed with HMAC-SHA256. LS datagrams use keyed BLAKE2b-256 (RFC 7693's
    keyed mode is a MAC; CPython's own implementation, no trip through OpenSSL's
    provider layers): on the LS path, which runs once per message after the thread
    slept, it costs 4.6-6 µs against HMAC's 10-11 µs (cold caches; 1.7 vs 1.8-3.1 µs
    warm), on the sender and again on the receiver."""

    __slots__ = ("_datagram", "_stream")

    def __init__(self, secret: bytes) -> None:
        self._stream = hmac.new(
            hmac.digest(secret, b"coorp v2 stream frames", "sha256"), digestmod=hashlib.sha256
        )
        self._datagram = hashlib.blake2b(
            key=hmac.digest(secret, b"coorp v3 ls datagrams blake2b", "sha256"), digest_size=32
        )

    def __repr__(self) -> str:
        return "MacKey(<secret>)"

    def frame_mac(self, label: bytes, nonce: bytes, counter: int, body: bytes) -> bytes:
        h = self._stream.copy()
        h.update(b"".join((label, nonce, counter.to_bytes(8, "big"), body)))
        return h.digest()

    def datagram_mac(self, data: bytes | bytearray | memoryview) -> bytes:
        h = self._datagram.copy()
        h.update(data)
        return h.digest()

    def datagram_mac2(
        self, head: bytes | bytearray | memoryview, body: bytes | bytearray | memoryview
    ) -> bytes:
        """``datagram_mac(head + body)`` without joining them."""
        h = self._datagram.copy()
        h.update(head)
        h.update(body)
        return h.digest()


def _derive(secret: bytes, a: str, b: str) -> bytes:
    if a == LEADER or b == LEADER:
        robot = b if a == LEADER else a
        return hmac.digest(secret, b"coorp v2 link\0" + robot.encode(), "sha256")
    lo, hi = sorted((a, b))
    return hmac.digest(secret, b"coorp v2 pair\0" + lo.encode() + b"\0" + hi.encode(), "sha256")


class Keyring:
    """What a process holds: keys for the pairs it may speak for."""

    #: The robot these keys belong to; None: the team key (may act as any robot).
    identity: str | None = None

    def check_identity(self, robot: str) -> None:
        """Raise :class:`RuntimeUsageError` unless these keys may act as ``robot``."""
        if self.identity is not None and robot != self.identity and robot != LEADER:
            raise RuntimeUsageError(
                f"this key belongs to robot {self.identity!r}: it cannot act as {robot!r} "
                "(each robot has its own key; see `coorp keys`)"
            )

    def mac(self, local: str, peer: str) -> MacKey:
        """The key between ``local`` (us) and ``peer``; :class:`AuthenticationError`
        if we hold none (an unknown robot)."""
        raise NotImplementedError


class TeamKey(Keyring):
    """The team's secret (the leader's); its bytes never appear in ``repr`` or logs."""

    __slots__ = ("_cache", "_secret")

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes | bytearray):
            raise RuntimeUsageError(
                f"team key must be bytes, got {type(secret).__name__}; "
                "use TeamKey.from_hex() or TeamKey.from_file() for text"
            )
        if len(secret) < MIN_KEY_BYTES:
            raise RuntimeUsageError(
                f"team key has {len(secret)} bytes; at least {MIN_KEY_BYTES} are required "
                "(generate keys with: coorp keys --config team.toml)"
            )
        self._secret = bytes(secret)
        self._cache: dict[tuple[str, str], MacKey] = {}

    @classmethod
    def from_hex(cls, text: str) -> TeamKey:
        try:
            return cls(bytes.fromhex(text.strip()))
        except ValueError:
            raise RuntimeUsageError("team key is not valid hex") from None

    @classmethod
    def from_file(cls, path: str | Path) -> TeamKey:
        """A key file holds the key as hex text (recommended) or as raw bytes; it must
        be accessible by its owner only."""
        key = load_key_file(path)
        if not isinstance(key, TeamKey):
            raise RuntimeUsageError(f"{path} is a robot key, not the team key")
        return key

    @classmethod
    def coerce(cls, key: Keyring | bytes | str) -> Keyring:
        """Accept a key object, raw bytes, or a hex string."""
        if isinstance(key, Keyring):
            return key
        if isinstance(key, str):
            return cls.from_hex(key)
        return cls(key)

    def __repr__(self) -> str:
        return "TeamKey(<secret>)"

    def mac(self, local: str, peer: str) -> MacKey:
        k = (local, peer) if local <= peer else (peer, local)
        m = self._cache.get(k)
        if m is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            m = self._cache[k] = MacKey(_derive(self._secret, local, peer))
        return m

    def robot_key(self, robot: str, peers: list[str]) -> RobotKey:
        """The key file contents of ``robot`` in a team of ``peers``."""
        return RobotKey(
            robot,
            _derive(self._secret, robot, LEADER),
            {p: _derive(self._secret, robot, p) for p in peers if p != robot},
        )

    def hex(self) -> str:
        return self._secret.hex()


class RobotKey(Keyring):
    """One robot's keys: its link to the leader and one key per peer robot."""

    def __init__(self, robot: str, link: bytes, pairs: dict[str, bytes]) -> None:
        self.identity = robot
        self._link = link
        self._pairs = dict(pairs)
        self._cache: dict[str, MacKey] = {}

    @property
    def robot(self) -> str:
        assert self.identity is not None
        return self.identity

    @property
    def peers(self) -> list[str]:
        return sorted(self._pairs)

    def __repr__(self) -> str:
        return f"RobotKey({self.identity!r}, <secret>)"

    def mac(self, local: str, peer: str) -> MacKey:
        if local == LEADER:
            local, peer = peer, local
        self.check_identity(local)
        m = self._cache.get(peer)
        if m is None:
            if peer == LEADER:
                secret = self._link
            elif peer in self._pairs:
                secret = self._pairs[peer]
            else:
                raise AuthenticationError(f"no key shared with {peer!r} (not in this robot's key)")
            m = self._cache[peer] = MacKey(secret)
        return m

    def to_text(self) -> str:
        lines = [
            f"{_ROBOT_KEY_MAGIC} of {self.identity}: keep it secret (chmod 600)",
            f"robot {self.identity}",
            f"link {self._link.hex()}",
        ]
        lines += [f"peer {p} {k.hex()}" for p, k in sorted(self._pairs.items())]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str, where: str) -> RobotKey:
        robot: str | None = None
        link: bytes | None = None
        pairs: dict[str, bytes] = {}
        for n, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            try:
                if parts[0] == "robot" and len(parts) == 2:
                    robot = parts[1]
                elif parts[0] == "link" and len(parts) == 2:
                    link = bytes.fromhex(parts[1])
                elif parts[0] == "peer" and len(parts) == 3:
                    pairs[parts[1]] = bytes.fromhex(parts[2])
                else:
                    raise ValueError(f"unknown line {parts[0]!r}")
            except ValueError as exc:
                raise RuntimeUsageError(f"robot key file {where}, line {n}: {exc}") from None
        if robot is None or link is None:
            raise RuntimeUsageError(f"robot key file {where}: needs a 'robot' and a 'link' line")
        if any(len(k) < MIN_KEY_BYTES for k in [link, *pairs.values()]):
            raise RuntimeUsageError(f"robot key file {where}: a key is shorter than 16 bytes")
        return cls(robot, link, pairs)


def check_key_file_mode(path: Path) -> None:
    """Refuse a key file others can read or write, or owned by someone else (as ssh
    refuses a private key with a too open mode)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RuntimeUsageError(f"cannot read key file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RuntimeUsageError(f"key file {path} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise RuntimeUsageError(
            f"key file {path} is accessible by group or others (mode {mode:04o}); "
            f"it must be owner-only: chmod 600 {path}"
        )
    if st.st_uid not in (os.geteuid(), 0):
        raise RuntimeUsageError(
            f"key file {path} is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
        )


def check_key_dir_mode(path: Path) -> None:
    """Refuse a key directory others can enter, read or write, or owned by someone
    else: a key file in it could be read, or replaced, through the directory."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RuntimeUsageError(f"cannot read key directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeUsageError(f"key directory {path} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise RuntimeUsageError(
            f"key directory {path} is accessible by group or others (mode {mode:04o}); "
            f"it must be owner-only: chmod 700 {path}"
        )
    if st.st_uid not in (os.geteuid(), 0):
        raise RuntimeUsageError(
            f"key directory {path} is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
        )


def load_key_file(path: str | Path) -> Keyring:
    """A team key (hex text or raw bytes) or a robot key file (``coorp keys``)."""
    p = Path(path)
    check_key_file_mode(p)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise RuntimeUsageError(f"cannot read key file {p}: {exc.strerror}") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return TeamKey(raw)
    if text.startswith(_ROBOT_KEY_MAGIC):
        return RobotKey.from_text(text, str(p))
    t = text.strip()
    if t and all(c in "0123456789abcdefABCDEF" for c in t) and len(t) % 2 == 0:
        return TeamKey(bytes.fromhex(t))
    return TeamKey(raw)


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

    def __init__(self, key: MacKey, label: bytes, peer_nonce: bytes) -> None:
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

    def __init__(self, key: MacKey, label: bytes, own_nonce: bytes) -> None:
        self._key = key
        self._label = label
        self._nonce = own_nonce
        self._last = 0

    def open(self, env: Envelope) -> Message:
        if len(env.mac) != MAC_BYTES:
            raise AuthenticationError("frame carries no MAC")
        expected = self._key.frame_mac(self._label, self._nonce, env.counter, env.body)
        if not hmac.compare_digest(expected, env.mac):
            raise AuthenticationError("frame MAC does not verify (wrong or foreign key)")
        # Verified first, so an attacker cannot probe counters with forged frames.
        if env.counter <= self._last:
            raise ReplayError(f"frame counter {env.counter} already used (last {self._last})")
        self._last = env.counter
        return decode_message(env.body)
