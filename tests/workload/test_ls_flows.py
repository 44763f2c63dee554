"""``[[workload.ls_flows]]``: send times (phase, drift, pauses, jitter), per-flow miss
rates, and what the team's gate learns; ``[[workload.link_changes]]`` in a run."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from coorp.policies import EdcaPolicy, register_policy
from coorp.scenario import LsFlowConfig
from coorp.sim import Simulation
from coorp.workload import run_crl
from coorp.workload._lsflows import LsFlows
from crl_scenarios import crl_scenario

MS = 1_000_000


def _flow(**over: Any) -> dict[str, Any]:
    return {"name": "lidar:r1", "src": "r1", "dst": "leader", "size_bytes": 2000,
            "period_us": 10_000.0, **over}  # fmt: skip


def _sends(duration_ns: int, **over: Any) -> list[int]:
    sc = crl_scenario(workload={"mpc": {"enabled": False}, "drlc": {"enabled": False}})
    sim = Simulation(sc)
    flows = LsFlows(sim, [LsFlowConfig(**_flow(**over))], repair_ns=None)
    flows.begin()
    sim.run(duration_ns)
    return flows._flows[0].sends


def test_period_phase_and_drift() -> None:
    plain = _sends(100 * MS, phase_us=2500.0)
    assert plain[:3] == [2_500_000, 12_500_000, 22_500_000]
    # +2 % drift: the sender's 10 ms is 10.2 ms of true time.
    fast = _sends(100 * MS, phase_us=0.0, drift_ppm=20_000.0)
    assert fast[:4] == [0, 10_200_000, 20_400_000, 30_600_000]


def test_pauses_skip_sends_and_restart_the_phase() -> None:
    sends = _sends(80 * MS, phase_us=1000.0, active_us=[[0.0, 25_000.0], [42_000.0, 70_000.0]])
    assert sends == [1_000_000, 11_000_000, 21_000_000, 43_000_000, 53_000_000, 63_000_000]


def test_gaussian_jitter_only_delays_and_keeps_order() -> None:
    sends = _sends(300 * MS, jitter_us=800.0)
    nominal = np.arange(len(sends)) * 10 * MS
    delay = np.array(sends) - nominal
    assert (delay >= 0).all() and delay.max() > 0
    assert sends == sorted(sends)


def test_pareto_tail_adds_rare_long_delays() -> None:
    sends = _sends(2000 * MS, jitter="pareto-tail", tail_probability=0.3, tail_scale_us=3000.0,
                   tail_max_us=6000.0)  # fmt: skip
    delay = np.array(sends) - np.arange(len(sends)) * 10 * MS
    tail = delay >= 3 * MS
    assert 0.15 < tail.mean() < 0.45  # about 30 % of 200 sends
    assert delay.max() <= 6 * MS


def test_random_phase_is_fixed_per_run_and_seed() -> None:
    a, b = _sends(50 * MS, phase_us="random"), _sends(50 * MS, phase_us="random")
    assert a == b and 0 <= a[0] < 10 * MS


def test_per_flow_miss_rate_counts_late_and_lost_messages() -> None:
    # A 1 µs bound no message can meet, and one it always meets.
    flows = [_flow(name="tight", deadline_us=1.0), _flow(name="loose", deadline_us=30_000.0)]
    sc = crl_scenario(workload={"drlc": {"enabled": False}, "ls_flows": flows})
    r = run_crl(sc, "edca", duration_ns=400 * MS)
    misses = r.flow_misses()
    assert misses["tight"] == 1.0 and misses["loose"] == 0.0
    assert r.violation_rate == 1.0  # the worst flow's
    m = r.metrics()
    assert m["flow_miss_rate"]["mpc-loop"] == pytest.approx(r._loop_miss_rate())
    assert set(m["flow_latency_p99_ms"]) == {"tight", "loose"}
    assert m["other_mbps"] == 0.0 and "flow_mbps" not in m


def test_a_scenario_without_extra_flows_keeps_its_metrics_shape() -> None:
    r = run_crl(crl_scenario(), "edca", duration_ns=200 * MS)
    assert not {"flow_miss_rate", "flow_latency_p99_ms", "flow_mbps"} & set(r.metrics())
    assert r.violation_rate == r._loop_miss_rate() or math.isnan(r.violation_rate)


def test_only_coordinated_flows_are_given_to_the_policy_to_protect() -> None:
    seen: dict[str, Any] = {}

    @register_policy
    class Spy(EdcaPolicy):
        name = "test-ls-flows-spy"
        summary = "records what the team asks it to protect"

        def install(self) -> None:
            team = self.team
            seen["ls_flows"] = team.ls_flows
            assert team.ls_send is not None
            ask = team.ls_send
            team.sim.call_at(MS, lambda: seen.update(next=ask("r1", MS)))

    sc = crl_scenario(workload={"drlc": {"enabled": False}, "ls_flows": [
        _flow(name="mine", phase_us=3000.0), _flow(name="theirs", coordinated=False)]})  # fmt: skip
    r = run_crl(sc, "test-ls-flows-spy", duration_ns=100 * MS)
    assert "mine" in seen["ls_flows"] and "theirs" not in seen["ls_flows"]
    assert "perception:r1" in seen["ls_flows"]
    assert {"mine", "theirs"} <= r.ls_flows  # both count in the LS metrics
    # The joint schedule: r1's next protected send is the earlier of its perception and
    # its coordinated flow's next send (exact: drawn one ahead).
    assert seen["next"] == (3 * MS, True)


def test_bh_only_reference_stops_the_teams_flows_only() -> None:
    sc = crl_scenario(
        stations=[{"name": "leader"}, {"name": "r1", "position_m": [3.0, 0.0]},
                  {"name": "r2", "position_m": [0.0, 3.0]}, {"name": "guest"}],
        workload={"workers": ["r1", "r2"], "drlc": {"enabled": False}, "ls_flows": [
            _flow(name="team"), _flow(name="voip", src="guest", coordinated=False)]},
    )  # fmt: skip
    r = run_crl(sc, "edca", duration_ns=200 * MS, bh_only=True)
    assert set(r.ls_flow_deadlines) == {"voip"}


def test_link_change_slows_the_link_from_its_instant() -> None:
    change = {"at_s": 0.3, "src": "r1", "dst": "leader", "mcs": 0, "spatial_streams": 1}
    sc = crl_scenario(workload={"drlc": {"enabled": False}, "link_changes": [change]})
    r = run_crl(sc, "edca", duration_ns=600 * MS)
    t = r.tables()["ls_messages"]
    mine = np.array([f == "perception:r1" for f in t["flow"]])
    lat = np.array([x if x is not None else -1 for x in t["latency_ns"]])
    before = lat[mine & (t["enqueue_ns"] < 300 * MS)]
    after = lat[mine & (t["enqueue_ns"] > 310 * MS)]
    # 12 KB at 29.25 Mb/s takes > 3 ms on the air; at MCS 7 two streams, well under 1 ms.
    assert before.max() < 2 * MS and after.min() > 3 * MS
