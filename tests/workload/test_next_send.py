"""MpcLoop.next_send_ns: the exact instant of a robot's next LS send, or a lower bound.

Queries at many instants of a short congested run (saturating bulk uplinks behind a
shared NIC ring, so loops overrun and lag) are checked against the sends that
actually happened: an answer flagged exact is the next send's instant, any other
answer is never later than it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

import pytest

from coorp.scenario import Scenario
from coorp.sim import Simulation
from coorp.workload import MpcLoop
from crl_scenarios import crl_scenario

WORKERS = 4
QUERY_STEP_NS = 211_111  # not a divisor of anything in the loop: queries fall everywhere


def congested(seed: int, bulk_senders: int, phase: str = "aligned") -> Scenario:
    flows = [
        {"kind": "bulk", "name": f"up{i}", "src": f"r{i}", "dst": "leader"}
        for i in range(1, bulk_senders + 1)
    ]
    return crl_scenario(
        WORKERS,
        duration_s=0.6,
        seed=seed,
        flows=flows,
        workload={"drlc": {"enabled": False}, "mpc": {"jitter_us": 2_000.0, "phase": phase}},
    )


@pytest.mark.parametrize(
    ("seed", "bulk_senders", "phase"),
    [(1, 1, "aligned"), (2, 2, "aligned"), (3, 2, "aligned"), (4, 4, "aligned"),
     (1, 1, "random"), (2, 2, "random"), (3, 4, "random")],
)  # fmt: skip
def test_next_send_is_exact_when_determined_and_a_lower_bound_otherwise(
    seed: int, bulk_senders: int, phase: str
) -> None:
    sc = congested(seed, bulk_senders, phase)
    sim = Simulation(sc)
    workers = tuple(sc.workers)
    loop = MpcLoop(sim, sc.workload.mpc, "leader", workers)
    robots = ("leader", *workers)
    answers: list[tuple[str, int, int, bool]] = []
    assert loop.next_send_ns("leader", 0) is None  # before begin()

    def query() -> None:
        now = sim.now_ns
        for r in robots:
            nxt = loop.next_send(r, now)
            assert nxt is not None
            assert nxt[0] >= now
            assert loop.next_send_ns(r, now) == nxt[0]
            answers.append((r, now, *nxt))
        sim.call_at(now + QUERY_STEP_NS, query)

    loop.begin()
    sim.call_at(1, query)
    horizon = round(sc.duration_s * 1e9)
    sim.run(horizon)
    assert loop.next_send_ns("nobody", sim.now_ns) is None

    sends: dict[str, list[int]] = defaultdict(list)
    for m in sim.messages:
        name = m.flow.name
        if name.startswith("perception:"):
            sends[name.split(":", 1)[1]].append(m.created_ns)
        elif name.startswith("control:"):
            sends["leader"].append(m.created_ns)
    for v in sends.values():
        v.sort()

    exact = lower = 0
    for r, q, value, is_exact in answers:
        i = bisect.bisect_left(sends[r], q)
        if i == len(sends[r]):
            continue  # the next send lies beyond the horizon
        actual = sends[r][i]
        if is_exact:
            assert value == actual, (r, q, value, actual)
            exact += 1
        else:
            assert value <= actual, (r, q, value, actual)
            lower += 1
    # Both kinds of answer occur; with two or more bulk senders the loop lagged (a
    # worker's next loop start then depended on the current loop's end).
    assert exact > 0 and lower > 0
    if phase == "aligned":
        assert bulk_senders < 2 or any(rec.lag_ns > 0 for rec in loop.records)


@pytest.mark.parametrize(
    ("seed", "bulk_senders", "phase"),
    [(1, 2, "aligned"), (4, 4, "aligned"), (2, 2, "random"), (3, 4, "random")],
)
def test_the_leaders_full_word_on_its_controls_is_true(
    seed: int, bulk_senders: int, phase: str
) -> None:
    # MpcLoop.lead_hints: an exact instant is when that flow's next control goes out (or
    # none does: its loop was abandoned); a moving bound never stands when a control
    # goes out, and the word that replaced it came at least min_lead before that send.
    sc = congested(seed, bulk_senders, phase)
    sim = Simulation(sc)
    loop = MpcLoop(sim, sc.workload.mpc, "leader", tuple(sc.workers))
    hints: dict[str, list[tuple[int, int, bool, int]]] = defaultdict(list)

    def expect(robot: str, flow: str, at: int, *, exact: bool = False,
               min_lead_ns: int = 0) -> None:  # fmt: skip
        assert robot == "leader" and at >= sim.now_ns
        hints[flow].append((sim.now_ns, at, exact, min_lead_ns))

    loop.on_expect, loop.lead_hints = expect, True
    loop.begin()
    sim.run(round(sc.duration_s * 1e9))
    sends: dict[str, list[int]] = defaultdict(list)
    for m in sim.messages:
        if m.flow.name.startswith("control:"):
            sends[m.flow.name].append(m.created_ns)
    checked = {"exact": 0, "moving": 0}
    for flow, said in hints.items():
        out = sorted(sends[flow])
        for i, (t, at, exact, lead) in enumerate(said):
            j = bisect.bisect_right(out, t)
            if j == len(out):
                continue  # no send after it in the run
            send = out[j]
            replaced = said[i + 1][0] if i + 1 < len(said) else None
            if exact:
                if at != send:  # only an abandoned loop's instant passes without a send
                    assert send > at, (flow, t, at, send)
                else:
                    checked["exact"] += 1
            elif lead:
                assert replaced is not None and replaced <= send, (flow, t, send)
                assert send >= replaced + lead, (flow, t, replaced, send)
                checked["moving"] += 1
    assert checked["exact"] > 10 and checked["moving"] > 10
