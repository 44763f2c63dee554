"""Selective acknowledgments in the TCP model (``[tcp] sack``, ``coorp.sim.sack``): exact
behaviour in tiny scenarios — the receiver's blocks, every hole marked and resent in one
recovery where NewReno needs a round trip per hole, the scoreboard's counts, a lost tail
still left to the RTO — and bytes delivered exactly once through MAC losses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tcp_losses import assert_delivered_once, drop_queued, lossy_scenario

from coorp import ScenarioError
from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import Simulation
from coorp.sim.congestion import LOST, RECOVERY, RETRANS, SACKED
from coorp.sim.sack import MAX_BLOCKS, ack_blocks, sack_ack_bytes
from coorp.sim.tcp import TcpConnection
from golden_digest import digest

MS = 1_000_000
BE = AccessCategory.BE


def _sim(sack: bool, cc: str = "cubic") -> Simulation:
    tcp = {"sender": cc, "receive_window_bytes": 4_194_304, "sack": sack}
    sc = parse_scenario({"name": "sack", "stations": [{"name": "ap"}, {"name": "sta"}], "tcp": tcp})
    return Simulation(sc)


def _scoreboard(conn: TcpConnection) -> tuple[int, int, int]:
    """(SACKED, LOST, RETRANS) segments outstanding, counted from the flags."""
    flags = [conn.flags[s - conn.base] for s in range(conn.snd_una, conn.snd_nxt)]
    return (
        sum(1 for f in flags if f & SACKED),
        sum(1 for f in flags if f & LOST),
        sum(1 for f in flags if f & RETRANS),
    )


def _four_holes(sack: bool) -> tuple[TcpConnection, list[int], list[tuple[Any, ...]]]:
    """A CUBIC upload in slow start loses four queued segments, three apart, at 3 ms;
    its state every 50 µs for 30 ms."""
    sim = _sim(sack)
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, None)
    conn = sim.tcp["up"]
    holes: list[int] = []
    sim.call_at(3 * MS, lambda: holes.extend(drop_queued(sim, conn, [1, 4, 7, 10])))
    states: list[tuple[Any, ...]] = []

    def sample() -> None:
        blocks = [list(b) for b in conn.sack_blocks]
        states.append((conn.snd_una, conn.ca_state, conn.lost_out, conn.retrans_out, blocks))
        states[-1] += (_scoreboard(conn), (conn.sacked_out, conn.lost_out, conn.retrans_out))

    for t in range(600):
        sim.call_at(3 * MS + t * 50_000, sample)
    sim.run(60 * MS)
    return conn, holes, states


@pytest.mark.parametrize("sack", [False, True])
def test_sack_resends_every_hole_in_one_round_where_newreno_needs_one_per_hole(
    sack: bool,
) -> None:
    conn, holes, states = _four_holes(sack)
    assert [h - holes[0] for h in holes] == [0, 3, 6, 9]
    stats = conn.fast_recoveries, conn.retransmits, conn.timeouts
    assert stats == (1, 4, 0)  # one recovery, each hole resent once, no RTO
    recovering = [s for s in states if s[1] == RECOVERY]
    # Where snd_una rests while it recovers: NewReno resends the next hole when the
    # previous one's retransmission is acknowledged (a partial ack); SACK has marked and
    # resent all four at once, so the first cumulative ack passes them all.
    rests = sorted({s[0] for s in recovering if s[0] <= holes[-1]})
    assert rests == (holes[:1] if sack else holes)
    # At its first step in recovery the sender has marked lost (and resent) every hole
    # with three SACKed segments above it: all four; NewReno only the first.
    assert recovering[0][2:4] == ((4, 4) if sack else (1, 1))


def test_the_receiver_reports_the_block_of_its_latest_segment_first() -> None:
    _, holes, states = _four_holes(True)
    blocks = next(s[4] for s in states if s[1] == RECOVERY)
    # Four holes open: the receiver keeps four blocks, the newest (above the last hole,
    # still growing) first, then the older ones as they were last extended.
    a, b, c, d = holes
    assert blocks[1:] == [[c + 1, d], [b + 1, c], [a + 1, b]]
    assert blocks[0][0] == d + 1 and blocks[0][1] > d + 1
    # Once every hole is filled no block is left.
    assert states[-1][4] == [] and states[-1][0] > d


def test_the_scoreboard_counts_what_its_flags_say() -> None:
    _, _, states = _four_holes(True)
    assert any(s[5][0] > 0 for s in states)  # segments were SACKed
    for s in states:
        assert s[5] == s[6]  # (SACKED, LOST, RETRANS) from the flags == the counters


def test_without_sack_no_segment_is_ever_sacked() -> None:
    _, _, states = _four_holes(False)
    assert all(s[5][0] == 0 and s[4] == [] for s in states)


@pytest.mark.parametrize("sack", [False, True])
def test_sacked_segments_give_rtt_samples_while_the_first_is_missing(sack: bool) -> None:
    # The first segment of the connection is lost: before its retransmission is acked
    # the only samples are those the SACKed segments give (Linux's sack_rtt, Karn's rule
    # kept: they were sent once), so the sender has an RTT when recovery starts with
    # SACK, and none without.
    sim = _sim(sack, "reno")
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(flow, 30_000)
    conn = sim.tcp["up"]
    sim.call_at(0, lambda: drop_queued(sim, conn, [0]))
    at_recovery: list[int] = []

    def watch() -> None:
        if conn.fast_recoveries and not at_recovery:
            at_recovery.append(conn.srtt_ns)

    for t in range(400):
        sim.call_at(t * 10_000, watch)
    sim.run(100 * MS)
    assert conn.fast_recoveries == 1 and conn.timeouts == 0 and conn.retransmits == 1
    assert len(at_recovery) == 1
    assert (at_recovery[0] > 0) == sack
    assert conn.srtt_ns > 0 and sim.flows["up"].delivered_bytes == 30_000


def test_a_lost_tail_is_still_left_to_the_rto() -> None:
    # Nothing above the last segment to SACK: no duplicate ack, the RTO resends it.
    sim = _sim(True, "reno")
    flow = sim.flow("up", "sta", "ap", BE, bulk=True)
    done: list[int] = []
    t = sim.start_transfer(flow, 15_000, lambda _t, now: done.append(now))
    conn = sim.tcp["up"]
    sim.call_at(0, lambda: drop_queued(sim, conn, [9]))
    sim.run(2_000 * MS)
    assert (conn.timeouts, conn.retransmits, conn.fast_recoveries) == (1, 1, 0)
    assert len(done) == 1 and done[0] > 200 * MS
    assert t.delivered_bytes == 15_000 == sim.flows["up"].delivered_bytes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=60))
def test_the_receivers_blocks_are_the_runs_it_holds_beyond_the_hole(arrivals: list[int]) -> None:
    # Segments reach the receiver's TCP in any order, some twice: after each, the blocks
    # its ack carries are at most three disjoint maximal runs of the segments it holds
    # beyond rcv_nxt, the first the run of the segment that just arrived.
    sim = _sim(True)
    sim.flow("up", "sta", "ap", BE, bulk=True)
    sim.start_transfer(sim.flows["up"], None)
    conn = sim.tcp["up"]
    held: set[int] = set()
    for s in arrivals:
        new = s not in held
        conn._receive(s, 1, 1500, 0)
        held.add(s)
        blocks = ack_blocks(conn)
        pairs = list(zip(blocks[::2], blocks[1::2], strict=True))
        assert len(pairs) <= MAX_BLOCKS
        ahead = {x for x in held if x >= conn.rcv_nxt}
        assert (pairs == []) == (not ahead)
        for lo, hi in pairs:
            assert conn.rcv_nxt < lo < hi
            assert set(range(lo, hi)) <= ahead  # held
            assert lo - 1 not in ahead and hi not in ahead  # maximal
        covered = [x for lo, hi in pairs for x in range(lo, hi)]
        assert len(covered) == len(set(covered))  # disjoint
        if new and s > conn.rcv_nxt:
            assert pairs[0][0] <= s < pairs[0][1]  # the latest segment's run first


def test_an_ack_with_blocks_is_longer_by_its_sack_option() -> None:
    assert sack_ack_bytes(52, ()) == 52
    assert sack_ack_bytes(52, (10, 12)) == 52 + 4 + 8
    assert sack_ack_bytes(52, (10, 12, 14, 16, 20, 30)) == 52 + 4 + 24


def _lossy(seed: int, sack: bool) -> tuple[Any, list[Any], list[TcpConnection]]:
    sc = lossy_scenario({"sender": "cubic", "sack": sack})
    sim = Simulation(sc, seed=seed)
    transfers = []
    for name in ("a", "b"):
        flow = sim.flow(f"up-{name}", name, "ap", BE, bulk=True)
        for k in range(3):
            sim.call_at(k * 100 * MS, lambda f=flow: transfers.append(
                sim.start_transfer(f, 700_000 + 1234 * len(transfers))))  # fmt: skip
    conns = [sim.tcp["up-a"], sim.tcp["up-b"]]
    bad: list[str] = []

    def check() -> None:  # without SACK, sacked_out counts duplicate acks instead
        for c in conns if sack else ():
            if _scoreboard(c) != (c.sacked_out, c.lost_out, c.retrans_out):
                bad.append(f"{c.flow.name} at {sim.now_ns}")

    for t in range(1, 400):
        sim.call_at(t * 5 * MS, check)
    res = sim.run(2_000 * MS)
    assert bad == []
    return res, transfers, conns


def test_every_byte_is_delivered_once_with_sack_through_mac_losses() -> None:
    res, transfers, conns = _lossy(3, True)
    assert sum(c.retransmits for c in conns) > 5  # losses happened
    assert sum(c.fast_recoveries for c in conns) > 0
    assert_delivered_once(res, transfers)


def test_sack_same_seed_same_results_and_it_changes_the_run() -> None:
    a, _, _ = _lossy(5, True)
    b, _, _ = _lossy(5, True)
    assert digest(a, a.tcp) == digest(b, b.tcp)
    c, _, _ = _lossy(5, False)
    assert digest(c, c.tcp) != digest(a, a.tcp)


def _compressing(nr: int) -> tuple[Simulation, TcpConnection]:
    tcp = {"sender": "cubic", "sack": True, "comp_sack_nr": nr}
    sc = parse_scenario({"name": "c", "stations": [{"name": "ap"}, {"name": "sta"}], "tcp": tcp})
    sim = Simulation(sc)
    sim.flow("up", "sta", "ap", BE, bulk=True)
    return sim, sim.tcp["up"]


@pytest.mark.parametrize("nr", [0, 44])
def test_the_receiver_compresses_its_sacks_after_three(nr: int) -> None:
    # Segment 0 is missing and 1..50 arrive at one instant. Without compression each is
    # acked (50); with tcp_comp_sack_nr = 44 the first three are (the sender's dupack
    # threshold), the next 44 wait, the 45th goes out with them, and the last two wait
    # for the timer: 3 + 1 + 1 acks. The segment that fills the hole is acked at once.
    sim, conn = _compressing(nr)
    sent = conn.ack_flow
    for s in range(1, 51):
        conn._receive(s, 1, 1500, 0)
    assert sent.sent_packets == (50 if not nr else 4)
    assert conn.compressed_acks == (0 if not nr else 2)
    sim.run(1 * MS)
    assert sent.sent_packets == (50 if not nr else 5) and conn.compressed_acks == 0
    conn._receive(0, 1, 1500, sim.now_ns)
    assert conn.rcv_nxt == 51 and sent.sent_packets == (51 if not nr else 6)
    # A new hole (at 51): three more at once again, the counter restarts with rcv_nxt.
    for s in range(52, 57):
        conn._receive(s, 1, 1500, sim.now_ns)
    assert sent.sent_packets == (56 if not nr else 9)


@pytest.mark.parametrize(("srtt", "wait"), [(100 * MS, 1 * MS), (10 * MS, 500_000)])
def test_compressed_sacks_wait_a_twentieth_of_the_rtt_at_most_1_ms(srtt: int, wait: int) -> None:
    sim, conn = _compressing(44)
    conn.srtt_ns = srtt
    for s in range(1, 5):  # segment 0 missing: three acked at once, the fourth waits
        conn._receive(s, 1, 1500, 0)
    assert conn.compressed_acks == 1 and conn.comp_deadline == wait
    assert conn.ack_flow.sent_packets == 3
    sim.run(wait - 1)
    assert conn.ack_flow.sent_packets == 3  # still held
    sim.run(wait)
    assert conn.ack_flow.sent_packets == 4 and conn.comp_deadline == -1


def test_comp_sack_nr_needs_sack() -> None:
    tcp = {"sender": "cubic", "comp_sack_nr": 44}
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "c", "stations": [{"name": "a"}, {"name": "b"}], "tcp": tcp})
    assert "comp_sack_nr > 0 needs sack = true" in str(info.value)
