"""COORP's global preemption in the simulator: never more than ``limit`` bulk senders."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from coorp.policies import CoorpGlobalPolicy, CoorpPolicy, register_policy
from coorp.scenario import AccessCategory
from coorp.sim import DriverHooks, DriverView
from coorp.units import NS_PER_MS
from coorp.workload import run_crl
from crl_scenarios import crl_scenario

#: (time, robot, grant id held, leader-side holders) of every bulk packet entering a NIC.
ENQUEUES: list[tuple[int, str, int, tuple[str, ...]]] = []


class _Recorder:
    """Wraps a robot's hooks; records every bulk packet the driver hands to the NIC.

    It keeps the default ``per_packet`` (True): the driver asks ``admit_bulk`` once per
    bulk packet, so every ``None`` answer is one bulk packet entering the NIC ring.
    """

    def __init__(self, inner: DriverHooks, policy: CoorpPolicy, robot: str) -> None:
        self.inner = inner
        self.policy = policy
        self.robot = robot

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        decision = self.inner.admit_bulk(station, now_ns)
        if decision is None:
            grant = self.policy.clients[self.robot].grant
            assert self.policy.controller is not None
            holders = tuple(g.robot for g in self.policy.controller.holders)
            ENQUEUES.append((now_ns, self.robot, grant.grant_id if grant else -1, holders))
        return decision

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        self.inner.on_ls_send(station, flow, now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.inner.on_hw_enqueue(station, pid, ac, depth, now_ns)

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self.inner.on_hw_complete(station, pid, ac, now_ns, delivered)


@register_policy
class SpyCoorpGlobal(CoorpGlobalPolicy):
    name = "test-spy-coorp-global"
    summary = "coorp-global with every bulk NIC enqueue recorded"

    def install(self) -> None:
        super().install()
        sim = self.team.sim
        for robot in self.team.robots:
            sim.set_hooks(robot, _Recorder(sim.station(robot).hooks, self, robot))


@register_policy
class SpyCoorp(SpyCoorpGlobal):
    name = "test-spy-coorp"
    summary = "coorp (permits and gate) with every bulk NIC enqueue recorded"
    use_gate = True


def _episodes(enqueues: list[tuple[int, str, int, tuple[str, ...]]]) -> list[tuple[int, int]]:
    """[first, last] bulk enqueue time of each (robot, permit)."""
    spans: dict[tuple[str, int], list[int]] = {}
    for t, robot, grant, _ in enqueues:
        span = spans.setdefault((robot, grant), [t, t])
        span[1] = t
    return [(a, b) for a, b in spans.values()]


def _max_overlap(episodes: list[tuple[int, int]]) -> int:
    edges = sorted([(a, 1) for a, _ in episodes] + [(b, -1) for _, b in episodes],
                   key=lambda e: (e[0], -e[1]))  # fmt: skip
    depth = best = 0
    for _, d in edges:
        depth += d
        best = max(best, depth)
    return best


def _run(policy: str, limit: int, workers: int) -> Any:
    ENQUEUES.clear()
    sc = crl_scenario(workers, duration_s=1.2, policy={"coorp": {"limit": limit}})
    result = run_crl(sc, policy)
    return result, list(ENQUEUES)


@pytest.mark.parametrize("policy", ["test-spy-coorp-global", "test-spy-coorp"])
def test_one_bulk_sender_at_a_time(policy: str) -> None:
    result, enq = _run(policy, limit=1, workers=3)
    assert len(result.epochs) >= 2
    assert len(enq) > 1000
    robots = {r for _, r, _, _ in enq}
    assert robots == {"leader", "r1", "r2", "r3"}  # data/model from the leader, updates back
    for t, robot, grant, holders in enq:
        assert grant > 0, f"{robot} fed a bulk packet at {t} ns without a permit"
        assert robot in holders and len(holders) <= 1
    assert _max_overlap(_episodes(enq)) == 1


@pytest.mark.parametrize("limit", [2, 3])
def test_limit_n_allows_n_senders_never_more(limit: int) -> None:
    result, enq = _run("test-spy-coorp-global", limit=limit, workers=3)
    assert len(result.epochs) >= 2
    for _, robot, grant, holders in enq:
        assert grant > 0 and robot in holders and len(holders) <= limit
    # The three workers send their updates at once: ``limit`` of them get permits
    # together (this also shows the overlap measurement sees concurrent senders).
    assert _max_overlap(_episodes(enq)) == limit


def test_permit_messages_travel_as_permit_flows() -> None:
    sc = crl_scenario(2, duration_s=1.2)
    result = run_crl(sc, "coorp")
    flows = {n: f for n, f in result.sim.flows.items() if n.startswith("permit:")}
    assert set(flows) == {"permit:r1->leader", "permit:leader->r1",
                          "permit:r2->leader", "permit:leader->r2"}  # fmt: skip
    for f in flows.values():
        assert f.category == "VO" and f.kind == "datagram"
        assert f.messages_sent > 0 and f.messages_delivered <= f.messages_sent
    # Every permit message is delivered, unless the run ended while it was on its way.
    msgs = result.sim.messages
    permit = np.array([str(n).startswith("permit:") for n in msgs["flow"]], dtype=bool)
    undelivered = permit & (msgs["latency_ns"] < 0)
    assert (msgs["created_ns"][undelivered] > result.duration_ns - 5 * NS_PER_MS).all()
    stats = result.policy_stats
    assert sum(f.messages_sent for f in flows.values()) == stats["permit_messages"]
    permits = stats["permits"]
    # Each worker request is answered; the leader's own requests need no message.
    assert permits["grants"] >= flows["permit:leader->r1"].messages_sent
    assert 0 <= permits["requests"] - permits["grants"] <= 3
    # coorp-local sends no permit message at all.
    local = run_crl(sc, "coorp-local")
    assert not any(n.startswith("permit:") for n in local.sim.flows)
