"""Run-level driver hooks (``coorp.sim.RunHooks``) are the per-packet hooks, batched.

The same per-packet hooks run twice on every station: once called packet by packet,
once behind an adapter that declares ``per_run`` and turns each run call back into the
per-packet calls it stands for. The driver must make each station's hooks the same calls,
with the same arguments, in the same order, and the simulation must come out
bit-identical: the run path changes how often the hook boundary is crossed, nothing else.
(Only the interleaving of different stations' calls may differ: one station's batch of
completions is reported before the acknowledgements they trigger reach another station,
which shares no state with it.) The scenarios push
the cases where a batch could differ: admission that depends on the ring depth and
stops part-way through a run, packet errors and drops (retried and re-sent bytes),
finite transfers completing inside an exchange, TCP acknowledgements to stations whose
own bulk data is gated, shared and per-AC rings.
"""

from __future__ import annotations

from typing import Any

import pytest

from coorp.scenario import AccessCategory, parse_scenario
from coorp.sim import FOREVER, DriverView, Simulation
from golden_digest import digest


class _Recorder:
    """Per-packet hooks: admits by ring depth and time (stopping part-way through
    runs), records every call with what it saw."""

    def __init__(self, log: list[tuple[Any, ...]], period_ns: int, cap: int) -> None:
        self.log = log
        self.period = period_ns
        self.cap = cap

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        depth = station.hw_queue_length()
        self.log.append(("admit", station.name, now_ns, depth, station.bulk_backlog))
        phase = now_ns % self.period
        if phase < self.period // 5:
            return now_ns - phase + self.period // 5
        limit = self.cap if phase < self.period // 2 else self.cap // 3
        if depth >= limit:
            return FOREVER if depth % 2 else now_ns + 150_000
        return None

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        self.log.append(("ls", station.name, flow, now_ns))
        station.resume_bulk()

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.log.append(("enq", station.name, pid, ac.value, depth, now_ns))

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self.log.append(("done", station.name, pid, ac.value, now_ns, delivered))
        if not delivered or pid % 7 == 0:
            station.pause_bulk(now_ns)  # resume through the driver's timer


class _AtDepth:
    """The station as per-packet hooks see it just before packet ``i`` of a run: the
    ring holds ``depth`` packets."""

    def __init__(self, station: DriverView, depth: int) -> None:
        self._station = station
        self.name = station.name
        self._depth = depth

    def hw_queue_length(self) -> int:
        return self._depth

    def pause_bulk(self, until_ns: int | None) -> None:
        self._station.pause_bulk(until_ns)

    def resume_bulk(self) -> None:
        self._station.resume_bulk()

    @property
    def bulk_backlog(self) -> bool:
        return self._station.bulk_backlog


class _Runs:
    """The per-packet hooks behind the run interface: each run call is the per-packet
    calls it stands for."""

    per_run = True

    def __init__(self, inner: _Recorder, calls: list[str]) -> None:
        self.inner = inner
        self.calls = calls

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return self.inner.admit_bulk(station, now_ns)

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

    def admit_bulk_run(
        self, station: DriverView, now_ns: int, pid: int, count: int, ac: AccessCategory,
        depth: int,
    ) -> tuple[int, int]:  # fmt: skip
        self.calls.append("admit_bulk_run")
        for i in range(count):
            resume = self.inner.admit_bulk(_AtDepth(station, depth + i), now_ns)
            if resume is not None:
                return i, resume
            self.inner.on_hw_enqueue(station, pid + i, ac, depth + i, now_ns)
        return count, 0

    def on_hw_enqueue_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, depth: int,
        now_ns: int,
    ) -> None:  # fmt: skip
        self.calls.append("on_hw_enqueue_run")
        for i in range(count):
            self.inner.on_hw_enqueue(station, pid + i, ac, depth + i, now_ns)

    def on_hw_complete_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, now_ns: int,
        delivered: bool,
    ) -> None:  # fmt: skip
        self.calls.append("on_hw_complete_run")
        for q in range(pid, pid + count):
            self.inner.on_hw_complete(station, q, ac, now_ns, delivered)


def _stations(n: int, spacing: float) -> list[dict[str, Any]]:
    return [{"name": "ap", "position_m": [0.0, 0.0]}] + [
        {"name": f"s{i}", "position_m": [spacing * (i + 1), 0.0]} for i in range(n)
    ]


def _flows() -> list[dict[str, Any]]:
    return [
        {"kind": "bulk", "name": "up0", "src": "s0", "dst": "ap"},
        {"kind": "bulk", "name": "up1", "src": "s1", "dst": "ap", "total_bytes": 2_345_678,
         "start_us": 3000},
        {"kind": "bulk", "name": "down", "src": "ap", "dst": "s2", "total_bytes": 3_000_000},
        {"kind": "bulk", "name": "side", "src": "s2", "dst": "s0", "total_bytes": 1_500_000,
         "start_us": 20_000},
        {"kind": "datagram", "name": "perc0", "src": "s0", "dst": "ap", "size_bytes": 12288,
         "period_us": 33333.3, "jitter_us": 500},
        {"kind": "datagram", "name": "ctl", "src": "ap", "dst": "s1", "size_bytes": 1000,
         "period_us": 20_000, "start_us": 9000},
    ]  # fmt: skip


SCENARIOS = {
    "shared": {"hw_queue": {"mode": "shared", "capacity_packets": 64}},
    "shared-errors-drops": {
        "hw_queue": {"mode": "shared", "capacity_packets": 48},
        "links": {"mode": "distance", "packet_errors": True},
        "mac": {"retry_limit": 2},
        "spacing": 11.0,
    },
    "per-ac-ns3-retries": {
        "hw_queue": {"mode": "per_ac", "capacity_packets": 40},
        "mac": {"retry_policy": "ns3", "retry_limit": 1},
    },
}


def _run(name: str, runs: bool) -> tuple[str, list[tuple[Any, ...]], list[str]]:
    cfg = dict(SCENARIOS[name])
    spacing = cfg.pop("spacing", 4.0)
    sc = parse_scenario({"name": name, "stations": _stations(3, spacing), "flows": _flows(), **cfg})
    sim = Simulation(sc, seed=5, trace=True)
    log: list[tuple[Any, ...]] = []
    calls: list[str] = []
    for i, st in enumerate(sim.stations):
        inner = _Recorder(log, period_ns=4_000_000 + 700_000 * i, cap=56 - 6 * i)
        sim.set_hooks(st, _Runs(inner, calls) if runs else inner)
    result = sim.run(300_000_000)
    return digest(result), log, calls


def _by_station(log: list[tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for entry in log:
        out.setdefault(entry[1], []).append(entry)
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_run_hooks_make_the_same_calls_and_the_same_simulation(name: str) -> None:
    one_by_one, log, calls = _run(name, runs=False)
    batched, run_log, run_calls = _run(name, runs=True)
    assert not calls and {"admit_bulk_run", "on_hw_complete_run"} <= set(run_calls)
    # The run calls stood for many packets each: far fewer crossings.
    packets = sum(1 for entry in run_log if entry[0] in ("enq", "done"))
    assert len(run_calls) < packets / 3
    assert _by_station(run_log) == _by_station(log)
    assert batched == one_by_one
    # The hooks really stopped runs part-way, denied and dropped.
    if name != "shared":
        assert any(e[0] == "done" and e[5] is False for e in log)
    depths = [e[3] for e in log if e[0] == "admit"]
    assert max(depths) > 10 and depths.count(0) > 10


def test_runs_are_declared_by_the_class_not_forwarded_by_a_wrapper() -> None:
    # A wrapper that intercepts per-packet calls and forwards everything else must get
    # the per-packet calls, not have its runs sent past it to the hooks it wraps.
    class Forwarding:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    sc = parse_scenario({"name": "tiny", "stations": _stations(1, 3.0), "flows": []})
    sim = Simulation(sc, seed=1)
    runs = _Runs(_Recorder([], 1_000_000, 10), [])
    sim.set_hooks("s0", runs)
    assert sim.station("s0").run_hooks is runs
    sim.set_hooks("s0", Forwarding(runs))  # type: ignore[arg-type]
    assert sim.station("s0").run_hooks is None and sim.station("s0").per_packet
