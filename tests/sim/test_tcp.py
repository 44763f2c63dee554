"""The TCP sender model (``[tcp] sender``, ``coorp.sim.tcp``): exact behaviour in tiny
scenarios — slow start, the reductions after a loss, slow start after idle, the RTO and
its backoff, a gate that holds a sender past its RTO, bytes delivered exactly once — and
that the model changes nothing when it is off."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import FOREVER, DriverView, SimResult, Simulation, simulate
from coorp.sim.tcp import TcpConnection
from golden_digest import digest

MS = 1_000_000
BE = AccessCategory.BE


def _scenario(cc: str = "reno", **kw: Any) -> Scenario:
    tcp = {"sender": cc, "receive_window_bytes": 4_194_304, **kw.pop("tcp", {})}
    return parse_scenario(
        {"name": "tcp", "stations": [{"name": "ap"}, {"name": "sta"}], "tcp": tcp, **kw}
    )


def _upload(sim: Simulation, total: int | None = None, **kw: Any) -> TcpConnection:
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, total, **kw)
    return sim.tcp["up"]


def _drop_one_queued_segment(sim: Simulation, conn: TcpConnection) -> int:
    """Drop the last segment in the sender's NIC ring as the MAC does at its retry limit
    (``Channel._count_retry``); returns its sequence number."""
    st = sim.station("sta")
    ring = st.rings[BE]
    run = ring[-1]
    assert run.flow is conn.flow and not run.sealed  # queued, not on the air
    tail = run.split(run.count - 1) if run.count > 1 else run
    if tail is not run:
        ring.append(tail)
    tail.retries = sim.scenario.mac.retry_limit
    seq = tail.seq_base + tail.pid
    assert sim.channel._count_retry(tail, sim.now_ns)
    return seq


# -- slow start --------------------------------------------------------------------------
def test_slow_start_doubles_the_window_every_round_trip() -> None:
    sim = Simulation(_scenario(tcp={"quickacks": 0}), trace=True)
    conn = _upload(sim)
    res = sim.run(10 * MS)
    trace = res.tcp["up"]["cwnd_trace"]
    # One ACK per two segments, each adding the segments it acknowledges (Linux's
    # tcp_slow_start): 10 -> 20 -> 40 -> 80 -> 160, a round trip apart.
    assert [w for _, w, _ in trace[:4]] == [20, 40, 80, 160]
    gaps = [b[0] - a[0] for a, b in pairwise(trace[:4])]
    assert all(g > 0 for g in gaps)
    # Still in slow start: the window is the initial one plus every acknowledged segment.
    assert conn.ssthresh > conn.cwnd
    assert conn.cwnd == 10 + conn.snd_una
    assert res.tcp["up"]["retransmits"] == 0 and res.tcp["up"]["timeouts"] == 0


def test_quickack_mode_acknowledges_the_first_16_segments_one_by_one() -> None:
    # Linux's receiver acks each of a connection's first 16 segments at once
    # (tcp_incr_quickack, TCP_MAX_QUICKACKS), then every second: the window still
    # doubles per round trip, from more ACKs.
    sim = Simulation(_scenario(tcp={"quickacks": 16}), trace=True)
    conn = _upload(sim)
    res = sim.run(10 * MS)
    trace = res.tcp["up"]["cwnd_trace"]
    first, second = trace[0][0], trace[10][0]
    assert [(t, w) for t, w, _ in trace[:10]] == [(first, w) for w in range(11, 21)]
    # The second round: six more quickacks, then one ACK per two segments (their run
    # absorbs the sixth, which acknowledges the segment before its first).
    assert [(t, w) for t, w, _ in trace[10:16]] == [(second, w) for w in (21, 22, 23, 24, 25, 40)]
    assert [w for _, w, _ in trace[16:18]] == [80, 160] and second > first
    assert conn.cwnd == 10 + conn.snd_una
    # ACKs of the first two rounds: 10 + 6 one per segment, 7 one per two.
    ack_times = sorted({t for t, _, _ in trace if t <= second})
    assert ack_times == [first, second]
    assert res.flows["up:ack"].sent_packets >= 23


def test_the_receiver_quickacks_again_after_an_idle_gap_longer_than_its_rto() -> None:
    # tcp_event_data_recv: data after a gap longer than the receiver's RTO (200 ms here)
    # re-enters quickack mode, a shorter gap does not.
    def acks_for_the_second_transfer(gap_ms: int) -> int:
        sim = Simulation(_scenario(tcp={"slow_start_after_idle": False, "quickacks": 16}))
        flow = sim.flow("up", "sta", "ap", BE, bulk=True)
        acks = sim.flows["up:ack"]
        sim.start_transfer(flow, 20 * 1448)
        sent: list[int] = []

        def second() -> None:
            sent.append(acks.sent_packets)
            sim.start_transfer(flow, 20 * 1448)

        sim.call_at(gap_ms * MS, second)
        sim.run((gap_ms + 50) * MS)
        return acks.sent_packets - sent[0]

    counts = {gap_ms: acks_for_the_second_transfer(gap_ms) for gap_ms in (100, 300)}
    # 20 segments: after the short gap one ACK per two (10); after the long one the
    # first 16 one by one, then 2 for the last 4.
    assert counts == {100: 10, 300: 18}


def test_ns3s_receiver_acks_only_the_first_segment_at_once() -> None:
    # quickacks = 1 is ns-3 3.44's receiver (docs/validation.md): ACKs for segments
    # 1, 3, 5, ..., the last of each flight waits for the next: 2w - 1 per round trip.
    sim = Simulation(_scenario(tcp={"quickacks": 1}), trace=True)
    _upload(sim)
    res = sim.run(10 * MS)
    assert [w for _, w, _ in res.tcp["up"]["cwnd_trace"][:4]] == [19, 37, 73, 145]


@pytest.mark.parametrize(
    ("gro", "segments", "at_once", "later"),
    [
        (45, 10, 1, 0),  # one super-segment of 10: one ACK (every second segment: 5)
        (45, 28, 1, 0),
        (8, 9, 1, 1),  # 8, then a lone segment that waits for the delayed-ACK timer
        (8, 10, 2, 0),  # 8 + 2: both acked at once
        (8, 16, 2, 0),
        (45, 1, 0, 1),  # a lone segment: delayed, as without GRO
    ],
)
def test_gro_acks_each_super_segment_of_what_one_exchange_delivered(
    gro: int, segments: int, at_once: int, later: int
) -> None:
    # [tcp] gro_segments: the segments one A-MPDU delivers (all its runs) reach TCP as
    # super-segments of up to gro_segments (Linux's GRO), each acked once when it holds
    # more than one segment (__tcp_ack_snd_check); the whole first flight goes in one
    # exchange here (initial window = the transfer; its last segment is a run apart).
    tcp = {"quickacks": 0, "gro_segments": gro, "initial_window_segments": segments}
    sim = Simulation(_scenario(tcp=tcp), trace=True)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    acks = sim.flows["up:ack"]
    sim.start_transfer(flow, segments * 1448)
    sent: list[int] = []
    for t in (30, 60):
        sim.call_at(t * MS, lambda: sent.append(acks.sent_packets))
    res = sim.run(100 * MS)
    data = [e for e in sim.channel.stats.trace or [] if e[3] == ("sta",) and not e[2]]
    assert [e[5] for e in data] == [(segments,)]  # one exchange carried them all
    assert sent == [at_once, at_once + later]
    assert res.tcp["up"]["delayed_acks"] == later
    assert sim.tcp["up"].snd_una == segments  # every segment acknowledged


def test_without_gro_the_same_flight_is_acked_every_second_segment() -> None:
    sim = Simulation(_scenario(tcp={"quickacks": 0, "initial_window_segments": 27}), trace=True)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, 27 * 1448)
    acks = sim.flows["up:ack"]
    sent: list[int] = []
    for t in (30, 60):
        sim.call_at(t * MS, lambda: sent.append(acks.sent_packets))
    sim.run(100 * MS)
    data = [e for e in sim.channel.stats.trace or [] if e[3] == ("sta",) and not e[2]]
    assert [e[5] for e in data] == [(27,)]
    assert sent == [13, 14]  # 13 at once, the 27th after the delayed-ACK timer


def test_gro_changes_nothing_until_asked() -> None:
    base = {"name": "gro", "duration_s": 0.2, "stations": [{"name": "ap"}, {"name": "s"}],
            "flows": [{"kind": "bulk", "name": "b", "src": "s", "dst": "ap"}]}  # fmt: skip

    def run(**tcp: Any) -> SimResult:
        return simulate(parse_scenario({**base, "tcp": {"sender": "cubic", **tcp}}), trace=True)

    plain, zero, gro = run(), run(gro_segments=0), run(gro_segments=45)
    assert digest(zero) == digest(plain)
    assert digest(gro) != digest(plain)
    assert gro.flows["b:ack"].sent_packets < plain.flows["b:ack"].sent_packets / 4


def test_an_ack_sent_clears_the_delayed_ack_timer() -> None:
    # Segments 1-2 at 0 ms: the first arms the 40 ms timer, the second's ACK goes at once
    # and clears it (Linux's tcp_event_ack_sent, ns-3's SendEmptyPacket). Segment 3 at
    # 20 ms arms a fresh timer: its ACK leaves at 20 + 40 ms, not at the stale 40 ms.
    sim = Simulation(_scenario(tcp={"quickacks": 0}))
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    acks = sim.flows["up:ack"]
    sim.start_transfer(flow, 2 * 1448)
    sim.call_at(20 * MS, lambda: sim.start_transfer(flow, 1448))
    sent: list[int] = []
    for t in (19, 41, 60, 61):
        sim.call_at(t * MS, lambda: sent.append(acks.sent_packets))
    res = sim.run(100 * MS)
    assert sent == [1, 1, 1, 2] and res.tcp["up"]["delayed_acks"] == 1


def test_window_and_receive_window_bound_what_enters_the_kernel_queue() -> None:
    # 10 segments at time 0: the initial window, nothing more until an ACK arrives.
    sim = Simulation(_scenario())
    conn = _upload(sim)
    assert conn.snd_nxt == 10 and conn.sock.remaining_bytes is not None
    st = sim.station("sta")
    assert st.rings[BE].n + conn.sock.remaining_bytes // 1500 == 10
    # A receive window of 8 segments caps what is in flight whatever the window.
    sim = Simulation(_scenario(tcp={"receive_window_bytes": 8 * 1448}))
    conn = _upload(sim)
    in_flight: list[int] = []
    for t in range(1, 20):
        sim.call_at(t * MS, lambda: in_flight.append(conn.snd_nxt - conn.snd_una))
    sim.run(20 * MS)
    assert max(in_flight) == 8 and conn.snd_una > 100


# -- reductions after a loss ----------------------------------------------------------------
@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_a_lost_segment_costs_one_fast_recovery_and_the_window_reduction(cc: str) -> None:
    sim = Simulation(_scenario(cc), trace=True)
    conn = _upload(sim)
    dropped: list[int] = []
    sim.call_at(3 * MS, lambda: dropped.append(_drop_one_queued_segment(sim, conn)))
    res = sim.run(60 * MS)
    s = res.tcp["up"]
    assert s["fast_recoveries"] == 1 and s["retransmits"] == 1
    assert s["timeouts"] == 0 and s["duplicate_segments"] == 0
    prior = conn.prior_cwnd  # the window when the third duplicate ACK arrived
    expected = max(prior >> 1, 2) if cc == "reno" else max(prior * 717 // 1024, 2)
    assert conn.ssthresh == expected and prior > 20
    # Recovery ends with the window at ssthresh (PRR), then it grows from there.
    trace = res.tcp["up"]["cwnd_trace"]
    at = next(i for i, (_, _, th) in enumerate(trace) if th == expected)
    assert any(w == expected for _, w, th in trace[at:] if th == expected)
    assert conn.cwnd >= expected
    # Every segment reached the receiver once: the lost one through its retransmission.
    assert res.flows["up"].delivered_packets == conn.rcv_nxt >= dropped[0] + 1
    assert res.flows["up"].retransmitted_packets == 1
    assert res.flows["up"].dropped_packets == 1


def test_cubic_grows_along_its_curve_after_a_loss() -> None:
    # After the reduction CUBIC aims back at the window before it (W_max): concave
    # growth, its origin the window at the loss.
    sim = Simulation(_scenario("cubic"), trace=True)
    conn = _upload(sim)
    sim.call_at(3 * MS, lambda: _drop_one_queued_segment(sim, conn))
    sim.run(400 * MS)
    cubic = conn.cc
    assert cubic.name == "cubic"
    w_max = cubic.last_max_cwnd  # type: ignore[attr-defined]
    assert w_max == conn.prior_cwnd  # no fast convergence on the first loss
    assert conn.cwnd > conn.ssthresh


@pytest.mark.parametrize("hystart", [True, False])
def test_hystart_ends_slow_start_without_a_loss_and_counts_it(hystart: bool) -> None:
    # One upload, no loss in 300 ms: HyStart (Linux's default) sets ssthresh to the window
    # once, where its ACK train or delay rise shows the queue building, and counts it as
    # Linux's TCPHystart*Detect / *Cwnd do; without it slow start goes on.
    sim = Simulation(_scenario("cubic", tcp={"hystart": hystart}))
    conn = _upload(sim)
    first: list[tuple[int, int]] = []

    def look() -> None:
        if not first and conn.ssthresh < 1 << 30:
            first.append((conn.cwnd, conn.ssthresh))

    for t in range(1, 300):
        sim.call_at(t * MS, look)
    res = sim.run(300 * MS)
    cubic = conn.cc
    assert res.tcp["up"]["fast_recoveries"] == 0 and res.tcp["up"]["timeouts"] == 0
    if not hystart:
        assert first == [] and cubic.hystart_exits == 0  # type: ignore[attr-defined]
        return
    assert cubic.hystart_exits == 1  # type: ignore[attr-defined]
    assert cubic.hystart_cwnd == conn.ssthresh == first[0][1] >= 16  # type: ignore[attr-defined]
    assert conn.cwnd > conn.ssthresh  # congestion avoidance from there


# -- slow start after idle ----------------------------------------------------------------
@pytest.mark.parametrize("after_idle", [True, False])
def test_data_written_after_an_idle_rto_restarts_the_window(after_idle: bool) -> None:
    sim = Simulation(_scenario(tcp={"slow_start_after_idle": after_idle}))
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    first = sim.start_transfer(flow, 1_500_000)
    conn = sim.tcp["up"]
    seen: dict[str, int] = {}

    def second() -> None:
        assert first.delivered_bytes == 1_500_000 and conn.packets_out == 0
        seen.update(cwnd=conn.cwnd, ssthresh=conn.ssthresh, rto=conn.rto_ns,
                    idle=sim.now_ns - conn.lsndtime)  # fmt: skip
        sim.start_transfer(flow, 150_000)
        seen["after"] = conn.cwnd
        seen["after_ssthresh"] = conn.ssthresh

    sim.call_at(500 * MS, second)
    sim.run(600 * MS)
    assert seen["idle"] > seen["rto"] >= 200 * MS
    if not after_idle:
        assert seen["after"] == seen["cwnd"] and conn.idle_restarts == 0
        return
    # Linux's tcp_cwnd_restart: halve per RTO of idleness, down to the initial window.
    cwnd, idle = seen["cwnd"], seen["idle"] - seen["rto"]
    while idle > 0 and cwnd > 10:
        cwnd >>= 1
        idle -= seen["rto"]
    assert seen["after"] == max(cwnd, 10) < seen["cwnd"]
    assert seen["after_ssthresh"] == max(seen["ssthresh"], seen["cwnd"] * 3 // 4)
    assert conn.idle_restarts == 1


# -- the RTO --------------------------------------------------------------------------------
class _Gate:
    """Hooks that hold every bulk packet in the kernel queue until ``release_ns``."""

    per_packet = False

    def __init__(self, sim: Simulation, release_ns: int) -> None:
        self.sim = sim
        self.release_ns = release_ns

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return None if now_ns >= self.release_ns else FOREVER

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        pass

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        pass

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        pass


def test_a_gate_holding_data_past_the_rto_backs_it_off_and_costs_no_window() -> None:
    sim = Simulation(_scenario())
    st = sim.station("sta")
    sim.set_hooks("sta", _Gate(sim, 7_500 * MS))
    conn = _upload(sim)
    timeouts: dict[int, int] = {}
    for t_ms in (999, 1001, 2999, 3001, 6999, 7001):
        sim.call_at(t_ms * MS, lambda t=t_ms: timeouts.update({t: conn.timeouts}))
    sim.call_at(7_500 * MS, st.resume_bulk)
    sim.run(7_600 * MS)
    # No RTT sample yet: RTO 1 s (RFC 6298), doubled after each timeout.
    assert timeouts == {999: 0, 1001: 1, 2999: 1, 3001: 2, 6999: 2, 7001: 3}
    # The segments never left the station: nothing was resent (skb_still_in_host_queue),
    # and the first ACK of an original segment undid the reduction (F-RTO).
    assert conn.retransmits == 0 and conn.spurious_timeouts == 1
    assert conn.ssthresh > 10**9 and conn.cwnd > 10 and conn.backoff == 0


def test_a_lost_tail_is_resent_after_the_rto() -> None:
    # The last segment of a transfer is lost: no duplicate ACKs follow, the RTO does.
    sim = Simulation(_scenario())
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    done: list[int] = []
    t = sim.start_transfer(flow, 15_000, lambda _t, now: done.append(now))
    conn = sim.tcp["up"]
    st = sim.station("sta")
    assert st.rings[BE].n == 10  # the whole transfer: 10 segments in the ring
    sim.call_at(0, lambda: _drop_one_queued_segment(sim, conn))
    sim.run(2_000 * MS)
    assert conn.timeouts == 1 and conn.retransmits == 1 and conn.spurious_timeouts == 0
    assert len(done) == 1 and done[0] > 200 * MS  # waited for the RTO (>= 200 ms)
    assert t.delivered_bytes == 15_000 == sim.flows["up"].delivered_bytes


# -- exactly once, deterministic -------------------------------------------------------------
def _lossy(seed: int) -> tuple[SimResult, list[list[int]], list[Any]]:
    sc = parse_scenario({
        # MCS 9 a little too far for it: MPDUs lost to errors, and after two attempts
        # dropped by the MAC (retry limit 1).
        "name": "lossy", "mac": {"retry_limit": 1},
        "links": {"mode": "fixed", "mcs": 9, "packet_errors": True},
        "stations": [{"name": "ap"}, {"name": "a", "position_m": [6.0, 0.0]},
                     {"name": "b", "position_m": [0.0, 6.5]}],
        "tcp": {"sender": "cubic"},
    })  # fmt: skip
    sim = Simulation(sc, seed=seed)
    completions: list[list[int]] = []
    transfers = []
    for name in ("a", "b"):
        flow = sim.flow(f"up-{name}", name, "ap", BE, bulk=True)
        for k in range(3):
            done: list[int] = []
            completions.append(done)
            sim.call_at(k * 100 * MS, lambda f=flow, d=done: transfers.append(
                sim.start_transfer(f, 700_000 + 1234 * len(transfers),
                                   lambda _t, now, d=d: d.append(now))))  # fmt: skip
    return sim.run(2_000 * MS), completions, transfers


def test_every_byte_is_delivered_once_through_mac_losses() -> None:
    res, completions, transfers = _lossy(3)
    stats = res.tcp
    assert sum(s["retransmits"] for s in stats.values()) > 5  # losses happened
    assert sum(res.flows[f].dropped_packets for f in ("up-a", "up-b")) > 5
    assert all(len(c) == 1 for c in completions)  # each transfer completed, once
    for t in transfers:
        assert t.delivered_bytes == t.total_bytes
    for name in ("up-a", "up-b"):
        mine = [t for t in transfers if t.flow.name == name]
        assert res.flows[name].delivered_bytes == sum(t.total_bytes for t in mine)


def test_same_seed_same_results() -> None:
    a, ca, _ = _lossy(5)
    b, cb, _ = _lossy(5)
    assert digest(a, a.tcp) == digest(b, b.tcp) and ca == cb
    c, _, _ = _lossy(6)
    assert digest(c, c.tcp) != digest(a, a.tcp)


# -- off by default ---------------------------------------------------------------------------
def test_without_a_sender_the_tcp_table_changes_nothing() -> None:
    base = {"name": "off", "duration_s": 0.05, "stations": [{"name": "ap"}, {"name": "s"}],
            "flows": [{"kind": "bulk", "name": "b", "src": "s", "dst": "ap"}]}  # fmt: skip
    plain = simulate(parse_scenario(base), trace=True)
    off = parse_scenario({**base, "tcp": {"sender": "none", "initial_window_segments": 3}})
    other = simulate(off, trace=True)
    assert digest(plain) == digest(other) and plain.tcp == {} == other.tcp
    on = simulate(parse_scenario({**base, "tcp": {"sender": "reno"}}), trace=True)
    assert digest(on) != digest(plain) and set(on.tcp) == {"b"}
    assert "tcp" in on.summary() and "tcp" not in plain.summary()


def test_bulk_flows_without_acks_stay_endless_queues() -> None:
    sc = _scenario(flows=[{"kind": "bulk", "name": "udp", "src": "sta", "dst": "ap",
                           "tcp_acks": False}])  # fmt: skip
    res = simulate(sc, duration_ns=20 * MS)
    assert res.tcp == {} and res.flows["udp"].delivered_bytes > 0
