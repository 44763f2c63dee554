"""Airtime budgets (``AirtimeBudgetHooks``) and the best-case ring drain model.

Common PHY (as in ``test_mac_trace``): 20 MHz, 1 stream, VHT MCS 7, long GI, control
frames at 24 Mb/s; ``cw_min = cw_max = 0`` so every backoff draw is 0 and every instant
follows from the standard's timing. A full 1500-byte packet is an MPDU of 1538 bytes;
an A-MPDU of n of them has a PSDU of ``1544·(n − 1) + 1542`` bytes and lasts
``40 + 4·ceil((8·PSDU + 22) / 260)`` µs, followed by SIFS (16) + BlockAck (32).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from coorp import InvariantError
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import AdmitAll, DriverView, SimResult, Simulation

US = 1_000
SIFS, ACK, BA = 16, 28, 32
AIFS_BE = 43


def data_us(psdu: int) -> int:
    return 40 + 4 * math.ceil((8 * psdu + 22) / 260)


def ampdu_psdu(n: int) -> int:
    return 1544 * (n - 1) + 1542


def _scenario(
    flows: list[dict[str, Any]], mode: str = "per_ac", cap: int = 64, **edca: Any
) -> Scenario:
    cfg = {ac: {"cw_min": 0, "cw_max": 0} for ac in ("VO", "VI", "BE", "BK")}
    for ac, over in edca.items():
        cfg[ac].update(over)
    return parse_scenario({
        "duration_s": 0.05,
        "phy": {"width_mhz": 20, "spatial_streams": 1, "guard_interval": "long"},
        "links": {"mode": "fixed", "mcs": 7},
        "mac": {"edca": cfg},
        "hw_queue": {"mode": mode, "capacity_packets": cap},
        "stations": [{"name": "ap"}, {"name": "sta"}],
        "flows": flows,
    })  # fmt: skip


BULK = {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap", "tcp_acks": False}


class Budget(AdmitAll):
    """Admit everything (batched); the airtime budget comes from a callable."""

    def __init__(self, budget: Any) -> None:
        self.budget = budget
        self.asked: list[int] = []

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        self.asked.append(now_ns)
        return self.budget(now_ns)  # type: ignore[no-any-return]


def _run(sc: Scenario, hooks: Any = None, seed: int = 1) -> tuple[Simulation, SimResult]:
    sim = Simulation(sc, seed=seed, trace=True)
    if hooks is not None:
        sim.set_hooks("sta", hooks)
    return sim, sim.run()


def test_each_ampdu_is_trimmed_to_the_budget() -> None:
    # A 1 ms budget leaves 1000 - 48 = 952 µs for the PPDU: 4 MPDUs (PSDU 6174 B, 804
    # µs) fit, 5 (7718 B, 992 µs) do not. Without a budget the 5.484 ms PPDU limit binds.
    assert data_us(ampdu_psdu(4)) + SIFS + BA <= 1000 < data_us(ampdu_psdu(5)) + SIFS + BA
    _, plain = _run(_scenario([BULK]))
    hooks = Budget(lambda now: 1_000 * US)
    _, r = _run(_scenario([BULK]), hooks)
    assert plain.trace is not None and r.trace is not None
    assert {e[5] for e in plain.trace} == {(28,)}  # 28 MPDUs: 5.484 ms PPDU limit
    assert {e[5] for e in r.trace} == {(4,)}
    ex = data_us(ampdu_psdu(4)) + SIFS + BA
    assert ex == 852
    starts = [int(e[0]) // US for e in r.trace[:3]]
    assert starts == [AIFS_BE, 2 * AIFS_BE + ex, 3 * AIFS_BE + 2 * ex]
    assert all(e[1] - e[0] <= 1_000 * US for e in r.trace)
    assert hooks.asked[:3] == [s * US for s in starts]  # asked at every access


def test_a_frame_that_does_not_fit_is_held_until_after_the_budget() -> None:
    # Bulk arrives at 1.9 ms on a medium idle since 0: access at once, with 100 µs left
    # before the budget ends at 2 ms; one MPDU needs 232 + 16 + 28 = 276 µs. The frame is
    # held, comes back at 2 ms + 1 ns and (medium idle, counter 0) goes out at once.
    deadline = 2_000 * US

    def budget(now: int) -> int | None:
        return deadline - now if now <= deadline else None

    hooks = Budget(budget)
    sim, r = _run(_scenario([{**BULK, "total_bytes": 3000, "start_us": 1_900}]), hooks)
    assert r.trace is not None
    assert hooks.asked == [1_900 * US, deadline + 1]
    assert r.trace[0][0] == deadline + 1
    assert r.trace[0][5] == (2,)
    assert sim.station("sta").bulk_holds == 1
    assert r.stations["sta"].tx_attempts == 1 and r.channel.internal_collisions == 0


def test_a_held_frame_leaves_the_medium_to_the_others() -> None:
    # The station holds its bulk frame (budget 0 until 3 ms); the AP's bulk frame to it
    # is not held back: the medium is the AP's while ``sta`` holds.
    flows = [{**BULK, "total_bytes": 30_000},
             {"kind": "bulk", "name": "down", "src": "ap", "dst": "sta", "tcp_acks": False,
              "total_bytes": 30_000}]  # fmt: skip
    hooks = Budget(lambda now: 0 if now < 3_000 * US else None)
    sim, r = _run(_scenario(flows), hooks)
    assert r.trace is not None
    sta = [e for e in r.trace if "sta" in e[3]]
    assert sta and min(e[0] for e in sta) > 3_000 * US
    assert any(e[3] == ("ap",) and e[0] < 3_000 * US for e in r.trace)
    assert sim.station("sta").bulk_holds >= 1
    assert r.flows["bh"].delivered_bytes == r.flows["down"].delivered_bytes == 30_000


def _digest(r: SimResult) -> str:
    s = r.summary()
    for k in ("wall_s", "sim_s_per_wall_s", "events_processed"):
        s.pop(k, None)
    return json.dumps(
        [s, r.trace, r.messages["delivered_ns"].tolist()], sort_keys=True, default=str
    )


def _busy_scenario(mode: str) -> Scenario:
    """Three contending stations, LS datagrams, TCP acks, default CWs: collisions."""
    return parse_scenario({
        "duration_s": 0.3,
        "hw_queue": {"mode": mode, "capacity_packets": 64},
        "stations": [{"name": "ap"}, {"name": "sta"}, {"name": "s2"}],
        "flows": [
            {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap"},
            {"kind": "bulk", "name": "b2", "src": "s2", "dst": "ap"},
            {"kind": "bulk", "name": "down", "src": "ap", "dst": "sta", "total_bytes": 900_000},
            {"kind": "datagram", "name": "ls", "src": "sta", "dst": "ap",
             "size_bytes": 12288, "period_us": 33333.3, "jitter_us": 500},
        ],
    })  # fmt: skip


@pytest.mark.parametrize("mode", ["per_ac", "shared"])
def test_no_limit_or_a_budget_that_never_binds_changes_nothing(mode: str) -> None:
    sc = _busy_scenario(mode)
    _, plain = _run(sc)
    _, none = _run(sc, Budget(lambda now: None))
    _, loose = _run(sc, Budget(lambda now: 10**9))  # longer than any exchange
    assert plain.channel.collisions > 0
    assert _digest(none) == _digest(plain)
    assert _digest(loose) == _digest(plain)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_an_invalid_budget_is_an_invariant_error(bad: object) -> None:
    with pytest.raises(InvariantError, match="max_bulk_airtime_ns on 'sta' returned"):
        _run(_scenario([{**BULK, "total_bytes": 3000}]), Budget(lambda now: bad))


class QuietUntil(Budget):
    """A budget, and a hold that lasts until ``until`` (``bulk_hold_until_ns``)."""

    def __init__(self, budget: Any, until: Any) -> None:
        super().__init__(budget)
        self.until = until
        self.holds: list[int] = []

    def bulk_hold_until_ns(self, station: DriverView, now_ns: int) -> int | None:
        self.holds.append(now_ns)
        return self.until(now_ns)  # type: ignore[no-any-return]


def test_a_hold_lasts_until_the_hooks_say() -> None:
    # Quiet from 1 ms to 3 ms (a service period): budget 0 inside, held until 3 ms + 1 ns
    # in one hold; before 1 ms, the time left before the quiet period starts.
    start, end = 1_000 * US, 3_000 * US

    def budget(now: int) -> int | None:
        return 0 if start <= now < end else (start - now if now < start else None)

    hooks = QuietUntil(budget, lambda now: end + 1 if start <= now < end else None)
    sim, r = _run(_scenario([{**BULK, "total_bytes": 3000, "start_us": 1_500}]), hooks)
    assert r.trace is not None
    assert hooks.asked == [1_500 * US, end + 1]
    assert hooks.holds == [1_500 * US]  # asked only when a frame is held
    assert r.trace[0][0] == end + 1
    assert sim.station("sta").bulk_holds == 1


def test_a_hold_until_earlier_than_the_budget_changes_nothing() -> None:
    # The hooks' answer only extends a hold: an earlier time (or None) keeps now + b + 1.
    deadline = 2_000 * US

    def budget(now: int) -> int | None:
        return deadline - now if now <= deadline else None

    early = QuietUntil(budget, lambda now: now + 1)
    _, r = _run(_scenario([{**BULK, "total_bytes": 3000, "start_us": 1_900}]), early)
    assert r.trace is not None and r.trace[0][0] == deadline + 1


@pytest.mark.parametrize("bad", [1.5, True, "soon"])
def test_an_invalid_hold_end_is_an_invariant_error(bad: object) -> None:
    hooks = QuietUntil(lambda now: 0 if now < 3_000 * US else None, lambda now: bad)
    with pytest.raises(InvariantError, match="bulk_hold_until_ns on 'sta' returned"):
        _run(_scenario([{**BULK, "total_bytes": 3000}]), hooks)


class Recorder(AdmitAll):
    """Per-packet observer: when the last packet left the ring."""

    per_packet = True

    def __init__(self) -> None:
        self.done: list[int] = []

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self.done.append(now_ns)


@pytest.mark.parametrize("mode", ["per_ac", "shared"])
@pytest.mark.parametrize("at_us", [0, 500])  # ring just filled; an exchange on the air
def test_ring_drain_is_exact_without_contention(mode: str, at_us: int) -> None:
    # A VO message (TXOP off: every exchange after AIFS, as the model assumes) and bulk
    # data in the rings (the message first, so that its 9 fragments find room in a
    # shared ring); the driver stops feeding bulk at ``at_us``. With no contention the
    # model's end is the instant the last packet leaves the rings.
    flows = [{"kind": "datagram", "name": "ls", "src": "sta", "dst": "ap",
              "size_bytes": 12288, "times_us": [0.0], "category": "VO"},
             {**BULK, "total_bytes": 300_000}]  # fmt: skip
    sc = _scenario(flows, mode=mode, cap=128, VO={"txop_limit_us": 0})
    sim = Simulation(sc, trace=True)
    rec = Recorder()
    sim.set_hooks("sta", rec)
    st = sim.station("sta")
    predicted: list[int] = []

    def freeze() -> None:
        st.pause_bulk(None)
        predicted.append(sim.channel.ring_drain(st, sim.now_ns, AccessCategory.BE).end_ns())

    sim.call_at(at_us * US, freeze)
    sim.run()
    assert sim.channel.busy is False and not any(st.rings.values())
    assert predicted == [rec.done[-1]]
    assert predicted[0] > at_us * US


def test_ring_drain_extends_by_the_next_packet_as_the_mac_aggregates() -> None:
    # An empty ring: the model with k packets added is one A-MPDU of k MPDUs after AIFS.
    sim = Simulation(_scenario([{**BULK, "start_us": 1_000}]))
    st = sim.station("sta")
    ends: list[int] = []

    def probe() -> None:
        d = sim.channel.ring_drain(st, sim.now_ns, AccessCategory.BE)
        assert d.end_ns() == sim.now_ns
        pkt = st.next_bulk_packet()
        assert pkt is None
        st.pause_bulk(None)

    sim.call_control_at(500 * US, probe)
    sim.call_at(1_000 * US, lambda: ends.append(_model_ends(sim, st)))
    sim.run(2_000 * US)
    assert ends == [[1_000 * US + (AIFS_BE + data_us(ampdu_psdu(k)) + SIFS + BA) * US
                     if k > 1 else 1_000 * US + (AIFS_BE + data_us(1542) + SIFS + ACK) * US
                     for k in (1, 2, 3)]]  # fmt: skip


def _model_ends(sim: Simulation, st: Any) -> list[int]:
    d = sim.channel.ring_drain(st, sim.now_ns, AccessCategory.BE)
    pkt = st.next_bulk_packet()
    assert pkt is not None and pkt.ip_bytes == 1500
    out = []
    for _ in range(3):
        d.add(pkt)
        out.append(d.end_ns())
    return out
