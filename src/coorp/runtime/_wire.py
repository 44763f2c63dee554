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

from ._errors import FrameTooLargeError, MalformedFrameError, UnsupportedVersionError

__all__ = [
    "LENGTH_PREFIX",
    "MAC_BYTES",
    "MAX_CONTROL_FRAME_BYTES",
    "MAX_DATAGRAM_BYTES",
    "MAX_LS_PAYLOAD_BYTES",
    "MAX_SEGMENT_BYTES",
    "NONCE_BYTES",
    "WIRE_VERSION",
    "BulkAccept",
    "BulkData",
    "BulkDone",
    "BulkOpen",
    "BulkReject",
    "Envelope",
    "Granted",
    "Hello",
    "Join",
    "LsAccept",
    "LsHeader",
    "LsOpen",
    "Message",
    "Ping",
    "Pong",
    "Refused",
    "Release",
    "Request",
    "Revoked",
    "StatsQuery",
    "StatsReply",
    "Welcome",
    "decode_envelope",
    "decode_message",
    "encode_envelope",
    "encode_message",
    "pack_datagram",
    "parse_frame_length",
    "split_datagram",
]

WIRE_VERSION: Final = 2
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
Name = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
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
    robot: Annotated[str, Meta(max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$")] = ""
    """The server's robot (an inbox's owner): whose pair key the client must use.
    Empty for the permit service."""


class Join(_Msg, tag="join"):
    """Client -> server, first authenticated frame: who I am and my own nonce."""

    robot: Name
    nonce: Nonce
    role: Literal["agent", "observer", "sender", "ls"]


class Welcome(_Msg, tag="welcome"):
    """Leader -> agent: the team's permit parameters and the heartbeat to keep."""

    epoch: U64
    limit: Annotated[int, Meta(ge=1, le=1024)]
    timeslice_ns: U64
    heartbeat_ns: U64


class Request(_Msg, tag="request"):
    """Agent -> leader: this robot has BH data (Algorithm 1 request)."""


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


Message = (
    Hello
    | Join
    | Welcome
    | Request
    | Release
    | Granted
    | Revoked
    | Ping
    | Pong
    | StatsQuery
    | StatsReply
    | Refused
    | BulkOpen
    | BulkData
    | BulkAccept
    | BulkDone
    | BulkReject
    | LsOpen
    | LsAccept
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


#: Everything msgspec may raise on hostile input (invalid UTF-8 surfaces as a
#: UnicodeDecodeError, not a DecodeError): found by the fuzz tests.
_DECODE_ERRORS = (msgspec.MsgspecError, ValueError)

_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_message_decoder = msgspec.msgpack.Decoder(Message)
_header_decoder = msgspec.msgpack.Decoder(LsHeader)


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


def split_datagram(
    data: bytes | bytearray | memoryview,
) -> tuple[LsHeader, memoryview, memoryview, memoryview]:
    """Parse a datagram: ``(header, payload, signed_part, mac)``; nothing is verified yet
    except structure and sizes (the caller checks the MAC over ``signed_part``)."""
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
        header = _header_decoder.decode(view[start : start + hlen])
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
