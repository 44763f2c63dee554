"""Transparent mode's LS observation: every LS send, seen with a kernel timestamp.

The kernel rules (:mod:`._nft`) mark every LS packet with one DSCP (CS6 for AC_VO, CS5
for AC_VI: ``[transparent] ls_category``). A packet socket on this
host's egress (``AF_PACKET``, ``SOCK_DGRAM``, every protocol) with a classic BPF filter
receives a copy of each *outgoing* IPv4 packet with that DSCP, at most
:data:`SNAPLEN` bytes of it, with the time the kernel handed it to the device
(``SO_TIMESTAMPNS``). That is the send the robot's
:class:`~coorp.control.ProtectionPlanner` learns from, as the API path's
``ls.send`` is.

What is one send (:class:`SendGrouper`):

* an IP datagram split into fragments is one packet with its UDP length (fragments
  after the first are skipped);
* packets of one flow closer than ``burst_gap_ns`` to the previous one are the same
  send (a message written as several TCP segments, a sample in several RTPS
  datagrams); the send's time is its first packet's;
* a send is reported once it carries ``min_bytes`` of payload: acknowledgements,
  RTPS heartbeats and keep-alives are marked like the rest but do not teach the time
  model a period they do not have.

A flow is (protocol, destination, destination port, source port); for RTPS (DDS)
datagrams the writer's GUID prefix and entity id are used instead, so two topics of one
participant sent to one reader port are two flows.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..wire import DSCP_CS6
from ._nft import TransparentUnavailableError

__all__ = [
    "SNAPLEN",
    "LsPacket",
    "PacketObserver",
    "SendGrouper",
    "ls_filter",
    "parse_ls_packet",
]

log = logging.getLogger("coorp.runtime.transparent")

#: Bytes of each packet copied to user space: IPv4 and TCP headers with options, the
#: RTPS header and its first submessages.
SNAPLEN = 192
_ETH_P_ALL = 0x0003
_ETH_P_IP = 0x0800
_PACKET_OUTGOING = 4
_SO_TIMESTAMPNS = 35
_SO_ATTACH_FILTER = 26
_SKF_AD_OFF = -0x1000
_SKF_AD_PROTOCOL = 0
_SKF_AD_PKTTYPE = 4
_SKF_AD_IFINDEX = 8
_RTPS_DATA = 0x15
_RTPS_DATA_FRAG = 0x16


@dataclass(frozen=True, slots=True)
class LsPacket:
    """What one outgoing LS packet says about its send."""

    flow: str
    payload_bytes: int
    """UDP: the datagram's payload (all fragments); TCP: this segment's payload."""


def _u16(b: bytes, off: int) -> int:
    return (b[off] << 8) | b[off + 1]


def parse_ls_packet(data: bytes) -> LsPacket | None:
    """The flow and size of an IPv4 packet (from its network header on), or None for
    a packet that is no new send: a fragment after the first, a TCP segment without
    payload, something not UDP or TCP, or a truncated header."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    ihl = (data[0] & 0x0F) * 4
    total = _u16(data, 2)
    frag = _u16(data, 6)
    if frag & 0x1FFF:
        return None  # a later fragment of a datagram already counted
    proto = data[9]
    dst = socket.inet_ntoa(data[16:20])
    l4 = data[ihl:]
    if proto == socket.IPPROTO_UDP:
        if len(l4) < 8:
            return None
        sport, dport, ulen = _u16(l4, 0), _u16(l4, 2), _u16(l4, 4)
        body = l4[8:]
        writer = _rtps_writer(body)
        flow = f"rtps {writer}" if writer else f"udp {dst}:{dport}<{sport}"
        return LsPacket(flow, max(ulen - 8, 0))
    if proto == socket.IPPROTO_TCP:
        if len(l4) < 20:
            return None
        sport, dport = _u16(l4, 0), _u16(l4, 2)
        doff = (l4[12] >> 4) * 4
        payload = total - ihl - doff
        if payload <= 0:
            return None  # a bare acknowledgement
        return LsPacket(f"tcp {dst}:{dport}<{sport}", payload)
    return None


def _rtps_writer(body: bytes) -> str | None:
    """``guidprefix/writerid`` of the first DATA or DATA_FRAG submessage of an RTPS
    message, or None (not RTPS, no data submessage in the copied bytes)."""
    if len(body) < 20 or body[:4] != b"RTPS":
        return None
    prefix = body[8:20].hex()
    off = 20
    while off + 4 <= len(body):
        sub_id, flags = body[off], body[off + 1]
        length = int.from_bytes(body[off + 2 : off + 4], "little" if flags & 1 else "big")
        if sub_id in (_RTPS_DATA, _RTPS_DATA_FRAG):
            # extraFlags(2) octetsToInlineQos(2) readerId(4) writerId(4)
            w = off + 4 + 8
            if w + 4 > len(body):
                return None
            return f"{prefix}/{body[w : w + 4].hex()}"
        if length == 0:
            return None  # "extends to the end of the message": nothing after it
        off += 4 + length
    return None


class SendGrouper:
    """Turns LS packets into sends (see the module docstring). Pure: times come in."""

    def __init__(self, *, burst_gap_ns: int, min_bytes: int, max_flows: int = 4096) -> None:
        self.burst_gap_ns = burst_gap_ns
        self.min_bytes = min_bytes
        self.max_flows = max_flows
        # flow -> [first packet's time, last packet's time, bytes so far, reported]
        self._bursts: dict[str, list[int]] = {}
        self.packets = 0
        self.sends = 0
        self.small = 0
        """Bursts that ended below ``min_bytes`` (never reported)."""

    def packet(self, now_ns: int, pkt: LsPacket) -> int | None:
        """Account one packet at ``now_ns``; returns the send's time when this packet
        makes its burst a reportable send (once per burst), else None."""
        self.packets += 1
        b = self._bursts.get(pkt.flow)
        if b is None or now_ns - b[1] > self.burst_gap_ns:
            if b is not None and not b[3]:
                self.small += 1
            if b is None and len(self._bursts) >= self.max_flows:
                self._evict(now_ns)
            b = self._bursts[pkt.flow] = [now_ns, now_ns, 0, 0]
        b[1] = now_ns
        b[2] += pkt.payload_bytes
        if not b[3] and b[2] >= self.min_bytes:
            b[3] = 1
            self.sends += 1
            return b[0]
        return None

    def _evict(self, now_ns: int) -> None:
        oldest = min(self._bursts, key=lambda f: self._bursts[f][1])
        del self._bursts[oldest]

    @property
    def flows(self) -> int:
        return len(self._bursts)


_DROP = -1  # placeholder: jump to the final "return 0"
_LD_W_ABS, _LD_H_ABS, _LD_B_ABS, _JEQ_K, _AND_K, _RET_K = 0x20, 0x28, 0x30, 0x15, 0x54, 0x06


def ls_filter(skip_ifindex: int | None = None, *, dscp: int = DSCP_CS6) -> bytes:
    """Classic BPF for a ``SOCK_DGRAM`` packet socket (offsets from the network
    header): outgoing IPv4 with DSCP ``dscp`` (CS6 by default), not on
    ``skip_ifindex``, the first :data:`SNAPLEN` bytes; everything else is dropped."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"dscp {dscp}: a DSCP is 0..63")
    prog: list[tuple[int, int, int, int]] = [
        (_LD_H_ABS, 0, 0, _SKF_AD_OFF + _SKF_AD_PROTOCOL),
        (_JEQ_K, 0, _DROP, _ETH_P_IP),
        (_LD_W_ABS, 0, 0, _SKF_AD_OFF + _SKF_AD_PKTTYPE),
        (_JEQ_K, 0, _DROP, _PACKET_OUTGOING),
    ]
    if skip_ifindex is not None:
        prog += [
            (_LD_W_ABS, 0, 0, _SKF_AD_OFF + _SKF_AD_IFINDEX),
            (_JEQ_K, _DROP, 0, skip_ifindex),
        ]
    prog += [
        (_LD_B_ABS, 0, 0, 1),  # the TOS byte
        (_AND_K, 0, 0, 0xFC),
        (_JEQ_K, 0, _DROP, dscp << 2),  # the LS DSCP
        (_RET_K, 0, 0, SNAPLEN),
        (_RET_K, 0, 0, 0),
    ]
    last = len(prog) - 1
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        jt = last - i - 1 if jt == _DROP else jt
        jf = last - i - 1 if jf == _DROP else jf
        out.append(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class PacketObserver:
    """Reads LS packets off a packet socket on the running loop and reports sends.

    ``observe(flow, send_ns)`` receives each send with its time on the monotonic
    clock (the kernel's timestamp, converted).
    """

    def __init__(
        self,
        observe: Callable[[str, int], None],
        grouper: SendGrouper,
        *,
        monotonic: Callable[[], int] = time.monotonic_ns,
        realtime: Callable[[], int] = time.time_ns,
        dscp: int = DSCP_CS6,
    ) -> None:
        self._observe = observe
        self.dscp = dscp
        self.grouper = grouper
        self._mono = monotonic
        self._real = realtime
        self._sock: socket.socket | None = None
        self._filter_buf: ctypes.Array[ctypes.c_char] | None = None
        self.counters = {"packets": 0, "sends": 0, "ignored": 0, "read_errors": 0}

    def open(self) -> None:
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(_ETH_P_ALL))
        except PermissionError:
            raise TransparentUnavailableError(
                "cannot open a packet socket (permission denied): observing LS sends "
                "needs CAP_NET_RAW (run the agent as root or grant it the capability)"
            ) from None
        except OSError as exc:
            raise TransparentUnavailableError(
                f"cannot open a packet socket ({exc.strerror}): the kernel needs CONFIG_PACKET"
            ) from None
        try:
            prog = ls_filter(skip_ifindex=_ifindex("lo"), dscp=self.dscp)
            self._filter_buf = ctypes.create_string_buffer(prog)
            fprog = _SockFprog(len(prog) // 8, ctypes.addressof(self._filter_buf))
            sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, bytes(fprog))
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.setblocking(False)
            # Packets queued before the filter was attached passed no filter: drop them.
            with contextlib.suppress(BlockingIOError):
                for _ in range(10_000):
                    sock.recv(1)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sock is None:
            self.open()
        assert self._sock is not None
        loop.add_reader(self._sock.fileno(), self._drain)

    def stop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if self._sock is not None:
            if loop is not None:
                with contextlib.suppress(Exception):
                    loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def _drain(self) -> None:
        sock = self._sock
        if sock is None:
            return
        # One offset per batch: realtime stamps to the monotonic clock.
        offset = self._mono() - self._real()
        for _ in range(4096):
            try:
                data, anc, _flags, _addr = sock.recvmsg(SNAPLEN, 64)
            except BlockingIOError:
                return
            except OSError:
                self.counters["read_errors"] += 1
                return
            stamp = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack("qq", value[:16])
                    stamp = sec * 1_000_000_000 + nsec + offset
            self.feed(data, stamp if stamp is not None else self._mono())

    def feed(self, data: bytes, mono_ns: int) -> None:
        """One copied packet at ``mono_ns`` (also the seam for tests)."""
        self.counters["packets"] += 1
        pkt = parse_ls_packet(data)
        if pkt is None:
            self.counters["ignored"] += 1
            return
        send_ns = self.grouper.packet(mono_ns, pkt)
        if send_ns is not None:
            self.counters["sends"] += 1
            self._observe(pkt.flow, send_ns)


def _ifindex(name: str) -> int | None:
    try:
        return socket.if_nametoindex(name)
    except OSError:
        return None
