"""The MPC loop: reaction-time bounds from the PHY, loop bookkeeping, lag, abandonment."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest

from coorp.phy import ACK_BYTES, SIFS_NS, SLOT_NS, VhtMode, legacy_duration_ns, vht_ppdu_duration_ns
from coorp.scenario import Scenario
from coorp.workload import LoopRecord, run_crl
from crl_scenarios import crl_scenario

MTU = 1500
MCS = 7
INFERENCE_NS = 5_000_000
DEADLINE_NS = 33_000_000
PERIOD_NS = round(33_333.3 * 1000)
START_NS = 10_000_000
#: AIFS of AC_VO: SIFS + AIFSN(2) slots.
AIFS_VO_NS = SIFS_NS + 2 * SLOT_NS


def fragments(size: int) -> list[int]:
    """IP packet sizes of a UDP datagram of ``size`` bytes over a 1500-byte MTU."""
    payload = size + 8  # UDP header
    per = MTU - 20  # IP header
    n = math.ceil(payload / per)
    return [(per if k < n - 1 else payload - per * (n - 1)) + 20 for k in range(n)]


def exchange_ns(ip_bytes: int) -> int:
    """One unaggregated AC_VO MPDU at MCS 7, 2 streams, 80 MHz, then SIFS + Ack at 24 Mb/s:
    QoS MAC header + LLC/SNAP + FCS are 38 bytes, the A-MPDU delimiter 4."""
    psdu = ip_bytes + 38 + 4
    return (
        vht_ppdu_duration_ns(psdu, VhtMode(MCS, 2, 80))
        + SIFS_NS
        + legacy_duration_ns(ACK_BYTES, 24)
    )


def airtime_lower_bound_ns(workers: int) -> tuple[int, int]:
    """Inference + every perception and control exchange back to back (no idle time,
    no contention); and how many exchanges that is."""
    frames = workers * (fragments(12_288) + fragments(1_024))
    return INFERENCE_NS + sum(exchange_ns(f) for f in frames), len(frames)


def mpc_only(workers: int, **mpc: object) -> Scenario:
    return crl_scenario(
        workers,
        duration_s=1.0,
        workload={"drlc": {"enabled": False}, "mpc": mpc},
    )


def check_consecutive(loops: tuple[LoopRecord, ...], period_ns: int) -> None:
    assert [r.index for r in loops] == list(range(len(loops)))
    for r in loops:
        assert r.nominal_ns == START_NS + r.index * period_ns
        assert r.start_ns >= r.nominal_ns
        assert r.end_ns == -1 or r.end_ns > r.start_ns
    for a, b in pairwise(loops):
        assert b.start_ns >= (a.end_ns if a.end_ns >= 0 else a.start_ns)


def test_reaction_is_bracketed_by_airtime_with_fixed_cw() -> None:
    # One worker, AC_VO backoff fixed at 0 (cw_min = cw_max = 0), no jitter: every
    # exchange waits at most one AIFS (less inside a TXOP), so the reaction time is
    # pinned between the pure airtime and the airtime plus one AIFS per exchange.
    sc = crl_scenario(
        1,
        duration_s=1.0,
        mac={"edca": {"VO": {"cw_min": 0, "cw_max": 0}}},
        workload={"drlc": {"enabled": False}, "mpc": {"jitter_us": 0}},
    )
    result = run_crl(sc, "edca")
    lower, exchanges = airtime_lower_bound_ns(1)
    assert len(result.loops) == 30
    for r in result.loops:
        assert r.reaction_ns is not None
        assert lower <= r.reaction_ns <= lower + exchanges * AIFS_VO_NS


def test_reaction_lower_bound_and_deadline_with_a_team() -> None:
    result = run_crl(mpc_only(3), "edca")
    lower, _ = airtime_lower_bound_ns(3)
    assert len(result.loops) == 30
    reactions = result.reaction_ns
    assert np.all(reactions >= lower)
    assert np.all(reactions <= DEADLINE_NS)
    assert result.violation_rate == 0.0
    # A bigger team needs more airtime per loop.
    assert lower > airtime_lower_bound_ns(2)[0]
    check_consecutive(result.loops, PERIOD_NS)
    assert all(r.lag_ns == 0 for r in result.loops)  # nothing overran


def test_loop_that_overruns_delays_the_next() -> None:
    period_ns = 3_000_000  # shorter than inference alone
    result = run_crl(mpc_only(2, period_us=3_000.0), "edca")
    loops = result.loops
    assert len(loops) > 20
    check_consecutive(loops, period_ns)
    assert loops[0].lag_ns == 0
    for a, b in pairwise(loops):
        assert b.start_ns == a.end_ns  # the next loop starts when this one ends
        assert b.lag_ns > a.lag_ns > -1  # and falls further behind each time
    assert result.metrics()["lag_ms_max"] == loops[-1].lag_ns / 1e6


def test_abandoned_loops_count_as_violations() -> None:
    # A 2 ms loop timeout is shorter than inference: every loop is abandoned.
    result = run_crl(mpc_only(2, loop_timeout_us=2_000.0), "edca")
    loops = result.loops
    assert len(loops) == 30
    check_consecutive(loops, PERIOD_NS)
    assert all(r.end_ns == -1 and r.reaction_ns is None for r in loops)
    assert np.all(np.isinf(result.reaction_ns))
    assert result.violation_rate == 1.0
    assert all(r.lag_ns == 0 for r in loops)  # abandoning frees the next period
    # Each loop's perceptions went out; it was abandoned before any control was sent.
    flows = result.sim.flows
    assert flows["perception:r1"].messages_delivered == flows["perception:r2"].messages_sent == 30
    assert flows["control:r1"].messages_sent == flows["control:r2"].messages_sent == 0


def test_some_abandoned_loops_raise_the_violation_rate() -> None:
    free = run_crl(mpc_only(3), "edca").reaction_ns
    timeout_ns = float(np.percentile(free, 60))
    result = run_crl(mpc_only(3, loop_timeout_us=timeout_ns / 1000), "edca")
    abandoned = sum(r.end_ns == -1 for r in result.loops)
    assert 0 < abandoned < len(result.loops)
    # None finished late (the deadline is far above the timeout): every violation is
    # an abandoned loop.
    assert result.violation_rate == pytest.approx(abandoned / len(result.loops))


def test_reaction_percentiles_of_abandoned_loops_are_infinite() -> None:
    result = run_crl(mpc_only(2, loop_timeout_us=2_000.0), "edca")
    with np.errstate(invalid="ignore"):
        p = result.metrics()["reaction_ms"]
    assert p["p50"] == math.inf and p["p99"] == math.inf
