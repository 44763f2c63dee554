"""The ``oracle`` policy: exact future LS sends and airtimes, aggregates sized to the gap.

The property: no bulk aggregate of a robot is on the air at an instant when that robot
hands one of its protected LS messages (a worker's perception, the leader's control) to
its stack. Checked on the exchange trace of the simulator, independently of the policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorp._errors import UsageError
from coorp.policies import CoorpPolicy, OraclePolicy, Team, get_policy, policy_names
from coorp.scenario import Scenario, load_scenario, parse_scenario
from coorp.sim import Simulation
from coorp.sim.timing import ExchangeTiming
from coorp.testing import check_policy
from coorp.units import s
from coorp.workload import CrlResult, MpcLoop, run_crl
from crl_scenarios import crl_scenario, merge
from policy_registry import registered

ROOT = Path(__file__).resolve().parents[2]


def protected_sends(r: CrlResult) -> dict[str, np.ndarray]:
    """Each robot's protected LS sends: the instants it handed them to its stack."""
    msgs = r.sim.messages
    out: dict[str, list[int]] = {}
    for flow, created in zip(msgs["flow"], msgs["created_ns"], strict=True):
        if flow.startswith(("perception:", "control:")):
            out.setdefault(r.sim.flows[flow].src, []).append(int(created))
    return {k: np.array(sorted(v)) for k, v in out.items()}


def bulk_frames(r: CrlResult, sc: Scenario, mcs: dict[str, int]) -> dict[str, list[tuple]]:
    """Each station's AC_BE data frames (bulk data, TCP acks) as (start, end, MPDUs):
    the span its own PPDU and the response it waits for occupy (for a collision, its own
    exchange, not the longest colliding one)."""
    timing = ExchangeTiming(sc.phy)
    thr = sc.mac.rts_threshold_bytes
    out: dict[str, list[tuple]] = {}
    assert r.sim.trace is not None
    for start, end, collided, stations, acs, mpdus, psdus, _ in r.sim.trace:
        for name, ac, n, psdu in zip(stations, acs, mpdus, psdus, strict=True):
            if ac != "BE" or n == 0:
                continue
            if collided:
                data = timing.data_ns(psdu, mcs[name])
                end = start + timing.success_ns(data, block_ack=n > 1, rts=psdu > thr)
            out.setdefault(name, []).append((start, end, n))
    return out


def overlaps(r: CrlResult, sc: Scenario, mcs: dict[str, int]) -> list[tuple[str, int, tuple]]:
    """(robot, send instant, frame) for every protected send inside one of its frames."""
    bad = []
    frames = bulk_frames(r, sc, mcs)
    for robot, sends in protected_sends(r).items():
        fr = sorted(frames.get(robot, []))
        starts = np.array([f[0] for f in fr], dtype=np.int64)
        for t in sends:
            i = int(np.searchsorted(starts, t, side="right")) - 1
            if i >= 0 and fr[i][1] > t:  # start <= t < end
                bad.append((robot, int(t), fr[i]))
    return bad


# -- registry and labels -------------------------------------------------------------------


def test_registered_and_labelled_not_deployable() -> None:
    assert "oracle" in policy_names()
    assert get_policy("oracle") is OraclePolicy
    assert OraclePolicy.deployable is False
    assert "not deployable" in OraclePolicy.summary
    for name in ("edca", "schedwifi", "coorp", "coorp-global", "coorp-local"):
        assert get_policy(name).deployable is True


def test_conforms_to_the_policy_contract() -> None:
    report = check_policy(OraclePolicy)
    assert report.ok and report.transfers > 0


def test_without_the_schedule_it_says_what_is_missing() -> None:
    sc = crl_scenario(2, duration_s=0.5)
    wl = sc.workload
    assert wl is not None
    sim = Simulation(sc)
    mpc = MpcLoop(sim, wl.mpc, wl.leader, tuple(sc.workers))
    team = Team(
        sim=sim, leader=wl.leader, workers=tuple(sc.workers), ls_flows=mpc.flow_names,
        mpc=wl.mpc, options=sc.policy,
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"needs the MPC loop's send schedule"):
        OraclePolicy(team).install()


def test_without_ls_traffic_it_is_coorp_permits_only() -> None:
    sc = crl_scenario(2, duration_s=1.0)
    oracle = run_crl(sc, "oracle", bh_only=True)
    glob = run_crl(sc, "coorp-global", bh_only=True)
    assert "oracle" not in oracle.policy_stats
    assert oracle.bh_bytes == glob.bh_bytes > 0
    assert oracle.policy_stats["permits"] == glob.policy_stats["permits"]


# -- the property ----------------------------------------------------------------------------


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    workers=st.integers(1, 3),
    mcs=st.sampled_from([0, 3, 7]),
    ring=st.sampled_from(["shared", "per_ac"]),
    phase=st.sampled_from(["aligned", "random"]),
    jitter_us=st.sampled_from([0.0, 500.0]),
    seed=st.integers(1, 10_000),
)
def test_no_bulk_aggregate_is_on_the_air_when_its_robot_sends_ls(
    workers: int, mcs: int, ring: str, phase: str, jitter_us: float, seed: int
) -> None:
    sc = crl_scenario(
        workers, duration_s=1.5, seed=seed, links={"mode": "fixed", "mcs": mcs},
        hw_queue={"mode": ring},
        workload={"mpc": {"phase": phase, "jitter_us": jitter_us}},
    )  # fmt: skip
    r = run_crl(sc, "oracle", trace=True)
    names = [st.name for st in sc.stations]
    frames = bulk_frames(r, sc, dict.fromkeys(names, mcs))
    assert sum(len(f) for f in frames.values()) > 0  # bulk data did go out
    assert len(r.loops) > 10
    assert overlaps(r, sc, dict.fromkeys(names, mcs)) == []


def test_coorp_has_such_overlaps_on_the_same_scenario() -> None:
    # The check above has teeth: COORP's learned windows let some aggregates run into
    # a send (seed 3: dozens on this scenario).
    sc = crl_scenario(3, duration_s=2.0, seed=3)
    mcs = dict.fromkeys((st.name for st in sc.stations), 7)
    assert len(overlaps(run_crl(sc, "coorp", trace=True), sc, mcs)) > 0
    assert overlaps(run_crl(sc, "oracle", trace=True), sc, mcs) == []


# -- mechanisms ------------------------------------------------------------------------------


def slow_robot_scenario(seed: int) -> Scenario:
    """Two workers at MCS 7; r2's links to and from the leader at MCS 0 (80 MHz, 2
    streams: 58.5 Mb/s, a full A-MPDU lasts the 5.484 ms PPDU limit)."""
    return crl_scenario(
        2, duration_s=2.0, seed=seed,
        phy={"width_mhz": 80, "spatial_streams": 2},
        links={"mode": "fixed", "mcs": 7, "overrides": [
            {"src": "r2", "dst": "leader", "mcs": 0}, {"src": "leader", "dst": "r2", "mcs": 0},
        ]},
    )  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2])
def test_a_slow_link_still_sends_between_its_windows(seed: int) -> None:
    sc = slow_robot_scenario(seed)
    r = run_crl(sc, "oracle", trace=True)
    mcs = {"leader": 7, "r1": 7, "r2": 0}
    assert overlaps(r, sc, mcs) == []
    sends = protected_sends(r)["r2"]
    data = [f for f in bulk_frames(r, sc, mcs)["r2"] if f[2] > 2]  # aggregates, not acks
    # r2's parameter updates went out in aggregates...
    assert len(data) > 50
    assert r.sim.flows["update:r2"].delivered_bytes > 0
    # ...and the aggregate before a perception was sized to the gap: it ends shortly
    # before the send (within one more MPDU's exchange at MCS 0, ~0.3 ms, plus a few
    # slots of access), not a whole 5.5 ms aggregate earlier.
    timing = ExchangeTiming(sc.phy)
    one_mpdu = timing.success_ns(timing.data_ns(1542, 0), block_ack=False, rts=False)
    tight = 0
    for t in sends:
        before = [f for f in data if f[1] <= t and t - f[1] < 6_000_000]
        if before and t - max(f[1] for f in before) <= one_mpdu + 200_000:
            tight += 1
    assert tight >= 5
    oracle = r.policy_stats["oracle"]["r2"]
    assert oracle["allowed"] > 0 and oracle["denied_ahead"] > 0


class _CoorpBeAcks(CoorpPolicy):
    name = "test-coorp-be-acks"
    summary = "coorp with its robots' TCP acks in AC_BE, as the oracle's"
    ack_ac = None


def test_on_crl5_it_moves_at_least_as_much_bulk_data_as_coorp() -> None:
    # crl-5 with batches of 8 items instead of 64, so that bulk data (40 MB updates)
    # moves within 2 simulated seconds. The oracle bounds local preemption, with the
    # acks in AC_BE as the simulator sends them; coorp's acks in AC_VI (ack_ac) are not
    # local preemption, so it is compared with them in AC_BE too.
    base = load_scenario(ROOT / "scenarios" / "crl-5.toml").model_dump(mode="json")
    sc = parse_scenario(merge(base, {"workload": {"drlc": {"batch_items": 8}}}))
    oracle = run_crl(sc, "oracle", duration_ns=s(2.0))
    with registered(_CoorpBeAcks):
        coorp = run_crl(sc, _CoorpBeAcks.name, duration_ns=s(2.0))
    assert oracle.bh_bytes >= coorp.bh_bytes > 0
    stats: dict[str, Any] = oracle.policy_stats
    assert set(stats["oracle"]) == {st.name for st in sc.stations}
    assert stats["permits"]["grants"] > 0


def test_a_sliding_bound_never_holds_a_frame_an_ls_message_waits_behind() -> None:
    # In a late loop a worker's next send is an earliest-possible bound that slides with
    # time. Held up to it again and again, the bulk frame at the head of a shared ring
    # (a FIFO) kept the robot's own perception stuck behind it for seconds (crl-5,
    # seed 4). Once a budget's send did not come, an LS message waiting behind the
    # frame lets it go.
    from types import SimpleNamespace

    from coorp.policies import OracleHooks
    from coorp.scenario import AccessCategory

    bound = [5_000_000]
    ring: list[Any] = [SimpleNamespace(message=None)]
    station = SimpleNamespace(shared=True, rings={AccessCategory.BE: ring})
    hooks = OracleHooks(
        robot="r1", station=station, channel=None,  # type: ignore[arg-type]
        schedule=lambda _r, now: max(bound[0], now + 300_000),
        permits=None, ls_flows=frozenset(),  # type: ignore[arg-type]
    )  # fmt: skip
    assert hooks.max_bulk_airtime_ns(station, 1_000_000) == 4_000_000  # up to the send
    ring.append(SimpleNamespace(message=object()))  # a perception queues behind it
    # 5 ms passed, no send: the bound slid to now + 0.3 ms. Do not hold again.
    assert hooks.max_bulk_airtime_ns(station, 5_000_001) is None
    # Without an LS message behind, holding costs nothing and stays.
    ring.pop()
    assert hooks.max_bulk_airtime_ns(station, 5_400_000) == 300_000
