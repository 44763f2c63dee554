"""How a relayed connection ends — and what a program sees when it cannot start.

**Never a clean end for an unfinished transfer.** Each side of a relayed connection
closes with a reset (``SO_LINGER`` on, timeout 0) from the moment the relay has it
until that direction is complete: :func:`hold_reset` when the socket is created or
accepted, :func:`release_clean` only when every byte of the direction it sends has been
handed to the kernel and the end of the stream follows them. Whatever ends the agent —
an exception, SIGTERM, the OOM killer, ``kill -9`` (the kernel then closes the dead
process's descriptors as ``close()`` would) — a socket still held sends a RST, so the
receiver sees a connection reset, never a clean end-of-stream after part of the data.
The destination's side is released when the program's end-of-stream has been passed on,
the program's side when the destination's has.

**Refusals as the kernel says them.** The relay connects to the destination *before*
the program's handshake completes (the program's SYN is held in the kernel meanwhile,
:mod:`._nfqueue`), so a destination that refuses, or cannot be reached, refuses the
program's own ``connect()``: the relay re-injects the held SYN with a mark, and a rule
of the gate chain answers it with the kernel's own reject — a TCP reset
(``ECONNREFUSED``) or an ICMP unreachable (``EHOSTUNREACH``, ``ENETUNREACH``).
:data:`REFUSALS` maps what the relay's connect got to what the program gets; where
they differ (a policy drop, whose ``EPERM`` a proxy cannot hand back) it says so.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
from dataclasses import dataclass

__all__ = [
    "REFUSALS",
    "REJECTS",
    "Refusal",
    "hold_reset",
    "refusal_for",
    "release_clean",
    "reset",
]

_LINGER_RESET = struct.pack("ii", 1, 0)
_LINGER_OFF = struct.pack("ii", 0, 0)


def hold_reset(sock: socket.socket) -> None:
    """Until :func:`release_clean`, any close of ``sock`` — ours or the kernel's at our
    exit — sends a RST."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


def release_clean(sock: socket.socket) -> None:
    """This side's direction is complete: a close ends it with a FIN after the bytes
    already queued (the kernel delivers them even if the agent dies now)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)


def reset(sock: socket.socket | None) -> None:
    """Close ``sock`` with a RST: its peer sees the connection reset."""
    if sock is None:
        return
    hold_reset(sock)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass(frozen=True, slots=True)
class Refusal:
    """How the program's held SYN is answered."""

    reject: str | None
    """Key of :data:`REJECTS` (None: the SYN is dropped, the program's TCP retries)."""
    program_sees: int
    """The ``connect()`` error of the program."""
    note: str = ""
    """Where this differs from what the kernel would have said without the relay."""


#: The kernel rejects the gate chain knows: name -> (mark offset from relay_mark, nft
#: reject type, ICMP code, the rule's text). Type 1 is a TCP reset, type 0 an ICMP
#: destination unreachable with the code.
REJECTS: dict[str, tuple[int, int, int, str]] = {
    "reset": (1, 1, 0, "reject with tcp reset"),
    "host-unreachable": (2, 0, 1, "reject with icmp type host-unreachable"),
    "net-unreachable": (3, 0, 0, "reject with icmp type net-unreachable"),
    "admin-prohibited": (4, 0, 13, "reject with icmp type admin-prohibited"),
}

#: What the relay's own connect got -> how the program's SYN is answered.
REFUSALS: dict[int, Refusal] = {
    errno.ECONNREFUSED: Refusal("reset", errno.ECONNREFUSED),
    errno.ECONNRESET: Refusal("reset", errno.ECONNREFUSED),
    errno.EHOSTUNREACH: Refusal("host-unreachable", errno.EHOSTUNREACH),
    errno.ENETUNREACH: Refusal("net-unreachable", errno.ENETUNREACH),
    errno.ETIMEDOUT: Refusal(None, errno.ETIMEDOUT),
    errno.EPERM: Refusal(
        "admin-prohibited",
        errno.EHOSTUNREACH,
        "a local policy drop: the program would get EPERM; a held SYN can only be "
        "answered by a packet, and ICMP admin-prohibited reads as EHOSTUNREACH",
    ),
    errno.EACCES: Refusal("admin-prohibited", errno.EHOSTUNREACH, "the program would get EACCES"),
}
#: Everything else the relay's connect may meet (and an identity it cannot take).
DEFAULT_REFUSAL = Refusal(
    "admin-prohibited", errno.EHOSTUNREACH, "the relay could not make the connection"
)
#: No room (the flow cap): refused at once, as a full listen queue never is.
OVER_LIMIT = Refusal("reset", errno.ECONNREFUSED, "the relay's flow cap (fd limit)")


def refusal_for(code: int | None) -> Refusal:
    return REFUSALS.get(code or 0, DEFAULT_REFUSAL)
