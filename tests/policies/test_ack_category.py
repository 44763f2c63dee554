"""``CoorpPolicy.ack_ac``: the access category of the TCP acks each robot sends for the
team's bulk data (docs/control.md, "The acks' access category"). ``coorp`` sends them in
AC_VI and nowhere else; the acks of traffic outside the team keep AC_BE, and so do the
team's acks of a robot that itself sends bulk data outside the team; with ``ack_ac =
None`` nothing goes in AC_VI at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from coorp.policies import CoorpPolicy
from coorp.scenario import AccessCategory, apply_overrides, load_scenario, resolve_scenario
from coorp.units import s
from coorp.workload import run_crl
from crl_scenarios import crl_scenario
from policy_registry import registered


class _Watched(CoorpPolicy):
    """coorp that keeps its simulation for the test to read afterwards."""

    name = "test-coorp-watched"
    summary = "coorp, its simulation kept"
    seen: ClassVar[list[Any]] = []

    def install(self) -> None:
        super().install()
        type(self).seen.append(self.team.sim)


class _BeAcks(_Watched):
    name = "test-coorp-be-acks"
    summary = "coorp with the team's acks in AC_BE, its simulation kept"
    ack_ac = None


@pytest.fixture(scope="module", autouse=True)
def policies() -> Iterator[None]:
    with registered(_Watched, _BeAcks):
        yield


def _acs_by_station(trace: list[tuple[Any, ...]]) -> dict[str, set[str]]:
    """Per station, the access categories it transmitted in (successful exchanges)."""
    out: dict[str, set[str]] = {}
    for _start, _end, collided, names, acs, *_ in trace:
        if not collided:
            for name, ac in zip(names, acs, strict=True):
                out.setdefault(name, set()).add(ac)
    return out


@pytest.mark.parametrize(("policy", "marked"), [(_Watched, True), (_BeAcks, False)])
def test_the_team_acks_go_in_the_category_asked_for(policy: type[_Watched], marked: bool) -> None:
    policy.seen = []
    result = run_crl(crl_scenario(2, duration_s=1.5), policy.name, trace=True)
    sim = policy.seen[-1]
    acks = [f.ack_flow for f in sim.flows.values() if f.bulk and f.ack_flow is not None]
    assert acks and sum(a.delivered_packets for a in acks) > 0  # the epoch's acks went out
    want = AccessCategory.VI if marked else AccessCategory.BE
    assert {a.ac for a in acks} == {want}
    # Nothing else in this team uses AC_VI: marked, every robot that received bulk data
    # sent in AC_VI; unmarked, nobody did.
    vi = {name for name, acs in _acs_by_station(result.sim.trace or []).items() if "VI" in acs}
    receivers = {a.src.name for a in acks if a.delivered_packets}
    assert vi == (receivers if marked else set())


def _acks_after(scenario: str, seconds: float) -> tuple[dict[str, set[AccessCategory]], set[Any]]:
    """coorp on a shipped scenario with epochs of 8 items: the categories of the team's
    delivered acks by the robot that sent them, and those of traffic outside the team."""
    sc = load_scenario(resolve_scenario(scenario))
    sc = apply_overrides(sc, [("workload.drlc.batch_items", 8)], source="<test>")
    _Watched.seen = []
    run_crl(sc, _Watched.name, seed=1, duration_ns=s(seconds), timeseries=False)
    team: dict[str, set[AccessCategory]] = {}
    outside: set[Any] = set()
    for f in _Watched.seen[-1].flows.values():
        ack = f.ack_flow
        if f.bulk and ack is not None and ack.delivered_packets:
            if ack.gate_acks:
                team.setdefault(ack.src.name, set()).add(ack.ac)
            else:
                outside.add(ack.ac)
    return team, outside


def test_acks_of_traffic_outside_the_team_keep_ac_be() -> None:
    # A guest uploads to the team's leader: the leader's acks for it are not the team's.
    team, outside = _acks_after("crl-5-guest-leader", 2.0)
    assert team and set().union(*team.values()) == {AccessCategory.VI}
    assert outside == {AccessCategory.BE}


def test_a_robot_that_sends_outside_the_team_keeps_its_team_acks_in_ac_be() -> None:
    # The leader serves a download to a laptop outside the team all run long: its acks
    # for the workers' uploads stay in AC_BE, the workers' acks of the leader's data go
    # in AC_VI.
    team, _ = _acks_after("crl-5-download", 3.0)
    assert team.get("leader") == {AccessCategory.BE}
    workers = {r: acs for r, acs in team.items() if r != "leader"}
    assert workers and set().union(*workers.values()) == {AccessCategory.VI}
