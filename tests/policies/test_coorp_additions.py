"""Coorp's additions to the paper's local preemption, each against the same run without
it (docs/control.md, "Beyond the paper"): a small team, several seeds, the measured
effect. Nothing here asserts a headline percentage. The ablations hold no TCP acks,
interleave a robot's transfers and keep the Gaussian windows and the leader's first
word, with the acks in AC_BE (``gate_acks = False``, ``serial_transfers = False``,
issue 36's additions off, ``ack_ac = None``):
each addition is measured where the ladder measured it, on the rung before issue 22's
(``benchmarks/coorp_ladder.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import numpy as np
import pytest

from coorp._errors import ScenarioError, UsageError
from coorp.policies import CoorpPolicy, register_policy
from coorp.scenario import AccessCategory, Scenario, load_scenario, parse_scenario, resolve_scenario
from coorp.units import NS_PER_S
from coorp.workload import CrlResult, run_crl
from crl_scenarios import crl_scenario
from policy_registry import registered

SEEDS = [1, 2, 3]


class _CoorpWithoutHints(CoorpPolicy):
    name = "test-coorp-without-hints"
    summary = "coorp without the leader's send-time hints"
    use_hints = False
    ring_airtime_budget_ns = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None


class _CoorpWithPaperTable(CoorpPolicy):
    name = "test-coorp-paper-table"
    summary = "coorp with the paper's completion-time table (bare durations, no lead buckets)"
    realized_ctt = False
    ctt_lead_edges_ns: ClassVar[tuple[int, ...]] = ()
    ring_airtime_budget_ns = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None


class _CoorpWithoutFloor(CoorpPolicy):
    name = "test-coorp-without-floor"
    summary = "coorp without the completion-time table's physical floor (nor a ring budget)"
    ctt_floor = False
    ring_airtime_budget_ns = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None


class _CoorpFloorOnly(CoorpPolicy):
    name = "test-coorp-floor-only"
    summary = "coorp with the table's physical floor and no ring budget"
    ring_airtime_budget_ns = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None


@pytest.fixture(scope="module", autouse=True)
def ablations() -> Iterator[None]:
    """The ablations are registered for this module only."""
    with registered(
        _CoorpWithoutHints, _CoorpWithPaperTable, _CoorpWithoutFloor, _CoorpFloorOnly,
        _CoorpNoRingBudget,
    ):  # fmt: skip
        yield


def run(policy: str, seed: int) -> CrlResult:
    # Four workers sharing MCS 7: one 8 MB epoch in 3 s, the LS burst a fifth of a period.
    sc = crl_scenario(4, duration_s=3.0, seed=seed, workload={"drlc": {"param_bytes": 8_000_000}})
    return run_crl(sc, policy)


@pytest.mark.parametrize("seed", SEEDS)
def test_coorp_moves_more_bulk_data_than_the_paper_and_keeps_the_loop(seed: int) -> None:
    # The gate's additions alone: the ring budget (tested below) trades a few percent
    # of a fast link's throughput for short rings, which is not what this measures.
    ours, paper = run("test-coorp-no-ring-budget", seed), run("coorp-paper", seed)
    assert ours.bh_bytes > 1.05 * paper.bh_bytes
    assert ours.violation_rate <= paper.violation_rate + 0.01
    # The paper's gate never resumes early; ours did (a drain, a send, a hint).
    assert not any(paper.policy_stats["early_resumes"].values())
    assert sum(ours.policy_stats["early_resumes"].values()) > 0


def control_latency_p50(result: CrlResult) -> float:
    msgs = result.sim.messages
    ctl = np.array([str(f).startswith("control:") for f in msgs["flow"]], dtype=bool)
    lat = msgs["latency_ns"][ctl]
    return float(np.median(lat[lat >= 0]))


def test_the_leaders_hints_reach_its_planner_and_cost_nothing() -> None:
    ours = [run("test-coorp-no-ring-budget", seed) for seed in SEEDS]
    blind = [run("test-coorp-without-hints", seed) for seed in SEEDS]
    for o, b in zip(ours, blind, strict=True):
        # Only the leader gives hints (its control sends follow the last perception).
        assert set(o.policy_stats["hints"]) == {"leader"} and o.policy_stats["hints"]["leader"]
        assert not b.policy_stats["hints"]
        assert o.violation_rate <= b.violation_rate
    # Knowing when its controls go out, the leader keeps sending closer to them
    # without making them wait: more bulk data, controls no slower.
    assert sum(o.bh_bytes for o in ours) > sum(b.bh_bytes for b in blind)
    assert np.mean([control_latency_p50(o) for o in ours]) <= np.mean(
        [control_latency_p50(b) for b in blind]
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_completion_measured_against_the_send_admits_more(seed: int) -> None:
    ours, plain = run("test-coorp-no-ring-budget", seed), run("test-coorp-paper-table", seed)
    assert ours.bh_bytes > 1.02 * plain.bh_bytes
    assert ours.violation_rate <= plain.violation_rate + 0.01


@pytest.mark.parametrize("seed", [1, 2])
def test_the_floor_keeps_a_slow_robot_from_filling_its_ring(seed: int) -> None:
    # one-low: r4 sends at 29 Mb/s (0.4 ms per packet). Realized samples of its shallow
    # queues are often 0 (the send came late enough); scaled to deeper depths they
    # said a full ring clears at once, and r4's perception found its ring nearly full.
    sc = load_scenario(resolve_scenario("one-low"))
    depths = {}
    # (Without the ring budget, which alone would keep the ring short.)
    for policy in ("test-coorp-floor-only", "test-coorp-without-floor"):
        result = run_crl(sc, policy, seed=seed, duration_ns=12 * NS_PER_S, timeseries=False)
        msgs = result.sim.messages
        depths[policy] = msgs["hw_depth_first"][msgs["flow"] == "perception:r4"]
        assert depths[policy].size > 300
    capacity = sc.hw_queue.capacity_packets
    assert depths["test-coorp-without-floor"].max() >= 0.75 * capacity
    assert depths["test-coorp-floor-only"].max() <= 0.5 * capacity


def test_the_floor_is_the_fastest_bulk_links_airtime_per_packet() -> None:
    from coorp.policies._hooks import per_packet_estimate_ns, per_packet_floor_ns
    from coorp.sim import Simulation

    sim = Simulation(load_scenario(resolve_scenario("one-low")))
    slow = per_packet_floor_ns(sim, "r4", ["leader"])  # 29.25 Mb/s: ~0.4 ms per MPDU
    fast = per_packet_floor_ns(sim, "leader", ["r1", "r4"])  # its fastest worker link
    assert 20 * fast < slow <= per_packet_estimate_ns(sim, "r4")  # no backoff in a floor
    assert per_packet_floor_ns(sim, "r1", []) == 0


class _CoorpCapped(CoorpPolicy):
    name = "test-coorp-capped"
    summary = "coorp with every bulk exchange capped at 1 ms of airtime (no ring budget)"
    bulk_airtime_cap_ns = 1_000_000
    ring_airtime_budget_ns = None


def test_an_airtime_cap_splits_a_slow_links_aggregates() -> None:
    sc = load_scenario(resolve_scenario("one-low"))
    with registered(_CoorpCapped):
        capped = run_crl(sc, "test-coorp-capped", seed=1, duration_ns=8 * NS_PER_S, trace=True)
    plain = run_crl(sc, "test-coorp-no-ring-budget", seed=1, duration_ns=8 * NS_PER_S, trace=True)

    def r4_bulk(r: CrlResult) -> list[int]:
        assert r.sim.trace is not None
        return [
            end - start
            for start, end, collided, stations, acs, mpdus, *_ in r.sim.trace
            if not collided and stations == ("r4",) and acs == ("BE",) and mpdus[0] > 0
        ]

    assert max(r4_bulk(plain)) > 5_000_000  # 29.25 Mb/s: ~5.5 ms aggregates
    capped_r4 = r4_bulk(capped)
    assert len(capped_r4) > len(r4_bulk(plain)) and max(capped_r4) <= 1_000_000
    assert capped.bh_bytes > 0


class _CoorpNoRingBudget(CoorpPolicy):
    name = "test-coorp-no-ring-budget"
    summary = "coorp with the whole ring open to bulk data"
    ring_airtime_budget_ns = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None


def test_the_ring_limit_is_the_budget_over_the_next_packets_link_airtime() -> None:
    from coorp.policies._hooks import RingBudget, per_packet_floor_ns
    from coorp.sim import Simulation

    sim = Simulation(load_scenario(resolve_scenario("one-low")))
    slow = per_packet_floor_ns(sim, "r4", ["leader"])  # 29.25 Mb/s: ~0.4 ms per packet
    fast = per_packet_floor_ns(sim, "r1", ["leader"])
    r4 = RingBudget(sim, "r4", 2_000_000)
    assert r4.packets_to("leader") == 2_000_000 // slow
    assert RingBudget(sim, "r4", 1).packets_to("leader") == 1  # never below one packet
    # The leader is limited per destination: by r4's link only while sending to r4.
    leader = RingBudget(sim, "leader", 2_000_000)
    assert leader.packets_to("r4") == 2_000_000 // slow
    assert leader.packets_to("r1") == 2_000_000 // fast > 64
    # With no bulk data waiting the ring's capacity (nothing to limit).
    assert r4() == sim.scenario.hw_queue.capacity_packets
    with pytest.raises(UsageError, match="ring budget 0 ns"):
        RingBudget(sim, "r4", 0)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_ring_budget_keeps_ls_messages_from_queueing_behind_bulk_data(seed: int) -> None:
    from coorp.policies._hooks import RingBudget
    from coorp.sim import Simulation

    # all-low: every link at 29 Mb/s, 0.4 ms per bulk packet; 1.5 ms of ring is 3.
    sc = load_scenario(resolve_scenario("all-low"))
    budget = CoorpPolicy.ring_airtime_budget_ns
    assert budget is not None
    limit = RingBudget(Simulation(sc), "r1", budget).packets_to("leader")
    assert limit == 3
    runs = {
        p: run_crl(sc, p, seed=seed, duration_ns=8 * NS_PER_S, timeseries=False)
        for p in ("coorp", "test-coorp-no-ring-budget")
    }
    ahead = {}
    for p, r in runs.items():
        msgs = r.sim.messages
        flows = msgs["flow"].astype(str)
        loop = np.char.startswith(flows, "perception:") | np.char.startswith(flows, "control:")
        ahead[p] = msgs["hw_depth_first"][loop]
    # Ahead of an MPC message: at most `limit` bulk packets, plus what the budget does
    # not hold back (the robot's own earlier LS packets, TCP acks).
    assert ahead["coorp"].max() <= limit + 6
    assert ahead["test-coorp-no-ring-budget"].max() >= 24
    assert np.mean(ahead["coorp"]) < np.mean(ahead["test-coorp-no-ring-budget"])
    assert sum(runs["coorp"].policy_stats["ring_full_pauses"].values()) > 0
    assert not any(runs["test-coorp-no-ring-budget"].policy_stats["ring_full_pauses"].values())
    # Bulk data still flows (short rings refill at every completion).
    assert runs["coorp"].bh_bytes >= 0.8 * runs["test-coorp-no-ring-budget"].bh_bytes


def test_the_scenario_sets_the_ring_budget_for_coorp_only() -> None:
    base = load_scenario(resolve_scenario("all-low"))
    assert base.policy.coorp.ring_budget_us is None  # unset: the policy's own 1.5 ms

    def with_budget(budget_us: float) -> Scenario:
        return base.model_copy(
            update={"policy": base.policy.model_copy(
                update={"coorp": base.policy.coorp.model_copy(
                    update={"ring_budget_us": budget_us})})})  # fmt: skip

    def run8(sc: Scenario, policy: str) -> CrlResult:
        return run_crl(sc, policy, seed=1, duration_ns=8 * NS_PER_S, timeseries=False)

    def ahead(r: CrlResult) -> int:
        flows = r.sim.messages["flow"].astype(str)
        mpc = np.char.startswith(flows, "perception:") | np.char.startswith(flows, "control:")
        return int(r.sim.messages["hw_depth_first"][mpc].max())

    # 100 ms of airtime is more than the 128-packet ring holds: the budget stops binding.
    assert ahead(run8(base, "coorp")) <= 3 + 6
    assert ahead(run8(with_budget(100_000), "coorp")) >= 24
    # The paper's algorithm has no ring budget: the option changes nothing there.
    plain, opted = run8(base, "coorp-paper"), run8(with_budget(400), "coorp-paper")
    assert opted.bh_bytes == plain.bh_bytes
    np.testing.assert_array_equal(opted.sim.messages["delivered_ns"],
                                  plain.sim.messages["delivered_ns"])  # fmt: skip
    with pytest.raises(ScenarioError, match="ring_budget_us"):
        parse_scenario(base.model_dump(mode="json") | {"policy": {"coorp": {"ring_budget_us": 0}}})


def test_the_ring_budget_does_not_count_traffic_outside_the_team() -> None:
    from coorp.policies._hooks import RingBudget
    from coorp.sim import Simulation

    sim = Simulation(load_scenario(resolve_scenario("crl-5-download")))
    leader = sim.station("leader")
    budget = RingBudget(sim, "leader", 1_500_000)
    team = sim.flow("team", "leader", "r1", AccessCategory.BE, bulk=True, tcp_acks=False)
    other = sim.flow("other", "leader", "laptop", AccessCategory.BE, bulk=True, tcp_acks=False)
    sim.set_hooks("leader", _PauseAll())  # the team's data waits: only the other flows
    sim.start_transfer(team, None)
    limit = budget()
    assert leader.ungated_in_ring(AccessCategory.BE) == 0
    sim.start_transfer(other, None, gated=False)
    ahead = leader.ungated_in_ring(AccessCategory.BE)
    # Half the ring: the team's data waits too, and the two share the ring in turns.
    assert ahead == sim.scenario.hw_queue.capacity_packets // 2
    assert budget() == limit + ahead


def test_the_ring_budget_leaves_out_the_acks_a_robot_sends_for_traffic_outside_the_team() -> None:
    # crl-5-guest-leader: a guest uploads to the leader, whose NIC sends its TCP acks.
    # They are not the team's: with outside_acks they do not use up the team's budget.
    from coorp.policies._hooks import RingBudget
    from coorp.sim import Simulation

    sim = Simulation(load_scenario(resolve_scenario("crl-5-guest-leader")))
    leader = sim.station("leader")
    team = sim.flow("team", "leader", "r1", AccessCategory.BE, bulk=True, tcp_acks=False)
    guest = sim.flow("up", "guest", "leader", AccessCategory.BE, bulk=True)
    sim.set_hooks("leader", _PauseAll())  # the team's data waits
    sim.start_transfer(team, None)
    sim.start_transfer(guest, None, gated=False)
    old = RingBudget(sim, "leader", 1_500_000)
    new = RingBudget(sim, "leader", 1_500_000, outside_acks=True)
    seen: list[int] = []

    def look() -> None:  # the ring as the budget sees it, every 50 us
        acks = sum(p.count for p in leader.rings[AccessCategory.BE] if p.flow is guest.ack_flow)
        assert leader.ungated_in_ring(AccessCategory.BE) == 0  # acks are not transfers
        assert old() == old.packets_to("r1")  # issue 22's budget counts them
        assert new() == new.packets_to("r1") + acks
        seen.append(acks)
        sim.call_at(sim.now_ns + 50_000, look)

    sim.call_at(50_000, look)
    sim.run(50_000_000)
    assert max(seen) > 0
    assert guest.ack_flow is not None and not guest.ack_flow.gate_acks


def test_the_teams_acks_are_never_held_while_acks_outside_the_team_wait_behind_them() -> None:
    # A held ack waits at the head of its priority queue and holds what is behind it: a
    # guest's acks at the leader too. With OutsideWaiting the team's acks then go.
    from coorp.control import CompletionTimeTable, Gate, Interval
    from coorp.policies._hooks import GatedHooks, OutsideWaiting
    from coorp.sim import Simulation
    from coorp.sim.packets import Packet

    sim = Simulation(load_scenario(resolve_scenario("crl-5-guest-leader")))
    team = sim.flow("team", "r1", "leader", AccessCategory.BE, bulk=True)
    guest = sim.flow("up", "guest", "leader", AccessCategory.BE, bulk=True)
    sim.start_transfer(guest, None, gated=False)  # its acks are outside the team's
    assert team.ack_flow is not None and guest.ack_flow is not None
    queue = sim.station("leader").ls_queues[AccessCategory.BE]
    waiting = OutsideWaiting(sim, "leader")

    class Always:  # a window that never ends: Algorithm 2 denies everything
        def next_window(self, now_ns: int) -> Interval:
            return Interval(0, 10**15)

    gate = Gate(Always(), CompletionTimeTable())
    hooks = GatedHooks(gate=gate, gate_acks=True, outside_waiting=waiting)
    leader = sim.station("leader")
    queue.append(Packet(1, team.ack_flow, 52, count=4))
    assert not waiting() and hooks.admit_acks(leader, 1, 4, 0)[0] == 0  # held
    queue.append(Packet(5, guest.ack_flow, 52, count=8))
    assert waiting() and hooks.admit_acks(leader, 1, 4, 0) == (4, 0)  # they go
    plain = GatedHooks(gate=gate, gate_acks=True)
    assert plain.admit_acks(leader, 1, 4, 0)[0] == 0  # issue 22's gate held them


class _PauseAll:
    def admit_bulk(self, station: object, now_ns: int) -> int | None:
        from coorp.sim import FOREVER

        return FOREVER

    def on_ls_send(self, *a: object) -> None: ...
    def on_hw_enqueue(self, *a: object) -> None: ...
    def on_hw_complete(self, *a: object) -> None: ...


def test_a_foreign_contender_lowers_the_gates_percentile_while_it_lasts() -> None:
    # crl-5-guest's guest saturates the channel from the start: the gates switch to the
    # foreign percentile at the first look; without stations outside the team, never.
    base = load_scenario(resolve_scenario("crl-5-guest"))
    seen: list[float] = []

    class Watch(CoorpPolicy):
        name = "test-foreign-watch"
        summary = "coorp, recording the gates' percentile each look"

        def _watch_foreign(self) -> None:
            super()._watch_foreign()
            seen.append(self.gates["r1"].ctt.percentile)

    register_policy(Watch)
    r = run_crl(base, "test-foreign-watch", duration_ns=1_200_000_000)
    assert seen[:2] == [CoorpPolicy.foreign_ctt_percentile] * 2
    assert r.policy_stats["foreign_contender_s"] > 0.4
    alone = run_crl(load_scenario(resolve_scenario("crl-5")), "coorp", duration_ns=600_000_000)
    assert "foreign_contender_s" not in alone.policy_stats


def test_the_teams_own_traffic_outside_the_team_counts_as_foreign_air() -> None:
    # crl-5-download: the laptop sends only TCP acks; the air is the leader's download,
    # which the team knows from its own bytes. Before any epoch (no team bulk data) the
    # download takes the air and the gates switch.
    seen: list[float] = []

    class Watch(CoorpPolicy):
        name = "test-foreign-download"
        summary = "coorp, recording the gates' percentile each look"

        def _watch_foreign(self) -> None:
            super()._watch_foreign()
            seen.append(self.gates["r1"].ctt.percentile)

    register_policy(Watch)
    run_crl(load_scenario(resolve_scenario("crl-5-download")), "test-foreign-download",
            duration_ns=1_200_000_000)  # fmt: skip
    assert seen[:2] == [CoorpPolicy.foreign_ctt_percentile] * 2


def test_the_team_acks_are_judged_and_learned_apart_from_bulk_data() -> None:
    # With a gate of their own (CoorpPolicy.ack_table), every ack a robot sent went
    # through its acks' gate: announced, completed there, never as an unknown packet in
    # either gate; and the robots that received bulk data held some acks back.
    r = run("coorp", 1)
    stats = r.policy_stats
    acks, bulk = stats["ack_gate"], stats["gate"]
    assert set(acks) == set(bulk) == {"leader", "r1", "r2", "r3", "r4"}
    delivered_acks = sum(f.delivered_packets for n, f in r.sim.flows.items() if n.endswith(":ack"))
    assert delivered_acks > 0  # the team's bulk flows have TCP acks
    # One completion in the acks' gates per ack delivered, none in the bulk gates.
    assert sum(a["completions"] for a in acks.values()) == delivered_acks
    for robot in acks:
        assert acks[robot]["unknown_completions"] == 0
        assert bulk[robot]["unknown_completions"] == 0
    assert sum(stats["ack_holds"].values()) > 0


def test_the_acks_gate_probes_a_table_too_large_for_every_gap() -> None:
    # Gaps of 3 ms between 1 ms windows, and an ack table that says 5 ms per ack (a
    # guess, or samples from a congested moment): Algorithm 2 alone holds every ack for
    # good, and nothing it admits could ever correct the table. With probes the first
    # ask at a gap's start, into an empty ring, lets one ack go (and marks it the probe).
    from coorp.control import CompletionTimeTable, Gate, Interval
    from coorp.policies._hooks import GatedHooks
    from coorp.sim import Simulation

    ms = 1_000_000
    windows = [Interval(3 * ms + i * 4 * ms, 4 * ms - 1 + i * 4 * ms) for i in range(10)]

    class Fixed:
        def next_window(self, now_ns: int) -> Interval | None:
            return next((w for w in windows if w.end_ns >= now_ns), None)

    sim = Simulation(load_scenario(resolve_scenario("crl-5")))
    r1 = sim.station("r1")

    def hooks(probes: bool) -> tuple[GatedHooks, Gate]:
        acks = Gate(Fixed(), CompletionTimeTable(default_ns=5 * ms))
        bulk = Gate(Fixed(), CompletionTimeTable())
        return GatedHooks(gate=bulk, gate_acks=True, ack_gate=acks, ack_probes=probes), acks

    held, _ = hooks(False)
    probing, acks = hooks(True)
    first_gap_end = windows[0].end_ns + 1
    for h in (held, probing):
        assert h.admit_acks(r1, ms, 4, 0) == (0, first_gap_end)  # denied ahead of w0
    # Algorithm 2 alone: denied at every gap's start, forever.
    for w in windows[:-1]:
        assert held.admit_acks(r1, w.end_ns + 1, 4, 0)[0] == 0
    # With probes: one ack goes at the gap's start, alone, as the probe...
    assert probing.admit_acks(r1, first_gap_end, 4, 0) == (1, windows[1].end_ns + 1)
    assert acks.probe_armed
    probing.on_acks_enqueued(r1, 100, 1, 0, first_gap_end)
    assert acks.exploring and not acks.probe_armed and acks.stats.explored == 1
    # ...and no second one while it is in flight, nor into a ring that is not empty.
    assert probing.admit_acks(r1, first_gap_end + 1, 3, 1)[0] == 0
    # The probe completes fast: the table learns, and the next gap admits the rest.
    acks.on_complete_run(100, 1, first_gap_end + 200_000)
    assert probing.admit_acks(r1, windows[1].end_ns + 1, 3, 0) == (3, 0)
