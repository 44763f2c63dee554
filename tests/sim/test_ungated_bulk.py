"""Ungated bulk transfers (``BulkTransfer.gated = False``): traffic the station's hooks do
not coordinate never asks them and is never held by their pauses; gated and ungated
transfers share the NIC ring in turns."""

from __future__ import annotations

from typing import Any

from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import FOREVER, DriverView, Simulation

MS = 1_000_000


def _scenario() -> Scenario:
    return parse_scenario({
        "duration_s": 0.05,
        "hw_queue": {"mode": "shared", "capacity_packets": 32},
        "stations": [{"name": "ap"}, {"name": "sta"}, {"name": "guest"}],
    })  # fmt: skip


class Hooks:
    """Admission by a callable; counts admission calls (every packet is announced)."""

    def __init__(self, admit: Any = None) -> None:
        self.admit = admit
        self.admits = 0
        self.enqueued = 0

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        self.admits += 1
        return None if self.admit is None else self.admit(station, now_ns)

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        pass

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.enqueued += 1

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        pass


def _run(hooks: Hooks | None, *, team_gated: bool = True, other_gated: bool = False,
         team: bool = True) -> tuple[Simulation, Any]:  # fmt: skip
    sim = Simulation(_scenario())
    if hooks is not None:
        sim.set_hooks("sta", hooks)
    if team:
        f = sim.flow("team", "sta", "ap", AccessCategory.BE, bulk=True, tcp_acks=False)
        sim.start_transfer(f, None, gated=team_gated)
    g = sim.flow("other", "sta", "guest", AccessCategory.BE, bulk=True, tcp_acks=False)
    sim.start_transfer(g, None, gated=other_gated)
    return sim, sim.run()


def test_a_pause_holds_only_the_gated_transfer() -> None:
    hooks = Hooks(lambda st, now: FOREVER)  # the policy never admits anything
    _, r = _run(hooks)
    assert r.flows["team"].delivered_bytes == 0
    assert r.flows["other"].delivered_bytes > 1_000_000
    # Asked once, for the gated transfer; the ungated packets were never announced.
    assert hooks.admits == 1 and hooks.enqueued == 0


def test_without_gated_data_the_hooks_are_never_asked() -> None:
    hooks = Hooks(lambda st, now: FOREVER)
    _, r = _run(hooks, team=False)
    assert hooks.admits == 0 and r.flows["other"].delivered_bytes > 1_000_000


def test_gated_and_ungated_share_the_ring_in_turns() -> None:
    hooks = Hooks()  # admits everything
    _, r = _run(hooks)
    team, other = r.flows["team"].delivered_bytes, r.flows["other"].delivered_bytes
    assert team > 0 and other > 0
    assert 0.3 < team / (team + other) < 0.7
    assert hooks.enqueued == r.flows["team"].sent_packets  # only gated packets announced


def test_without_hooks_the_flag_changes_nothing() -> None:
    # A station without hooks admits everything: one queue, bit for bit as if gated.
    _, a = _run(None, other_gated=False)
    _, b = _run(None, other_gated=True)
    assert a.flows == b.flows and a.channel == b.channel


def test_an_ungated_transfer_whose_packets_drop_is_resent_ungated() -> None:
    sim = Simulation(parse_scenario({
        "duration_s": 0.05, "mac": {"retry_limit": 0},
        "links": {"mode": "distance", "packet_errors": True},
        "stations": [{"name": "ap"}, {"name": "sta", "position_m": [40.0, 0.0]}],
    }))  # fmt: skip
    hooks = Hooks(lambda st, now: FOREVER)
    sim.set_hooks("sta", hooks)
    g = sim.flow("other", "sta", "ap", AccessCategory.BE, bulk=True, tcp_acks=False)
    sim.start_transfer(g, 300_000, gated=False)
    r = sim.run()
    assert r.flows["other"].retransmitted_packets > 0
    assert r.flows["other"].delivered_bytes == 300_000 and hooks.admits == 0
