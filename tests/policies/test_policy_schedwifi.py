"""The SchedWiFi policy: the schedule's reserved airtime is exactly its Eq. 4 windows."""

from __future__ import annotations

import pytest

from coorp._errors import InfeasibleError, UsageError
from coorp.control import stw_duration_ns
from coorp.phy import VhtMode
from coorp.policies import SchedWifiPolicy, Team
from coorp.scenario import Scenario
from coorp.sim import Simulation
from coorp.workload import run_crl
from crl_scenarios import crl_scenario

PERIOD_NS = round(33_333.3 * 1000)


def installed(sc: Scenario) -> SchedWifiPolicy:
    wl = sc.workload
    assert wl is not None
    sim = Simulation(sc)
    team = Team(sim=sim, leader=wl.leader, workers=tuple(sc.workers), ls_flows=frozenset(),
                mpc=wl.mpc, options=sc.policy)  # fmt: skip
    policy = SchedWifiPolicy(team)
    policy.install()
    return policy


def test_reserved_fraction_is_the_sum_of_eq4_windows() -> None:
    # Three workers with different uplink/downlink rates.
    mcs = {("r1", "leader"): 3, ("leader", "r2"): 5, ("r3", "leader"): 9}
    overrides = [{"src": s, "dst": d, "mcs": m} for (s, d), m in mcs.items()]
    sc = crl_scenario(3, links={"mode": "fixed", "mcs": 7, "overrides": overrides},
                      policy={"schedwifi": {"clock_skew_us": 40.0, "retries": 5}})  # fmt: skip

    def stw(src: str, dst: str, size: int) -> int:
        rate = VhtMode(mcs.get((src, dst), 7), 2, 80).rate_mbps
        return stw_duration_ns(size, rate, retries=5, tx_ack_ns=30_000, clock_skew_ns=40_000)

    windows = [stw(w, "leader", 12_288) for w in ("r1", "r2", "r3")]
    windows += [stw("leader", w, 1_024) for w in ("r1", "r2", "r3")]
    expected = sum(windows) / PERIOD_NS
    policy = installed(sc)
    assert policy.stats()["reserved_fraction"] == pytest.approx(expected, rel=1e-12)
    # The slow uplink costs more than a fast one.
    assert stw("r1", "leader", 12_288) > stw("r3", "leader", 12_288)
    # run_crl reports the same schedule.
    result = run_crl(sc.model_copy(update={"duration_s": 0.2}), "schedwifi")
    assert result.policy_stats["reserved_fraction"] == pytest.approx(expected, rel=1e-12)
    assert set(result.policy_stats["gate"]) == {"leader", "r1", "r2", "r3"}


def test_a_team_too_large_for_the_period_is_refused() -> None:
    sc = crl_scenario(4, links={"mode": "fixed", "mcs": 0})
    with pytest.raises(UsageError) as info:
        installed(sc)
    msg = str(info.value)
    assert "SchedWiFi needs" in msg and "ms of exclusive windows per MPC period" in msg
    assert "33.33 ms" in msg and "too large" in msg
    with pytest.raises(InfeasibleError, match="too large or its links too slow"):
        run_crl(sc, "schedwifi")


def test_without_mpc_nothing_is_reserved() -> None:
    sc = crl_scenario(2, duration_s=0.3)
    result = run_crl(sc, "schedwifi", bh_only=True)
    assert result.policy_stats == {}
