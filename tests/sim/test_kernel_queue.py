"""A bounded kernel queue (``hw_queue.kernel_queue_packets``): a station holds at most
that many packets per access category in front of its NIC ring — TCP segments, LS
datagrams and TCP acks together — and drops what arrives at a full queue (a tail drop,
as ``coorp emulate``'s queue and Linux's qdisc). Tiny scenarios, behaviour asserted."""

from __future__ import annotations

from typing import Any

from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import Simulation
from coorp.sim.events import PRIO_CONTROL

MS = 1_000_000
BE = AccessCategory.BE


def _scenario(limit: int | None, **kw: Any) -> Scenario:
    return parse_scenario({
        "name": "kq", "stations": [{"name": "ap"}, {"name": "sta"}],
        "tcp": {"sender": "cubic", "receive_window_bytes": 4_194_304},
        "hw_queue": {"mode": "shared", "capacity_packets": 32, "kernel_queue_packets": limit},
        **kw,
    })  # fmt: skip


def _upload(limit: int | None, total: int, until_ms: int) -> tuple[Simulation, list[int]]:
    """One cubic upload sta -> ap; the kernel queue's depth sampled every ms."""
    sim = Simulation(_scenario(limit), seed=1)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, total)
    st = sim.station("sta")
    conn = sim.tcp["up"]
    depths: list[int] = []

    def sample() -> None:  # TCP's segments in the kernel queue (sta sends no LS)
        depths.append((conn.sock.remaining_bytes or 0) // sim.scenario.packet_bytes)
        if limit is not None:
            assert st.kernel_queued(BE) == depths[-1]  # the station's count agrees
        sim.call_at(sim.now_ns + MS, sample)

    sim.loop.call_at(0, PRIO_CONTROL, sample)
    sim.run(until_ms * MS)
    return sim, depths


def test_a_bounded_queue_drops_segments_tcp_repairs_them_and_bounds_the_window() -> None:
    total = 8_000_000
    free, free_depths = _upload(None, total, 600)
    bound, depths = _upload(40, total, 600)
    st = bound.station("sta")
    assert max(depths) <= 40 < max(free_depths)  # the bound holds; unbounded, it grows
    assert st.kernel_drops > 0 and free.station("sta").kernel_drops == 0
    assert bound.tcp["up"].retransmits > 0  # the drops were losses to TCP
    assert bound.tcp["up"].max_cwnd < free.tcp["up"].max_cwnd
    # every byte arrives anyway (retransmitted), exactly once
    assert bound.flows["up"].delivered_bytes == free.flows["up"].delivered_bytes
    assert bound.tcp["up"].snd_una == free.tcp["up"].snd_una


def test_an_ls_message_arriving_at_a_full_queue_is_lost_and_counted() -> None:
    sim = Simulation(_scenario(3), seed=1)
    flow = sim.flow("ls", "sta", "ap", BE, bulk=False)
    # 4 single-packet messages at one instant: the fourth finds the queue full (one may
    # already be in the ring: the ring takes what has room first, so fill it up front).
    st = sim.station("sta")
    st.capacity = 0  # the ring accepts nothing: everything waits in the kernel queue
    msgs = [sim.send_message(flow, 500) for _ in range(4)]
    assert st.kernel_queued(BE) == 3 and st.kernel_drops == 1
    assert [m.lost for m in msgs] == [False, False, False, True]
    st.capacity = 32
    st.refill()
    sim.run(50 * MS)
    assert [m.delivered_ns > 0 for m in msgs] == [True, True, True, False]
    assert st.kernel_queued(BE) == 0


def test_without_a_bound_nothing_is_dropped_at_the_queue() -> None:
    sim, depths = _upload(None, 2_000_000, 200)
    assert sim.station("sta").kernel_drops == 0 and max(depths) > 100


def test_a_fifo_queue_holds_an_ls_packet_behind_the_segments_queued_before_it() -> None:
    """With ``kernel_queue_fifo`` a datagram sent while the station's upload has segments
    in the kernel queue reaches the ring only after them; without, it goes ahead."""
    waits = {}
    for fifo in (False, True):
        sc = _scenario(None)
        hw = sc.hw_queue.model_copy(update={"kernel_queue_fifo": fifo})
        sim = Simulation(sc.model_copy(update={"hw_queue": hw}), seed=1)
        sim.start_transfer(sim.flow("up", "sta", "ap", BE, bulk=True), None)
        ls = sim.flow("ls", "sta", "ap", BE, bulk=False)
        conn, st = sim.tcp["up"], sim.station("sta")
        sim.run(300 * MS)  # the window has grown: segments wait in the kernel queue
        assert (conn.sock.remaining_bytes or 0) // sc.packet_bytes > 50
        msg = sim.send_message(ls, 200)
        waiting = [p for p in st.ls_queues[BE] if p.message is msg]
        if fifo:  # it waits for every segment queued so far
            assert [p.ticket for p in waiting] == [st.tcp_in[BE]] and st.tcp_out[BE] < st.tcp_in[BE]
        else:  # first in line for the ring (no ticket)
            assert [p.ticket for p in waiting] in ([], [-1])
        sim.run(600 * MS)
        assert msg.delivered_ns > 0
        waits[fifo] = msg.delivered_ns - msg.created_ns
    # behind the queued segments (several A-MPDUs) it waits far longer than ahead of them
    assert waits[True] > 3 * waits[False]


class _HoldAcks:
    """Driver hooks that hold the station's TCP acks until ``release_ns``."""

    gates_acks = True

    def __init__(self, release_ns: int) -> None:
        self.release_ns = release_ns
        self.asked = 0

    def admit_acks(self, station: Any, now_ns: int, count: int, depth: int) -> tuple[int, int]:
        self.asked += 1
        return (0, self.release_ns) if now_ns < self.release_ns else (count, 0)

    def on_acks_enqueued(self, *args: Any) -> None:
        pass

    def admit_bulk(self, station: Any, now_ns: int) -> int | None:
        return None

    def on_ls_send(self, *args: Any) -> None:
        pass

    def on_hw_enqueue(self, *args: Any) -> None:
        pass

    def on_hw_complete(self, *args: Any) -> None:
        pass


def test_a_fifo_queue_whose_hooks_hold_the_head_ack_does_not_spin() -> None:
    """The head ack may move as far as the FIFO goes, but the hooks hold it: the refill
    stops (it used to ask again for ever) and the ack goes at the release."""
    sc = _scenario(None)
    hw = sc.hw_queue.model_copy(update={"kernel_queue_fifo": True})
    sim = Simulation(sc.model_copy(update={"hw_queue": hw}), seed=1)
    hooks = _HoldAcks(10 * MS)
    sim.set_hooks("sta", hooks)
    down = sim.flow("down", "ap", "sta", BE, bulk=True, tcp_acks=True)
    sim.start_transfer(down, 3_000_000)
    sim.run(9 * MS)
    held = sim.flows["down:ack"]
    assert held.sent_packets > 0 and held.delivered_packets == 0  # all held so far
    assert hooks.asked < 1000  # asked at refills, not in a loop
    sim.run(200 * MS)
    assert sim.flows["down:ack"].delivered_packets > 0
