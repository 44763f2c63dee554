"""Socket marking: which WiFi access category LS and BH packets use.

On Linux, cfg80211 picks the 802.11 user priority (UP) of a frame from
``skb->priority`` when it is in ``256..263`` (UP = priority − 256), else from the DSCP
bits of the IP header. So for LS we set ``IP_TOS``/``IPV6_TCLASS`` to DSCP CS6 *first*
(on some kernels setting the TOS rewrites the socket priority) and *then*
``SO_PRIORITY`` = 256 + 6 (UP 6 -> AC_VO). Priorities above 6 need CAP_NET_ADMIN;
without it DSCP CS6 alone still selects UP 6 through cfg80211's DSCP mapping. BH gets
DSCP CS0 and UP 0 (AC_BE). ``ack`` is a bulk receiver's socket, whose packets are its TCP
acks of the team's bulk data (and a few bytes of replies): DSCP CS4 and UP 4 (AC_VI), as
the simulator's ``coorp`` sends them (``CoorpPolicy.ack_ac``; RFC 8325 maps CS4 to UP 4).
LS may be put in AC_VI instead (``ls_category="AC_VI"``: DSCP CS5 and UP 5), which
drivers aggregate where they commonly do not aggregate AC_VO.
:class:`Marking` records what is actually in effect, read back from the socket, so
start-up logs tell the truth.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Literal

from .._errors import MarkingError

__all__ = [
    "DSCP_CS0",
    "DSCP_CS4",
    "DSCP_CS5",
    "DSCP_CS6",
    "LS_MARKS",
    "UP_AC_BE",
    "UP_AC_VI",
    "UP_AC_VO",
    "UP_LS_VI",
    "LsCategory",
    "Marking",
    "mark_socket",
    "probe_marking",
]

UP_AC_VO = 6
UP_AC_VI = 4
#: LS in AC_VI: UP 5 and CS5, apart from the acks' UP 4 and CS4.
UP_LS_VI = 5
UP_AC_BE = 0
DSCP_CS6 = 48
DSCP_CS4 = 32
DSCP_CS5 = 40
DSCP_CS0 = 0
Traffic = Literal["ls", "bh", "ack"]
LsCategory = Literal["AC_VO", "AC_VI"]
#: LS's (user priority, DSCP) for each ``ls_category``: the one place both the API's
#: sockets and transparent mode's kernel rules take them from.
LS_MARKS: dict[str, tuple[int, int]] = {
    "AC_VO": (UP_AC_VO, DSCP_CS6),
    "AC_VI": (UP_LS_VI, DSCP_CS5),
}
_UP = {"ls": UP_AC_VO, "bh": UP_AC_BE, "ack": UP_AC_VI}
_DSCP = {"ls": DSCP_CS6, "bh": DSCP_CS0, "ack": DSCP_CS4}
#: cfg80211_classify8021d: priorities 256..263 carry the 802.1d user priority directly.
_CFG80211_PRIORITY_BASE = 256
_AC_NAME = {
    0: "AC_BE",
    1: "AC_BK",
    2: "AC_BK",
    3: "AC_BE",
    4: "AC_VI",
    5: "AC_VI",
    6: "AC_VO",
    7: "AC_VO",
}


@dataclass(frozen=True, slots=True)
class Marking:
    """The marking in effect on one socket."""

    traffic: Traffic
    dscp: int
    """DSCP read back from the socket."""
    priority: int | None
    """``SO_PRIORITY`` read back, or None when setting it was not permitted."""
    user_priority: int
    """The 802.1d UP the NIC will use (from ``priority`` if set, else from the DSCP)."""
    note: str = ""
    """Why the preferred marking is not in effect, if it is not."""

    @property
    def access_category(self) -> str:
        return _AC_NAME[self.user_priority]

    @property
    def uses_priority(self) -> bool:
        return self.priority is not None

    def describe(self) -> str:
        dscp = f"DSCP CS{self.dscp // 8}" if self.dscp % 8 == 0 else f"DSCP {self.dscp}"
        if self.priority is not None:
            how = f"SO_PRIORITY {self.priority} (802.1d UP {self.user_priority}) + {dscp}"
        else:
            how = f"{dscp} only"
        text = f"{self.traffic.upper()} marking: {how} -> {self.access_category}"
        return f"{text} ({self.note})" if self.note else text


def mark_socket(
    sock: socket.socket, traffic: Traffic, *, ls_category: LsCategory = "AC_VO"
) -> Marking:
    """Mark ``sock`` for LS (AC_VO, or AC_VI with ``ls_category``), BH (AC_BE) or a bulk
    receiver's acks (AC_VI) and report what is in effect."""
    if ls_category not in LS_MARKS:
        raise MarkingError(f"ls_category {ls_category!r}: one of {', '.join(LS_MARKS)}")
    up, dscp = LS_MARKS[ls_category] if traffic == "ls" else (_UP[traffic], _DSCP[traffic])
    tos = dscp << 2
    level, opt = _tos_option(sock)
    # TOS first: on some kernels IP_TOS also rewrites sk_priority, which would undo
    # an SO_PRIORITY set before it.
    try:
        sock.setsockopt(level, opt, tos)
    except OSError as exc:
        raise MarkingError(f"cannot set DSCP on a {traffic.upper()} socket: {exc}") from exc
    note = ""
    wanted = _CFG80211_PRIORITY_BASE + up
    priority: int | None = wanted
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, wanted)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise MarkingError(f"cannot set SO_PRIORITY: {exc}") from exc
        note = f"SO_PRIORITY {wanted} not permitted without CAP_NET_ADMIN"
        priority = None
    got_dscp = sock.getsockopt(level, opt) >> 2
    if priority is not None:
        priority = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY)
        if not _CFG80211_PRIORITY_BASE <= priority <= _CFG80211_PRIORITY_BASE + 7:
            note = f"SO_PRIORITY read back as {priority}"
            priority = None
    effective = priority - _CFG80211_PRIORITY_BASE if priority is not None else got_dscp >> 3
    return Marking(traffic, got_dscp, priority, effective, note)


def probe_marking(
    traffic: Traffic, family: int = socket.AF_INET, *, ls_category: LsCategory = "AC_VO"
) -> Marking:
    """The marking a new socket of this kind would get (for start-up reports)."""
    kind = socket.SOCK_DGRAM if traffic == "ls" else socket.SOCK_STREAM
    with socket.socket(family, kind) as s:
        return mark_socket(s, traffic, ls_category=ls_category)


def _tos_option(sock: socket.socket) -> tuple[int, int]:
    if sock.family == socket.AF_INET6:
        return socket.IPPROTO_IPV6, socket.IPV6_TCLASS
    return socket.IPPROTO_IP, socket.IP_TOS
