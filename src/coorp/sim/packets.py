"""What travels through a simulated station: packets (one MPDU each) and flow bookkeeping.

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes
(mostly for typing only) so that mypyc compiles every access between packets, stations,
TCP connections and the channel to a native field access.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from coorp.scenario import AccessCategory
from coorp.sim.timing import mpdu_bytes

if TYPE_CHECKING:
    from coorp.sim.station import Station
    from coorp.sim.tcp import TcpConnection

__all__ = [
    "IP_UDP_HEADER_BYTES", "TCP_ACK_BYTES", "BulkTransfer", "FlowState", "Message", "Packet",
    "Ring", "mergeable", "message_columns",
]  # fmt: skip

#: IPv4 (20) + UDP (8): a datagram message's fragments each carry an IP header.
IP_UDP_HEADER_BYTES: Final = 28
IP_HEADER_BYTES: Final = 20
#: IPv4 + TCP with timestamps: a pure TCP acknowledgement.
TCP_ACK_BYTES: Final = 52


class FlowState:
    """Counters of one flow (a scenario flow, a workload channel, or TCP acks)."""

    __slots__ = (
        "ac", "ack_every", "ack_flow", "bulk", "delivered_bytes", "delivered_packets",
        "dropped_packets", "dst", "gate_acks", "name", "repair_ns", "repair_rng",
        "retransmitted_packets", "sent_packets", "src", "tcp", "unacked",
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
        #: TCP acknowledgements of a bulk flow: their flow, one per ``ack_every``
        #: delivered packets, ``unacked`` delivered since the last one.
        self.ack_flow: FlowState | None = None
        self.ack_every = 0
        self.unacked = 0
        #: A flow of TCP acknowledgements for the team's bulk data: the sending
        #: station's hooks may hold them out of its NIC ring (``AckGateHooks``). False
        #: for every other flow, and for the acks of traffic outside the team.
        self.gate_acks = False
        #: Datagram flows on a reliable transport: a fragment the MAC drops is handed to
        #: the NIC again a delay drawn from [repair_ns / 2, 3 repair_ns / 2] after the
        #: drop; -1: best effort, the message is lost.
        self.repair_ns = -1
        self.repair_rng: random.Random | None = None
        #: The TCP connection of a bulk flow and of its ack flow when the scenario models
        #: TCP senders (``[tcp] sender``, ``coorp.sim.tcp``); None otherwise.
        self.tcp: TcpConnection | None = None


class Message:
    """A datagram message split into IP fragments; delivered when every fragment is."""

    __slots__ = (
        "created_ns", "delivered_ns", "first_depth", "flow", "lost", "msg_id", "on_delivered",
        "on_lost", "remaining", "size_bytes",
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
        #: Called once if the message is lost (a fragment dropped, no repair): an
        #: emulator's packets (``Simulation.send_packet``) report their loss here.
        self.on_lost: Callable[[Message], None] | None = None


def message_columns(
    msgs: list[Message],
) -> tuple[list[str], list[int], list[int], list[int], list[int], list[int], list[int], list[int]]:
    """Every message's fields as columns, in one pass, in message order: the flow names
    by number (flows numbered in order of first appearance), then per message its flow's
    number, id, size, creation and delivery instants (-1: not delivered), lost flag (0/1)
    and the hardware-queue depth at the first fragment (lists of ints, for
    ``numpy.fromiter`` with ``int64``, which skips ``numpy.array``'s shape and type
    discovery: a fleet-200 EDCA run's 2 s, 1.5 % fewer instructions; appending to a list
    costs less than to an ``array('q')``, which parses each value). Compiled, so a
    fleet's hundreds of thousands of messages are read here, not attribute by attribute
    from Python; the flow numbers let ``SimResult.collect`` group them per flow with numpy, not a
    Python loop."""
    n = len(msgs)
    number: dict[str, int] = {}
    names: list[str] = []
    codes = [0] * n
    ids = [0] * n
    sizes = [0] * n
    created = [0] * n
    delivered = [0] * n
    lost = [0] * n
    depth = [0] * n
    for i in range(n):
        m = msgs[i]
        name = m.flow.name
        c = number.get(name, -1)
        if c < 0:
            c = number[name] = len(names)
            names.append(name)
        codes[i] = c
        ids[i] = m.msg_id
        sizes[i] = m.size_bytes
        created[i] = m.created_ns
        delivered[i] = m.delivered_ns
        lost[i] = 1 if m.lost else 0
        depth[i] = m.first_depth
    return names, codes, ids, sizes, created, delivered, lost, depth


class Packet:
    """A run of ``count`` consecutive identical MPDUs (IP packets), one ring entry.

    The run stands for packets ``pid, pid + 1, ..., pid + count - 1`` of one flow, all of
    ``ip_bytes``, with the same transfer (or message) and the same retry count (and, under
    the TCP model, consecutive sequence numbers: see ``seq_base``). Bulk data
    handed to the NIC in one batch and TCP acknowledgements sent in one batch travel as
    one run; a message fragment is always a run of one. Runs are split wherever the
    packets they stand for would be treated differently (an A-MPDU boundary, a retry, a
    packet error), so a run behaves exactly like its packets one by one.
    """

    __slots__ = (
        "ac", "bulk", "count", "dst", "flow", "hw_depth", "hw_enq_ns", "ip_bytes", "message",
        "mpdu", "pid", "retries", "sack", "sealed", "seq_base", "src", "ticket", "transfer",
    )  # fmt: skip

    def __init__(
        self,
        pid: int,
        flow: FlowState,
        ip_bytes: int,
        message: Message | None = None,
        transfer: object | None = None,
        count: int = 1,
    ) -> None:
        self.pid = pid
        self.count = count
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
        #: Enqueue time and depth of the run's first packet.
        self.hw_enq_ns = -1
        self.hw_depth = -1
        #: Part of a transmission in flight: later packets must not join this run.
        self.sealed = False
        #: TCP model (``coorp.sim.tcp``): packet ``pid`` of the run is segment
        #: ``seq_base + pid`` of its connection (a data run), or acknowledges up to segment
        #: ``seq_base + 2 * pid`` (a run of acks). Kept by every split, since ids are; 0
        #: for every packet without the TCP model.
        self.seq_base = 0
        #: A FIFO kernel queue (``hw_queue.kernel_queue_fifo``): the station's count of
        #: TCP segments of the category queued when this LS packet arrived, which must
        #: reach the ring before it; -1 otherwise.
        self.ticket = -1
        #: An ack's SACK blocks (``coorp.sim.sack``), flat ``(first, end, ...)``.
        self.sack: tuple[int, ...] = ()

    def split(self, k: int) -> Packet:
        """Detach the run's last ``count - k`` packets as a new run; keep the first ``k``."""
        rest = self.part(self.pid + k, self.count - k)
        self.count = k
        return rest

    def part(self, pid: int, count: int) -> Packet:
        """A new (unsealed) run of ``count`` of this run's packets, from ``pid`` on."""
        rest = Packet(pid, self.flow, self.ip_bytes, self.message, self.transfer, count)
        rest.retries = self.retries
        rest.seq_base = self.seq_base
        rest.ticket = self.ticket
        rest.hw_enq_ns = self.hw_enq_ns
        rest.hw_depth = self.hw_depth + (pid - self.pid) if self.hw_depth >= 0 else -1
        return rest


class Ring:
    """A hardware ring: a FIFO of runs (:class:`Packet`), with ``n`` packets in all.

    A native class around a deque, with the deque's operations the simulator uses: the
    channel reads ``n`` for every access function at every access decision, a C field
    where a deque subclass's attribute was a lookup by name. ``n == 0`` exactly when the
    ring is empty (every run holds at least one packet): the access scan relies on it."""

    __slots__ = ("head", "n", "q")

    def __init__(self) -> None:
        self.q: deque[Packet] = deque()
        self.n = 0
        #: The first run (``q[0]``), None when empty: kept by every method below, so the
        #: access scan reads a C field where ``ring[0]`` went through the item protocol.
        self.head: Packet | None = None

    def __len__(self) -> int:
        return len(self.q)

    def __bool__(self) -> bool:
        return self.head is not None

    def __iter__(self) -> Iterator[Packet]:
        return iter(self.q)

    def __getitem__(self, i: int) -> Packet:
        return self.q[i]

    def __repr__(self) -> str:
        return f"Ring(n={self.n}, {list(self.q)!r})"

    def first(self) -> Packet:
        """The first run; raises IndexError when the ring is empty, as ``ring[0]`` does."""
        h = self.head
        if h is None:
            raise IndexError("first() of an empty ring")
        return h

    def append(self, p: Packet) -> None:
        if self.head is None:
            self.head = p
        self.q.append(p)

    def appendleft(self, p: Packet) -> None:
        self.head = p
        self.q.appendleft(p)

    def popleft(self) -> Packet:
        q = self.q
        p = q.popleft()
        self.head = q[0] if q else None
        return p

    def insert(self, i: int, p: Packet) -> None:
        q = self.q
        q.insert(i, p)
        self.head = q[0]

    def remove(self, p: Packet) -> None:
        q = self.q
        q.remove(p)
        self.head = q[0] if q else None

    def clear(self) -> None:
        self.q.clear()
        self.head = None

    def extend(self, ps: Iterable[Packet]) -> None:
        q = self.q
        q.extend(ps)
        self.head = q[0] if q else None

    def extendleft(self, ps: Iterable[Packet]) -> None:
        q = self.q
        q.extendleft(ps)
        self.head = q[0] if q else None


class BulkTransfer:
    """Bytes a bulk flow still has to hand to the NIC (``None``: unlimited).

    ``gated = False``: traffic the station's policy does not coordinate (a flow outside
    the team): it never asks the driver hooks and is never held by their pauses.

    Under the TCP model (``coorp.sim.tcp``) the station sees one transfer per connection,
    with ``tcp`` set: its ``remaining_bytes`` are the segments the sender's window let
    into the kernel queue, which the connection hands out in sequence runs.
    """

    __slots__ = ("delivered_bytes", "flow", "gated", "on_complete", "remaining_bytes",
                 "tcp", "total_bytes")  # fmt: skip

    def __init__(
        self,
        flow: FlowState,
        total_bytes: int | None,
        on_complete: Callable[[BulkTransfer, int], None] | None,
        gated: bool = True,
    ) -> None:
        self.flow = flow
        self.total_bytes = total_bytes
        self.remaining_bytes = total_bytes
        self.delivered_bytes = 0
        self.on_complete = on_complete
        self.gated = gated
        self.tcp: TcpConnection | None = None


def mergeable(tail: Packet, run: Packet) -> bool:
    """Whether ``run`` may extend ``tail``: the same packets, numbered consecutively."""
    return (
        tail.flow is run.flow
        and tail.pid + tail.count == run.pid
        and tail.ip_bytes == run.ip_bytes
        and tail.transfer is run.transfer
        and tail.retries == run.retries
        and tail.seq_base == run.seq_base
        and tail.message is None
        and run.message is None
        and not tail.sealed
    )
