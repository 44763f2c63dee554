"""Hooks that hold a station's TCP acks (``AckGateHooks``): which acks they are asked
about, at which depth, how the acks that go are announced, what a held ack waits for,
and that hooks without the feature change nothing."""

from __future__ import annotations

from itertools import pairwise

import pytest

from coorp._errors import InvariantError
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import FOREVER, DriverView, SimResult, Simulation

MS = 1_000_000


def _scenario() -> Scenario:
    return parse_scenario({
        "duration_s": 0.03,
        "hw_queue": {"mode": "shared", "capacity_packets": 64},
        "stations": [{"name": "ap"}, {"name": "sta"}, {"name": "guest"}],
    })  # fmt: skip


class Hooks:
    """Admits all bulk data; holds acks until ``release_ns`` (then admits at most
    ``per_call`` of a run per call), recording every question."""

    def __init__(self, release_ns: int = 0, *, gates_acks: bool = True, per_call: int = 10**9,
                 resume: int | None = None) -> None:  # fmt: skip
        self.gates_acks = gates_acks
        self.release_ns = release_ns
        self.per_call = per_call
        self.resume = resume
        self.asked: list[tuple[int, int, int]] = []  # (now, count, depth)
        self.enqueued_acks = 0  # announced as acks (on_acks_enqueued)
        self.enqueued_other = 0  # announced as anything else (on_hw_enqueue)

    def admit_acks(
        self, station: DriverView, now_ns: int, count: int, depth: int
    ) -> tuple[int, int]:
        self.asked.append((now_ns, count, depth))
        if now_ns < self.release_ns:
            return 0, self.release_ns if self.resume is None else self.resume
        n = min(count, self.per_call)
        return n, (FOREVER if n < count else 0)

    def on_acks_enqueued(
        self, station: DriverView, pid: int, count: int, depth: int, now_ns: int
    ) -> None:
        self.enqueued_acks += count

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return None

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        pass

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.enqueued_other += 1

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        pass


def _run(hooks: Hooks | None, *, gated: bool = True) -> tuple[Simulation, SimResult]:
    sim = Simulation(_scenario(), trace=True)
    if hooks is not None:
        sim.set_hooks("sta", hooks)
    down = sim.flow("down", "ap", "sta", AccessCategory.BE, bulk=True, tcp_acks=True)
    sim.start_transfer(down, None, gated=gated)
    return sim, sim.run()


def _sta_frames(r: SimResult) -> list[int]:
    """Start times of the exchanges the station transmitted (its acks: it sends nothing
    else)."""
    assert r.trace is not None
    return [int(t[0]) for t in r.trace if "sta" in t[3]]  # type: ignore[operator]


def test_held_acks_join_the_ring_only_when_released() -> None:
    release = 10 * MS
    hooks = Hooks(release)
    _, r = _run(hooks)
    sent = _sta_frames(r)
    assert sent and min(sent) >= release  # not one ack on the air before the release
    # Asked at the first delivery already, held until the release, then every ack run
    # admitted whole; nothing was lost: every ack the flow made reached the ring.
    assert hooks.asked[0][0] < release
    assert any(now >= release for now, _, _ in hooks.asked)
    acks = r.flows["down:ack"]
    assert hooks.enqueued_acks == acks.sent_packets > 0
    assert hooks.enqueued_other == 0  # acks are announced as acks, never as data
    assert acks.delivered_packets > 0
    # Questions before the release came at the station's refills or its timer only:
    # each was about the whole queue head, behind an empty ring (it holds nothing else).
    assert all(depth == 0 for now, _, depth in hooks.asked if now < release)


class RunAcks(Hooks):
    """As :class:`Hooks`, promising no per-packet calls: a delivery's acks come as one
    run, and the ack hook is asked about runs."""

    per_packet = False


def test_a_prefix_goes_and_the_rest_waits_at_the_head_of_its_queue() -> None:
    hooks = RunAcks(0, per_call=1)  # one ack per question
    _, r = _run(hooks)
    asked = hooks.asked
    assert max(count for _, count, _ in asked) > 1  # runs of acks
    # What stayed is asked about next, one ack shorter: the admitted ack left the head.
    followed = [(a, b) for a, b in pairwise(asked) if a[1] > 1]
    assert followed and all(b[1] == a[1] - 1 for a, b in followed)
    # Nothing was admitted beyond what the hooks allowed: one ack per question.
    acks = r.flows["down:ack"]
    assert 0 < acks.delivered_packets + acks.dropped_packets <= len(asked)


def test_without_the_attribute_the_hooks_are_never_asked_and_nothing_changes() -> None:
    off = Hooks(30 * MS, gates_acks=False)  # would hold every ack if asked
    _, r_off = _run(off)
    assert off.asked == [] and off.enqueued_acks == 0 and off.enqueued_other > 0
    _, r_plain = _run(None)
    assert _sta_frames(r_off) == _sta_frames(r_plain)
    assert r_off.flows["down"].delivered_bytes == r_plain.flows["down"].delivered_bytes


def test_acks_of_traffic_outside_the_team_are_never_asked_about() -> None:
    hooks = Hooks(30 * MS)
    _, r = _run(hooks, gated=False)
    assert hooks.asked == []
    assert r.flows["down:ack"].delivered_packets > 0


def test_a_resume_time_not_in_the_future_is_a_bug_of_the_hooks() -> None:
    hooks = Hooks(30 * MS, resume=0)
    with pytest.raises(InvariantError, match=r"Hooks\.admit_acks held acks"):
        _run(hooks)
