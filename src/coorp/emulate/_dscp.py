"""Which access category an IP packet goes to: its DSCP, mapped as an AP does (RFC 8325).

RFC 8325 ("Mapping Diffserv to IEEE 802.11", section 4 and its Figure 1) maps each
Diffserv service class to an 802.11 user priority (UP); RFC 8622 adds Lower Effort
(LE, DSCP 1) to UP 1. IEEE 802.11-2016 Table 10-1 maps the UP to the access category:
UP 1, 2 -> AC_BK; 0, 3 -> AC_BE; 4, 5 -> AC_VI; 6, 7 -> AC_VO.

A station's own driver uses the socket priority (``skb->priority``) instead, which a
TUN device does not carry, so the emulator reads the DSCP for every station (Coorp's
transparent mode and its API mark both).
"""

from __future__ import annotations

from coorp.scenario import AccessCategory

__all__ = ["AC_OF_DSCP", "UP_OF_DSCP", "ac_of_up", "up_of_dscp"]

# RFC 8325 Figure 1 (service class: DSCPs -> UP) and RFC 8622 (LE).
_RFC8325: dict[int, int] = {
    48: 7, 56: 7,  # Network Control: CS6, CS7
    46: 6, 44: 6,  # Telephony: EF; VOICE-ADMIT: VA
    40: 5,  # Signaling: CS5
    34: 4, 36: 4, 38: 4,  # Multimedia Conferencing: AF41, AF42, AF43
    32: 4,  # Real-Time Interactive: CS4
    26: 4, 28: 4, 30: 4,  # Multimedia Streaming: AF31, AF32, AF33
    24: 4,  # Broadcast Video: CS3
    18: 3, 20: 3, 22: 3,  # Low-Latency Data: AF21, AF22, AF23
    16: 0,  # OAM: CS2
    10: 0, 12: 0, 14: 0,  # High-Throughput Data: AF11, AF12, AF13
    0: 0,  # Standard: DF
    8: 1,  # Low-Priority Data: CS1
    1: 1,  # Lower Effort: LE (RFC 8622)
}  # fmt: skip

#: UP of every 6-bit DSCP; code points RFC 8325 does not list go to UP 0 (its section 4:
#: unused code points get best effort).
UP_OF_DSCP: tuple[int, ...] = tuple(_RFC8325.get(d, 0) for d in range(64))

_AC_OF_UP = (
    AccessCategory.BE, AccessCategory.BK, AccessCategory.BK, AccessCategory.BE,
    AccessCategory.VI, AccessCategory.VI, AccessCategory.VO, AccessCategory.VO,
)  # fmt: skip

#: Access category of every 6-bit DSCP.
AC_OF_DSCP: tuple[AccessCategory, ...] = tuple(_AC_OF_UP[up] for up in UP_OF_DSCP)


def up_of_dscp(dscp: int) -> int:
    """The 802.11 user priority of a 6-bit DSCP (RFC 8325, RFC 8622)."""
    if not 0 <= dscp < 64:
        raise ValueError(f"DSCP {dscp}: allowed 0-63")
    return UP_OF_DSCP[dscp]


def ac_of_up(up: int) -> AccessCategory:
    """The access category of an 802.11 user priority (802.11-2016 Table 10-1)."""
    if not 0 <= up < 8:
        raise ValueError(f"user priority {up}: allowed 0-7")
    return _AC_OF_UP[up]
