"""What travels through a simulated station: packets (one MPDU each) and flow bookkeeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from coorp.scenario import AccessCategory
from coorp.sim.timing import mpdu_bytes

if TYPE_CHECKING:
    from coorp.sim.station import Station

__all__ = ["IP_UDP_HEADER_BYTES", "TCP_ACK_BYTES", "FlowState", "Message", "Packet"]

#: IPv4 (20) + UDP (8): a datagram message's fragments each carry an IP header.
IP_UDP_HEADER_BYTES = 28
IP_HEADER_BYTES = 20
#: IPv4 + TCP with timestamps: a pure TCP acknowledgement.
TCP_ACK_BYTES = 52


class FlowState:
    """Counters of one flow (a scenario flow, a workload channel, or TCP acks)."""

    __slots__ = (
        "ac", "bulk", "delivered_bytes", "delivered_packets", "dropped_packets", "dst", "name",
        "retransmitted_packets", "sent_packets", "src",
    )  # fmt: skip

    def __init__(self, name: str, src: Station, dst: Station, ac: AccessCategory, bulk: bool):
        self.name = name
        self.src = src
        self.dst = dst
        self.ac = ac
        self.bulk = bulk
        self.sent_packets = 0
        self.delivered_packets = 0
        self.delivered_bytes = 0
        self.dropped_packets = 0
        self.retransmitted_packets = 0


class Message:
    """A datagram message split into IP fragments; delivered when every fragment is."""

    __slots__ = (
        "created_ns", "delivered_ns", "first_depth", "flow", "lost", "msg_id", "on_delivered",
        "remaining", "size_bytes",
    )  # fmt: skip

    def __init__(
        self,
        msg_id: int,
        flow: FlowState,
        size_bytes: int,
        created_ns: int,
        fragments: int,
        on_delivered: Callable[[Message], None] | None,
    ) -> None:
        self.msg_id = msg_id
        self.flow = flow
        self.size_bytes = size_bytes
        self.created_ns = created_ns
        self.remaining = fragments
        self.delivered_ns = -1
        self.first_depth = -1
        self.lost = False
        self.on_delivered = on_delivered


class Packet:
    """One IP packet = one MPDU, from the driver's queue to the receiver."""

    __slots__ = (
        "ac", "bulk", "dst", "flow", "hw_depth", "hw_enq_ns", "ip_bytes", "message", "mpdu",
        "pid", "retries", "src", "transfer",
    )  # fmt: skip

    def __init__(
        self,
        pid: int,
        flow: FlowState,
        ip_bytes: int,
        message: Message | None = None,
        transfer: object | None = None,
    ) -> None:
        self.pid = pid
        self.flow = flow
        self.src = flow.src
        self.dst = flow.dst
        self.ac = flow.ac
        self.bulk = flow.bulk
        self.ip_bytes = ip_bytes
        self.mpdu = mpdu_bytes(ip_bytes)
        self.message = message
        self.transfer = transfer
        self.retries = 0
        self.hw_enq_ns = -1
        self.hw_depth = -1
