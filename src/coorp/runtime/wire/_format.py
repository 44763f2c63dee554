"""The wire format: every byte Coorp puts on a socket, and the only code that parses them.

Two kinds of traffic:

* **Framed streams** (TCP: agent<->leader control, sender->receiver bulk data). A frame
  is a 4-byte big-endian length followed by a msgpack :class:`Envelope`
  ``[version, counter, body, mac]``; ``body`` is one msgpack message of the
  :data:`Message` union. The length is checked against the channel's limit *before*
  anything is allocated. Bulk payload bytes follow a :class:`BulkData` frame raw (the
  frame says how many), so large transfers are not re-encoded.
* **LS datagrams** (UDP): ``[u16 header length][msgpack LsHeader][payload][32-byte MAC]``.

Decoding is strict (msgspec typed decoders with bounds on every field). Nothing here
ever unpickles or evaluates peer data. Every failure raises a
:class:`~coorp.PeerError` subclass, never anything else: that is what the fuzz tests
check. Authentication (the MAC and counters) lives in :mod:`._auth`.
"""

from __future__ import annotations

import struct
from typing import Annotated, Final, Literal

import msgspec
from msgspec import Meta, Struct

from .._errors import FrameTooLargeError, MalformedFrameError, UnsupportedVersionError

__all__ = [
    "LENGTH_PREFIX",
    "MAC_BYTES",
    "MAX_CONTROL_FRAME_BYTES",
    "MAX_DATAGRAM_BYTES",
    "MAX_LS_PAYLOAD_BYTES",
    "MAX_SEGMENT_BYTES",
    "NONCE_BYTES",
    "WIRE_VERSION",
    "AgentReport",
    "BulkAccept",
    "BulkData",
    "BulkDone",
    "BulkOpen",
    "BulkReject",
    "Envelope",
    "FlowSummary",
    "Granted",
    "Hello",
    "Join",
    "LatencySummary",
    "LsAccept",
    "LsHeader",
    "LsKeepAlive",
    "LsOpen",
    "LsStatus",
    "Message",
    "PeerFrame",
    "Ping",
    "Pong",
    "Refused",
    "Release",
    "Request",
    "Revoked",
    "RobotRow",
    "StatsQuery",
    "StatsReply",
    "TeamQuery",
    "TeamReply",
    "Welcome",
    "canonical_fields",
    "decode_envelope",
    "decode_message",
    "encode_envelope",
    "encode_message",
    "ls_datagram_head",
    "ls_header_prefix",
    "pack_datagram",
    "parse_frame_length",
    "split_datagram",
]

#: 4: LS session keep-alives carry the sender's counts and are answered with the
#: receiver's (``LsKeepAlive``/``LsStatus``: liveness and loss reports). 5: the leader
#: tells permit holders how many robots wait (``Queued``). 6: cell leaders of one
#: channel peer (role ``leader``, ``PeerFrame``: a fleet, docs/runtime.md "A fleet").
WIRE_VERSION: Final = 6
NONCE_BYTES: Final = 16
MAC_BYTES: Final = 32
LENGTH_PREFIX: Final = struct.Struct(">I")
#: Control and bulk-handshake frames are tiny; a stats reply for a large team is the
#: biggest. Anything above this is refused before it is read.
MAX_CONTROL_FRAME_BYTES: Final = 16 * 1024
#: One UDP datagram over IPv4 (65535 - 20 IP - 8 UDP).
MAX_DATAGRAM_BYTES: Final = 65_507
#: Largest raw segment after one BulkData frame (bounds one uninterruptible read).
MAX_SEGMENT_BYTES: Final = 16 * 1024 * 1024
_DGRAM_PREFIX: Final = struct.Struct(">H")
_MAX_LS_HEADER_BYTES: Final = 512
#: What is left of a datagram for the application payload in the worst case.
MAX_LS_PAYLOAD_BYTES: Final = (
    MAX_DATAGRAM_BYTES - _DGRAM_PREFIX.size - _MAX_LS_HEADER_BYTES - MAC_BYTES
)

# Bounded field types: a decoder rejects anything outside them.
#: Unsigned, within msgpack's int64 so every peer can decode it.
U64 = Annotated[int, Meta(ge=0, le=2**63 - 1)]
# \Z, not $: Python's $ also matches before a trailing newline ("r1\n" passed).
Name = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+\Z")]
Nonce = Annotated[bytes, Meta(min_length=NONCE_BYTES, max_length=NONCE_BYTES)]
Reason = Annotated[str, Meta(max_length=200)]


class Envelope(Struct, array_like=True, frozen=True):
    """Outer layer of every stream frame. ``counter`` 0 and an empty ``mac`` mark the
    one unauthenticated frame of a connection (the server's :class:`Hello`)."""

    v: int
    counter: U64
    body: Annotated[bytes, Meta(max_length=MAX_CONTROL_FRAME_BYTES)]
    mac: Annotated[bytes, Meta(max_length=MAC_BYTES)]


class _Msg(Struct, array_like=True, tag_field="t"):
    pass


class Hello(_Msg, tag="hello"):
    """Server -> client, unauthenticated: the nonce the client must MAC its frames to."""

    nonce: Nonce
    service: Literal["leader", "receiver"]
    epoch: U64
    robot: Annotated[str, Meta(max_length=64, pattern=r"^[A-Za-z0-9_.:-]*\Z")] = ""
    """The server's robot (an inbox's owner): whose pair key the client must use.
    Empty for the permit service."""


class Join(_Msg, tag="join"):
    """Client -> server, first authenticated frame: who I am and my own nonce."""

    robot: Name
    nonce: Nonce
    role: Literal["agent", "observer", "sender", "ls", "leader"]


class Welcome(_Msg, tag="welcome"):
    """Leader -> agent: the team's permit parameters and the heartbeat to keep."""

    epoch: U64
    limit: Annotated[int, Meta(ge=1, le=1024)]
    timeslice_ns: U64
    heartbeat_ns: U64


class Request(_Msg, tag="request"):
    """Agent -> leader: this robot has BH data (Algorithm 1 request), for ``flows``
    streams or connections at once (timeslices per grant, at most the leader's
    ``max_weight``). Sent again when that number grew while the robot waits or holds."""

    flows: Annotated[int, Meta(ge=1, le=1 << 16)] = 1


class Release(_Msg, tag="release"):
    """Agent -> leader: done early with grant ``grant_id``."""

    grant_id: U64


class Granted(_Msg, tag="granted"):
    """Leader -> agent: a permit; times on the leader's clock (only the length matters)."""

    grant_id: U64
    granted_ns: U64
    expires_ns: U64


class Revoked(_Msg, tag="revoked"):
    """Leader -> agent: the permit is taken away; stop sending BH."""

    grant_id: U64
    reason: Reason


class Queued(_Msg, tag="queued"):
    """Leader -> permit holder: ``waiting`` robots wait for a permit (sent when the
    number changes). A holder with nothing more to send releases at once when others
    wait, instead of keeping the permit a while for its next message."""

    waiting: U64


class Ping(_Msg, tag="ping"):
    token: U64


class Pong(_Msg, tag="pong"):
    token: U64


class StatsQuery(_Msg, tag="stats?"):
    """Observer -> leader: ask for the counters."""


class StatsReply(_Msg, tag="stats"):
    counters: Annotated[dict[Name, U64], Meta(max_length=64)]
    holders: Annotated[list[Name], Meta(max_length=256)]
    waiting: Annotated[list[Name], Meta(max_length=256)]


Addr = Annotated[str, Meta(max_length=64)]


class LatencySummary(Struct, array_like=True, frozen=True):
    """LS messages of one sender received by one inbox, over its recent ones."""

    sender: Name
    received: U64
    late: U64
    """Received after their deadline (on the sender's clock, mapped)."""
    p50_us: U64
    p99_us: U64


class FlowSummary(Struct, array_like=True, frozen=True):
    """One intercepted bulk connection (transparent mode)."""

    dest: Addr
    bytes_up: U64
    active: bool


class AgentReport(_Msg, tag="report"):
    """Agent -> leader, every second: what ``coorp top`` shows. Counters are
    cumulative; the leader turns two reports into rates."""

    mode: Annotated[str, Meta(max_length=16)]
    ls_sends: U64
    """LS sends this robot made (its API channels and, in transparent mode, observed)."""
    ls_flows: U64
    bulk_bytes: U64
    """Bulk payload bytes sent (API streams and intercepted connections)."""
    gate_pause_ns: U64
    permit_wait_ns: U64
    latency: Annotated[list[LatencySummary], Meta(max_length=32)]
    intercepted: Annotated[list[FlowSummary], Meta(max_length=16)]
    relayed: U64
    """Intercepted connections so far."""


class TeamQuery(_Msg, tag="team?"):
    """Observer -> leader: rows ``offset``.. of the team's status (``coorp top``)."""

    offset: U64 = 0


class RobotRow(Struct, array_like=True, frozen=True):
    robot: Name
    connected: bool
    age_ms: U64
    """Since its last report (0 if it never sent one)."""
    mode: Annotated[str, Meta(max_length=16)]
    ls_rate_hz: float
    ls_flows: U64
    ls_p50_ms: float | None
    ls_p99_ms: float | None
    """Its LS messages as the inboxes that received them measured (API path)."""
    ls_received: U64
    ls_late: U64
    bulk_mbps: float
    gate_paused: float
    """Share of the last interval its bulk was paused by local preemption."""
    relayed: U64
    intercepted: Annotated[list[FlowSummary], Meta(max_length=16)]


class TeamReply(_Msg, tag="team"):
    holders: Annotated[list[Name], Meta(max_length=256)]
    waiting: Annotated[list[Name], Meta(max_length=256)]
    rows: Annotated[list[RobotRow], Meta(max_length=32)]
    total: U64
    """Robots in the team (query again with ``offset`` for the rest)."""


PeerKindName = Literal["heartbeat", "request", "release", "leave", "state", "grant",
                       "adopted", "revoke"]  # fmt: skip
#: Robots in one STATE report, at most (under MAX_CONTROL_FRAME_BYTES with long names).
MAX_CELL_HOLDERS, MAX_CELL_WAITING = 64, 128


class PeerFrame(_Msg, tag="peer"):
    """Cell leader -> cell leader of its channel (role ``leader``): a
    :class:`~coorp.control.PeerMessage`. ``hears``: the sender heard the receiver
    lately (a link that carries one way only is down on both ends)."""

    kind: PeerKindName
    src: Name
    dst: Name
    robot: Annotated[str, Meta(max_length=64, pattern=r"^[A-Za-z0-9_.:-]*\Z")] = ""
    grant_id: U64 = 0
    remaining_ns: U64 = 0
    holders: Annotated[list[tuple[Name, U64]], Meta(max_length=MAX_CELL_HOLDERS)] = []
    waiting: Annotated[list[Name], Meta(max_length=MAX_CELL_WAITING)] = []
    hears: bool = True


class Refused(_Msg, tag="refused"):
    """Server -> client before closing: why (unknown robot, wrong role)."""

    reason: Reason


class BulkOpen(_Msg, tag="bopen"):
    """Sender -> receiver: message ``msg_id`` of ``stream``; raw bytes follow the accept."""

    stream: Name
    session: U64
    msg_id: U64
    total_bytes: U64
    sent_ns: U64


class BulkData(_Msg, tag="bdata"):
    """Sender -> receiver: exactly ``nbytes`` raw payload bytes at ``offset`` follow."""

    msg_id: U64
    offset: U64
    nbytes: Annotated[int, Meta(ge=1, le=MAX_SEGMENT_BYTES)]


class BulkAccept(_Msg, tag="baccept"):
    """Receiver -> sender: send bytes from ``offset`` on (it already has the rest)."""

    msg_id: U64
    offset: U64


class BulkDone(_Msg, tag="bdone"):
    """Receiver -> sender: the whole message arrived and was delivered (once)."""

    msg_id: U64


class BulkReject(_Msg, tag="breject"):
    msg_id: U64
    reason: Reason


class LsOpen(_Msg, tag="lsopen"):
    """LS sender -> receiver (role ``ls``): open a session for ``channel``; ``sent_ns``
    is the sender's clock now (the receiver learns the clock offset from it)."""

    channel: Name
    sent_ns: U64


class LsAccept(_Msg, tag="lsaccept"):
    """Receiver -> LS sender: datagrams of this channel must carry ``session``."""

    session: U64


class LsKeepAlive(_Msg, tag="lsalive"):
    """LS sender -> receiver, every keep-alive period: its clock now (the receiver
    re-measures the clock offset), and how many datagrams it handed to the kernel in
    this session (``sent``), the last of them numbered ``last_seq``."""

    sent_ns: U64
    sent: U64
    last_seq: U64


class LsStatus(_Msg, tag="lsstatus"):
    """Receiver -> LS sender, the answer to every keep-alive. ``alive`` false: the
    session is gone here (replaced, evicted): open a new one now. Otherwise the
    session's counts: datagrams accepted, lost (the sender's ``sent`` up to
    ``last_seq`` minus those accepted), accepted out of order (``reordered``: not
    replays), and rejected as replays (a sequence number seen before)."""

    session: U64
    alive: bool
    received: U64
    lost: U64
    reordered: U64
    replayed: U64


Message = (
    Hello
    | Join
    | Welcome
    | Request
    | Release
    | Granted
    | Revoked
    | Queued
    | Ping
    | Pong
    | StatsQuery
    | StatsReply
    | AgentReport
    | TeamQuery
    | TeamReply
    | Refused
    | BulkOpen
    | BulkData
    | BulkAccept
    | BulkDone
    | BulkReject
    | LsOpen
    | LsAccept
    | LsKeepAlive
    | LsStatus
    | PeerFrame
)


class LsHeader(Struct, array_like=True, frozen=True):
    """Header of one latency-sensitive datagram."""

    v: int
    robot: Name
    """The sender."""
    dest: Name
    """The receiving robot (the MAC is made with the key of this pair)."""
    channel: Name
    session: U64
    """Handed out by the receiver for this (sender, channel); see LsOpen."""
    seq: U64
    sent_ns: U64
    deadline_ns: U64
    payload_bytes: Annotated[int, Meta(ge=0, le=MAX_LS_PAYLOAD_BYTES)]


# The same header with names checked for length only: the receiver's fast path.
# Names are accepted from it only when they equal names already validated (its own
# robot, a session it opened); anything else is decoded again with LsHeader.
_LooseName = Annotated[str, Meta(min_length=1, max_length=64)]


class _LsHeaderLoose(Struct, array_like=True, frozen=True):
    v: int
    robot: _LooseName
    dest: _LooseName
    channel: _LooseName
    session: U64
    seq: U64
    sent_ns: U64
    deadline_ns: U64
    payload_bytes: Annotated[int, Meta(ge=0, le=MAX_LS_PAYLOAD_BYTES)]


#: Everything msgspec may raise on hostile input (invalid UTF-8 surfaces as a
#: UnicodeDecodeError, not a DecodeError): found by the fuzz tests.
_DECODE_ERRORS = (msgspec.MsgspecError, ValueError)

_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_message_decoder = msgspec.msgpack.Decoder(Message)
_header_decoder = msgspec.msgpack.Decoder(LsHeader)
_loose_header_decoder = msgspec.msgpack.Decoder(_LsHeaderLoose)


def encode_message(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode_message(body: bytes | bytearray | memoryview) -> Message:
    try:
        return _message_decoder.decode(body)
    except _DECODE_ERRORS as exc:
        raise MalformedFrameError(f"bad message body: {exc}") from None


def parse_frame_length(prefix: bytes | bytearray | memoryview, max_bytes: int) -> int:
    """The body length announced by a 4-byte frame prefix, checked against the limit."""
    if len(prefix) != LENGTH_PREFIX.size:
        raise MalformedFrameError(f"frame prefix is {len(prefix)} bytes, expected 4")
    (n,) = LENGTH_PREFIX.unpack(prefix)
    if n > max_bytes:
        raise FrameTooLargeError(f"frame of {n} bytes exceeds the limit of {max_bytes}")
    if n == 0:
        raise MalformedFrameError("empty frame")
    return int(n)


def encode_envelope(counter: int, body: bytes, mac: bytes) -> bytes:
    """A whole frame: length prefix + envelope."""
    data = _encoder.encode(Envelope(WIRE_VERSION, counter, body, mac))
    return LENGTH_PREFIX.pack(len(data)) + data


def decode_envelope(frame: bytes | bytearray | memoryview) -> Envelope:
    """Parse a frame body (without its length prefix) into an :class:`Envelope`."""
    try:
        env = _envelope_decoder.decode(frame)
    except _DECODE_ERRORS as exc:
        # Say "version" when the only thing wrong may be a newer peer.
        raise MalformedFrameError(f"bad envelope: {exc}") from None
    if env.v != WIRE_VERSION:
        raise UnsupportedVersionError(f"wire version {env.v}, this build speaks {WIRE_VERSION}")
    return env


def pack_datagram(header: LsHeader, payload: bytes | bytearray | memoryview) -> bytearray:
    """Datagram bytes *without* the MAC (the caller appends it over exactly these)."""
    h = _encoder.encode(header)
    out = bytearray(_DGRAM_PREFIX.pack(len(h)))
    out += h
    out += payload
    return out


_LS_TAIL = struct.Struct(">BQBQBQBI")
"""The header's last four fields, each as a fixed-width msgpack integer (uint64 x3,
uint32): any msgpack decoder reads them like the shortest encoding."""


def ls_header_prefix(robot: str, dest: str, channel: str, session: int) -> bytes:
    """The constant start of every datagram of one LS session: the u16 header length
    and the header's first five fields. :func:`ls_datagram_head` completes it; the
    result decodes exactly like :func:`pack_datagram`'s."""
    first = _encoder.encode((WIRE_VERSION, robot, dest, channel, session))
    # A msgpack fixarray of 5 becomes one of 9 (0x90 | n); the other four follow.
    header_len = len(first) + _LS_TAIL.size
    return _DGRAM_PREFIX.pack(header_len) + bytes((0x99,)) + first[1:]


def ls_datagram_head(prefix: bytes, seq: int, sent_ns: int, deadline_ns: int, nbytes: int) -> bytes:
    """Prefix + the per-message fields: everything of a datagram before its payload."""
    return prefix + _LS_TAIL.pack(0xCF, seq, 0xCF, sent_ns, 0xCF, deadline_ns, 0xCE, nbytes)


#: A canonical datagram's prefix is this much shorter than 2 + its header length.
_TAIL_OFFSET: Final = _LS_TAIL.size - _DGRAM_PREFIX.size
_U64_MAX: Final = 2**63 - 1


def canonical_fields(data: bytes) -> tuple[bytes, int, int, int, int] | None:
    """``(prefix, seq, sent_ns, deadline_ns, payload_start)`` of a datagram laid out
    exactly as :func:`ls_datagram_head` makes it, with sizes that add up and values
    within the header's bounds; None for any other datagram (parse that one with
    :func:`split_datagram`). Nothing is verified: the caller accepts the fields only
    if ``prefix`` is one of its open sessions' and the MAC verifies, so the names
    need no parsing at all (the receiver's fast path)."""
    n = len(data)
    if n > MAX_DATAGRAM_BYTES or n < _DGRAM_PREFIX.size + _LS_TAIL.size + MAC_BYTES:
        return None
    start = ((data[0] << 8) | data[1]) - _TAIL_OFFSET
    if start < 3 or start + _LS_TAIL.size + MAC_BYTES > n:
        return None
    m1, seq, m2, sent_ns, m3, deadline_ns, m4, nbytes = _LS_TAIL.unpack_from(data, start)
    body = start + _LS_TAIL.size
    if (
        m1 != 0xCF
        or m2 != 0xCF
        or m3 != 0xCF
        or m4 != 0xCE
        or body + nbytes + MAC_BYTES != n
        or nbytes > MAX_LS_PAYLOAD_BYTES
        or seq > _U64_MAX
        or sent_ns > _U64_MAX
        or deadline_ns > _U64_MAX
    ):
        return None
    return data[:start], seq, sent_ns, deadline_ns, body


def split_datagram(
    data: bytes | bytearray | memoryview, *, check_names: bool = True
) -> tuple[LsHeader | _LsHeaderLoose, memoryview, memoryview, memoryview]:
    """Parse a datagram: ``(header, payload, signed_part, mac)``; nothing is verified yet
    except structure and sizes (the caller checks the MAC over ``signed_part``).

    ``check_names=False`` skips the names' character check (three regular-expression
    matches, most of the parsing time): only for a caller that then accepts the names
    only if they equal names it validated before."""
    view = memoryview(data)
    n = len(view)
    if n > MAX_DATAGRAM_BYTES:
        raise FrameTooLargeError(f"datagram of {n} bytes exceeds {MAX_DATAGRAM_BYTES}")
    if n < _DGRAM_PREFIX.size + MAC_BYTES + 1:
        raise MalformedFrameError(f"datagram of {n} bytes is too short")
    (hlen,) = _DGRAM_PREFIX.unpack_from(view)
    start = _DGRAM_PREFIX.size
    if hlen == 0 or hlen > _MAX_LS_HEADER_BYTES or start + hlen + MAC_BYTES > n:
        raise MalformedFrameError(f"datagram header length {hlen} does not fit in {n} bytes")
    try:
        raw = view[start : start + hlen]
        header = _header_decoder.decode(raw) if check_names else _loose_header_decoder.decode(raw)
    except _DECODE_ERRORS as exc:
        raise MalformedFrameError(f"bad datagram header: {exc}") from None
    if header.v != WIRE_VERSION:
        raise UnsupportedVersionError(f"wire version {header.v}, this build speaks {WIRE_VERSION}")
    body_start = start + hlen
    if body_start + header.payload_bytes + MAC_BYTES != n:
        raise MalformedFrameError(
            f"datagram declares {header.payload_bytes} payload bytes but carries "
            f"{n - body_start - MAC_BYTES}"
        )
    end = n - MAC_BYTES
    return header, view[body_start:end], view[:end], view[end:]
