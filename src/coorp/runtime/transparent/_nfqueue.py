"""The first packet of every intercepted connection, held in the kernel until the relay
decides: a client of ``nfnetlink_queue`` for the SYNs of bulk connections.

The gate chain of :mod:`._nft` queues each new bulk connection's SYN to queue
``num``; the kernel tells us the packet's addresses and the uid and gid of the socket
that sent it (``NFQA_UID``/``NFQA_GID``: the owner of the socket's file, what ``meta
skgid`` matches), and holds the packet until :meth:`SynQueue.verdict` says

* ``ACCEPT`` — it goes on (to the redirect, then to the relay's listener);
* ``DROP`` — it is gone (the program's TCP retransmits it later, as after a loss);
* ``REPEAT`` with a mark — the hook runs again with the packet marked: the gate chain's
  first rules turn the mark into the kernel's own refusal (a TCP reset, an ICMP
  unreachable), so the program's ``connect()`` fails as it would have failed without
  the relay.

Why by hand: pyroute2 speaks nf_tables but not ``nfnetlink_queue``, and the
NetfilterQueue package wraps the C library ``libnetfilter_queue``, a system package a
robot may not have. The protocol is small (``include/uapi/linux/netfilter/
nfnetlink_queue.h``): a bind, a copy mode, the packets, the verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ACCEPT", "DROP", "REPEAT", "QueuedSyn", "SynQueue", "parse_syn"]

NETLINK_NETFILTER = 12
_SUBSYS_QUEUE = 3
_MSG_PACKET, _MSG_VERDICT, _MSG_CONFIG = 0, 1, 2
_NLM_F_REQUEST, _NLM_F_ACK = 1, 4
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
# nfqnl_attr_config / nfqnl_attr_type
_CFG_CMD, _CFG_PARAMS, _CFG_QUEUE_MAXLEN, _CFG_MASK, _CFG_FLAGS = 1, 2, 3, 4, 5
_CMD_BIND, _CMD_UNBIND = 1, 2
_COPY_PACKET = 2
_F_UID_GID = 1 << 3
_A_PACKET_HDR, _A_VERDICT_HDR, _A_MARK, _A_PAYLOAD, _A_UID, _A_GID = 1, 2, 3, 10, 16, 17
#: Verdicts (netfilter.h).
DROP, ACCEPT, REPEAT = 0, 1, 4
#: Bytes of each packet copied to us: an IPv4 header with options and the TCP ports.
_COPY_BYTES = 64
_RCVBUF = 4 << 20


@dataclass(frozen=True, slots=True)
class QueuedSyn:
    """A held SYN: which connection, and who opened it."""

    packet_id: int
    src: str
    sport: int
    dst: str
    dport: int
    uid: int | None
    """The sending socket's owner (None: the kernel did not say, e.g. no socket)."""
    gid: int | None
    mark: int

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.src, self.sport, self.dst, self.dport)


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    i = 0
    while i + 4 <= len(data):
        n, kind = struct.unpack_from("=HH", data, i)
        if n < 4:
            break
        out[kind & 0x7FFF] = data[i + 4 : i + n]
        i += (n + 3) & ~3
    return out


def parse_syn(packet_id: int, attrs: dict[int, bytes]) -> QueuedSyn | None:
    """The connection a queued packet opens (None: not IPv4 TCP, or cut short)."""
    pl = attrs.get(_A_PAYLOAD, b"")
    if len(pl) < 20 or pl[0] >> 4 != 4 or pl[9] != socket.IPPROTO_TCP:
        return None
    ihl = (pl[0] & 0x0F) * 4
    if len(pl) < ihl + 4:
        return None
    sport, dport = struct.unpack_from("!HH", pl, ihl)
    uid = struct.unpack("!I", attrs[_A_UID])[0] if _A_UID in attrs else None
    gid = struct.unpack("!I", attrs[_A_GID])[0] if _A_GID in attrs else None
    mark = struct.unpack("!I", attrs[_A_MARK])[0] if _A_MARK in attrs else 0
    return QueuedSyn(
        packet_id,
        socket.inet_ntoa(pl[12:16]),
        sport,
        socket.inet_ntoa(pl[16:20]),
        dport,
        uid,
        gid,
        mark,
    )


class SynQueue:
    """Bound to one queue number; ``on_syn`` is called (on the event loop) for each
    held SYN, and each must get exactly one :meth:`verdict`."""

    def __init__(self, num: int, on_syn: Callable[[QueuedSyn], None], *, maxlen: int) -> None:
        self.num = num
        self._on_syn = on_syn
        self.maxlen = maxlen
        self._sock: socket.socket | None = None
        self._seq = 0
        self.counters = {"syns": 0, "unparsed": 0, "overruns": 0, "verdict_errors": 0}

    def _msg(self, kind: int, flags: int, attrs: list[bytes]) -> bytes:
        self._seq += 1
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(self.num)) + b"".join(attrs)
        head = struct.pack(
            "=IHHII", 16 + len(body), (_SUBSYS_QUEUE << 8) | kind, flags, self._seq, 0
        )
        return head + body

    def _request(self, sock: socket.socket, attrs: list[bytes]) -> None:
        """One configuration message, acknowledged (raises OSError with its errno)."""
        sock.send(self._msg(_MSG_CONFIG, _NLM_F_REQUEST | _NLM_F_ACK, attrs))
        while True:
            reply = sock.recv(65536)
            _, kind, _, seq, _ = struct.unpack_from("=IHHII", reply)
            if kind == _NLMSG_ERROR and seq == self._seq:
                code = struct.unpack_from("=i", reply, 16)[0]
                if code:
                    raise OSError(-code, os.strerror(-code))
                return

    def open(self) -> None:
        """Bind the queue (OSError: EPERM without CAP_NET_ADMIN, EBUSY when another
        process holds this number)."""
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            force = getattr(socket, "SO_RCVBUFFORCE", 33)
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, _RCVBUF)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
            sock.bind((0, 0))
            sock.settimeout(5)
            self._request(sock, [_attr(_CFG_CMD, struct.pack("=BxH", _CMD_BIND, 0))])
            self._request(
                sock,
                [
                    _attr(_CFG_PARAMS, struct.pack("!IB", _COPY_BYTES, _COPY_PACKET)),
                    _attr(_CFG_QUEUE_MAXLEN, struct.pack("!I", self.maxlen)),
                    _attr(_CFG_MASK, struct.pack("!I", _F_UID_GID)),
                    _attr(_CFG_FLAGS, struct.pack("!I", _F_UID_GID)),
                ],
            )
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._sock is not None
        loop.add_reader(self._sock.fileno(), self._readable)

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Unbind (the kernel drops what is still held: the programs retransmit)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if loop is not None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(sock.fileno())
        sock.close()

    def verdict(self, packet_id: int, verdict: int, mark: int | None = None) -> None:
        sock = self._sock
        if sock is None:
            return  # unbound: the kernel already let go of the packet
        attrs = [_attr(_A_VERDICT_HDR, struct.pack("!II", verdict, packet_id))]
        if mark is not None:
            attrs.append(_attr(_A_MARK, struct.pack("!I", mark)))
        try:
            sock.send(self._msg(_MSG_VERDICT, _NLM_F_REQUEST, attrs))
        except OSError:
            # The packet stays held until the queue is unbound; counted, never fatal.
            self.counters["verdict_errors"] += 1

    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for _ in range(256):  # bounded per wake-up; the reader is called again
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    # The kernel could not hand us some packets: it dropped them (the
                    # programs retransmit their SYNs).
                    self.counters["overruns"] += 1
                    continue
                raise
            self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        i = 0
        while i + 16 <= len(data):
            n, kind, _, _, _ = struct.unpack_from("=IHHII", data, i)
            if n < 16:
                return
            if kind == (_SUBSYS_QUEUE << 8) | _MSG_PACKET:
                attrs = _attrs(data[i + 20 : i + n])
                hdr = attrs.get(_A_PACKET_HDR)
                if hdr is not None:
                    packet_id = struct.unpack_from("!I", hdr)[0]
                    syn = parse_syn(packet_id, attrs)
                    if syn is None:
                        self.counters["unparsed"] += 1
                        self.verdict(packet_id, ACCEPT)  # not ours to judge
                    else:
                        self.counters["syns"] += 1
                        self._on_syn(syn)
            i += (n + 3) & ~3
