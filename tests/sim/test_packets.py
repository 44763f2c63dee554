"""Packets and rings: ``Ring.head`` is the ring's first run after every operation the
simulator uses (the access scan reads it where it read ``ring[0]``), checked by random
operation sequences against a plain deque; ``message_columns`` numbers flows and reads each
message's fields."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import Simulation
from coorp.sim.packets import FlowState, Packet, Ring

_SC = parse_scenario({
    "duration_s": 0.01, "links": {"mode": "fixed", "mcs": 7},
    "stations": [{"name": "ap"}, {"name": "r1"}], "flows": [],
})  # fmt: skip
_SIM = Simulation(_SC, seed=1)
_FLOW = FlowState("f", _SIM.stations["r1"], _SIM.stations["ap"], AccessCategory.BE, False)

_NAMES = ["append", "appendleft", "popleft", "insert", "remove", "clear", "extend", "extendleft"]
_OPS = st.lists(st.tuples(st.sampled_from(_NAMES), st.integers(0, 6)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_head_is_the_first_run_after_every_operation(ops: list[tuple[str, int]]) -> None:
    ring, ref = Ring(), deque[Packet]()
    pid = 0

    def new() -> Packet:
        nonlocal pid
        pid += 1
        return Packet(pid, _FLOW, 100)

    for op, k in ops:
        if op == "append":
            p = new()
            ring.append(p)
            ref.append(p)
        elif op == "appendleft":
            p = new()
            ring.appendleft(p)
            ref.appendleft(p)
        elif op == "popleft":
            if ref:
                assert ring.popleft() is ref.popleft()
        elif op == "insert":
            p = new()
            ring.insert(k, p)
            ref.insert(k, p)
        elif op == "remove":
            if ref:
                victim = ref[k % len(ref)]
                ring.remove(victim)
                ref.remove(victim)
        elif op == "clear":
            ring.clear()
            ref.clear()
        else:
            ps = [new() for _ in range(k)]
            getattr(ring, op)(ps)
            getattr(ref, op)(ps)
        assert list(ring) == list(ref)
        assert ring.head is (ref[0] if ref else None)
        assert bool(ring) == bool(ref)
        if ref:
            assert ring.first() is ref[0]


def test_message_columns_number_flows_in_order_of_first_appearance() -> None:
    """``message_columns``: the grouping ``SimResult.collect`` sorts by (each flow's
    name, numbered at its first message) and every message's fields in order."""
    from coorp.sim.packets import Message, message_columns

    other = FlowState("g", _SIM.stations["ap"], _SIM.stations["r1"], AccessCategory.VO, False)
    flows = [_FLOW, other, _FLOW, _FLOW, other]
    msgs = [Message(i, f, 100 + i, 10 * i, 1, None) for i, f in enumerate(flows)]
    msgs[1].delivered_ns, msgs[1].first_depth = 42, 3
    msgs[3].lost = True
    names, codes, ids, sizes, created, delivered, lost, depth = message_columns(msgs)
    assert (names, codes) == (["f", "g"], [0, 1, 0, 0, 1])
    assert ids == [0, 1, 2, 3, 4]
    assert sizes == [100, 101, 102, 103, 104]
    assert created == [0, 10, 20, 30, 40]
    assert delivered == [-1, 42, -1, -1, -1]
    assert lost == [0, 0, 0, 1, 0]
    assert depth == [-1, 3, -1, -1, -1]
    assert message_columns([]) == ([], [], [], [], [], [], [], [])
