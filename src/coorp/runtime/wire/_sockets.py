"""Linux socket helpers: addresses, bytes outstanding, unsent-bytes bound, TCP options.

The local preemption layer needs to know how much BH data the kernel still holds for
a socket (``SIOCOUTQ``: bytes written but not yet acknowledged, i.e. queued in the
kernel, the qdisc, the NIC or in flight) and to keep the *unsent* part small
(``TCP_NOTSENT_LOWAT``), so that pausing writes actually pauses the wire soon.
"""

from __future__ import annotations

import fcntl
import socket
import struct

from coorp._errors import ConfigurationError

from .._errors import RuntimeUsageError

__all__ = [
    "Address",
    "bytes_outstanding",
    "format_address",
    "open_tcp_listener",
    "parse_address",
    "set_notsent_lowat",
    "tune_tcp",
]

#: ioctl(SIOCOUTQ) == TIOCOUTQ on Linux: bytes in the send queue (unacked + unsent).
SIOCOUTQ = 0x5411
_INT = struct.Struct("i")
_ZERO = bytes(_INT.size)

Address = tuple[str, int]


def parse_address(text: str, *, what: str = "address", default_host: str | None = None) -> Address:
    """``"host:port"`` or ``"[v6]:port"`` (or ``":port"`` with ``default_host``)."""
    if not isinstance(text, str):
        raise RuntimeUsageError(f"{what}={text!r}: expected 'host:port'")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise RuntimeUsageError(f"{what}={text!r}: expected 'host:port'")
    host = host.strip("[]")
    if not host:
        if default_host is None:
            raise RuntimeUsageError(f"{what}={text!r}: missing host (expected 'host:port')")
        host = default_host
    try:
        port = int(port_text)
    except ValueError:
        raise RuntimeUsageError(f"{what}={text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise RuntimeUsageError(f"{what}={text!r}: port must be in 0..65535")
    return host, port


def format_address(addr: tuple[object, ...]) -> str:
    host, port = str(addr[0]), addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(addr: Address, kind: int) -> tuple[int, tuple[object, ...]]:
    """(family, sockaddr) for ``addr``; numeric addresses do not touch DNS."""
    try:
        infos = socket.getaddrinfo(addr[0], addr[1], type=kind)
    except socket.gaierror as exc:
        raise RuntimeUsageError(f"cannot resolve {format_address(addr)}: {exc}") from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def bytes_outstanding(sock: socket.socket) -> int:
    """Bytes written to a TCP socket and not yet acknowledged by the peer."""
    return int(_INT.unpack(fcntl.ioctl(sock.fileno(), SIOCOUTQ, _ZERO))[0])


def set_notsent_lowat(sock: socket.socket, nbytes: int) -> None:
    """Writable only while fewer than ``nbytes`` written bytes are still unsent."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, nbytes)


def tune_tcp(sock: socket.socket) -> None:
    """Small frames must not wait for Nagle; dead peers must be noticed."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def open_tcp_listener(addr: Address, *, backlog: int = 64) -> socket.socket:
    family, sockaddr = resolve(addr, socket.SOCK_STREAM)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot listen on {format_address(addr)}: {exc.strerror}"
        ) from None
    return sock
