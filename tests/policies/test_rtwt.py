"""Restricted TWT (``rtwt``, ``coorp-rtwt``) and the 802.11ax-only policies.

The schedule is checked against the airtime of an LS message worked out by hand from
the HE PHY; enforcement against the run's own trace: no exchange carrying bulk data or
a TCP ack may overlap a service period.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from coorp import InfeasibleError
from coorp.phy import PhyStandard, he_ppdu_duration_ns
from coorp.policies import ls_message_airtime_ns, policy_names, rtwt_schedule
from coorp.policies._base import Team
from coorp.scenario import Scenario
from coorp.sim import Simulation
from coorp.workload import run_crl
from crl_scenarios import crl_scenario

AX: dict[str, Any] = {"phy": {"standard": "ax"}}


def ax_scenario(workers: int = 2, **over: Any) -> Scenario:
    return crl_scenario(workers, **{**AX, **over})


def team(sc: Scenario) -> Team:
    sim = Simulation(sc)
    wl = sc.workload
    assert wl is not None
    return Team(
        sim=sim, leader=wl.leader, workers=tuple(sc.workers), ls_flows=frozenset(),
        mpc=wl.mpc, options=sc.policy,
    )  # fmt: skip


def test_ls_message_airtime_by_hand() -> None:
    # A 12 KB perception: 12 296 bytes with UDP, 9 IP fragments (8 x 1500 + 476), MPDUs
    # of 1538 and 514 bytes; AC_VO sends them one per exchange (no aggregation), all in
    # one 1.504 ms TXOP: AIFS 34 µs + mean backoff 3/2 slots, then each exchange is the
    # HE SU PPDU (S-MPDU: + 4 bytes) + SIFS + Ack (28 µs at 24 Mb/s), SIFS between.
    sc = ax_scenario()
    sim = Simulation(sc)
    mode = sc.phy.mode(7)
    full = he_ppdu_duration_ns(1542, mode) + 16_000 + 28_000
    last = he_ppdu_duration_ns(518, mode) + 16_000 + 28_000
    assert full + 8 * (16_000 + full) <= 1_504_000  # one TXOP holds all nine
    expected = 34_000 + 13_500 + full + 7 * (16_000 + full) + 16_000 + last
    assert ls_message_airtime_ns(sim, "r1", "leader", 12_288) == expected


def test_schedule_follows_the_loop_like_schedwifi() -> None:
    sc = ax_scenario(3)
    t = team(sc)
    sps = rtwt_schedule(t)
    unit = 256_000
    p = ls_message_airtime_ns(t.sim, "r1", "leader", 12_288)
    sp_p = math.ceil(2 * p / unit) * unit  # sp_retries = 1: twice the airtime
    # Aligned phases: the perception SPs back to back from the loop start (10 ms).
    assert [(o, d) for o, _, d in sps[:3]] == [
        (10_000_000, sp_p), (10_000_000 + sp_p, sp_p), (10_000_000 + 2 * sp_p, sp_p),
    ]  # fmt: skip
    # The controls' SP after the last perception SP and the 5 ms inference.
    c = sum(ls_message_airtime_ns(t.sim, "leader", w, 1024) for w in ("r1", "r2", "r3"))
    assert sps[3] == (10_000_000 + 3 * sp_p + 5_000_000, 33_333_000, math.ceil(2 * c / unit) * unit)
    # The wake interval is the period in whole µs (33 333.3 µs -> 33 333 µs).
    assert {i for _, i, _ in sps} == {33_333_000}


def test_schedule_that_does_not_fit_the_period_is_infeasible() -> None:
    slow = ax_scenario(4, links={"mode": "fixed", "mcs": 0}, phy={"standard": "ax",
                       "spatial_streams": 1}, policy={"rtwt": {"sp_retries": 7}})  # fmt: skip
    with pytest.raises(InfeasibleError, match="restricted TWT needs"):
        rtwt_schedule(team(slow))


@pytest.mark.parametrize("policy", ["rtwt", "coorp-rtwt"])
@pytest.mark.parametrize("mode", ["per_ac", "shared"])
def test_no_bulk_frame_is_on_the_air_during_a_service_period(policy: str, mode: str) -> None:
    sc = ax_scenario(2, duration_s=0.6, hw_queue={"mode": mode, "capacity_packets": 128})
    r = run_crl(sc, policy, trace=True)
    stats = r.policy_stats["rtwt"]
    sps = [(w["offset_ns"], w["interval_ns"], w["duration_ns"]) for w in stats["service_periods"]]
    windows = []
    for off, every, dur in sps:
        k = 0
        while off + k * every < r.duration_ns:
            windows.append((off + k * every, off + k * every + dur))
            k += 1
    trace = r.sim.trace
    assert trace is not None
    bulk = [e for e in trace if "BE" in e[4]]
    assert bulk and r.bh_bytes > 0
    for start, end, *_ in bulk:
        assert not any(s < end and start < e for s, e in windows), (start, end)
    # LS messages do go inside the service periods.
    vo = [e for e in trace if e[4] == ("VO",)]
    assert any(any(s <= e0 < e for s, e in windows) for e0, *_ in vo)
    assert sum(stats["bulk_holds"].values()) > 0
    if policy == "coorp-rtwt":
        assert r.policy_stats["permits"]["grants"] > 0


@pytest.mark.parametrize("policy", ["ofdma", "rtwt", "coorp-rtwt"])
def test_ax_policies_are_infeasible_on_802_11ac(policy: str) -> None:
    with pytest.raises(InfeasibleError, match=r'phy\.standard = "ax"'):
        run_crl(crl_scenario(2), policy)


def test_default_policy_lists_follow_the_standard() -> None:
    ax_only = {"ofdma", "rtwt", "coorp-rtwt"}
    assert not ax_only & set(policy_names(PhyStandard.AC))
    assert ax_only <= set(policy_names(PhyStandard.AX))
    assert {"edca", "coorp", "schedwifi"} <= set(policy_names(PhyStandard.AX))


def test_ofdma_runs_the_loop_and_the_learning() -> None:
    r = run_crl(ax_scenario(2, duration_s=0.6), "ofdma")
    ul = r.policy_stats["ul_ofdma"]
    assert ul["basic_triggers"] > 0 and ul["mpdus"] > 0
    assert set(ul["served"]) == {"r1", "r2"}
    assert r.metrics()["loops"] > 10 and r.bh_bytes > 0
