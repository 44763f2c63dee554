"""Golden equivalence: the simulator computes exactly what it computed before a refactor.

This is the one place in the test suite where a stored expected value is legitimate. The
digests in ``golden_digests.json`` were computed from the simulator *before* its
performance work (run-length packets, batched delivery, ...); they pin its behaviour
across that refactor: for a fixed scenario and seed, the exchange trace, every flow's
counters, every station's counters, the channel counters, the message table, the LS
hardware-queue depths and (for the hooks case) the exact sequence of driver-hook calls
must stay bit-identical. They say nothing about whether the behaviour is *right* (other
tests in ``tests/sim`` do that); they only say it did not change.

A digest may only be regenerated when a change is *meant* to alter results (e.g. a
modelling fix, or a different random-draw order), with the owner's agreement, and the
reason recorded in the commit message. When one did, the cases it changed also run
with the switch that restores the behaviour before (``name@consecutive``: A-MPDUs of
consecutive ring packets, ``mac.ampdu_grouping``, issue 36) against their digest from
before, so that the old behaviour stays reachable, bit for bit. Regenerate with::

    COORP_REGEN_GOLDEN=1 .venv/bin/pytest -q tests/sim/test_golden_equivalence.py

``events_processed`` and ``wall_s`` are implementation metrics and are not pinned. The
install (``make``, ``pip install``) compiles the simulator with mypyc when a C compiler
is present, so ``make test`` checks the digests with the compiled modules and, in a
subprocess, with the plain Python modules as well (skipped only where nothing is
compiled; ``coorp --version`` says why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coorp._accel import describe
from coorp.scenario import AccessCategory, Scenario, apply_overrides, parse_scenario
from coorp.sim import COMPILED, FOREVER, DriverView, SimResult, Simulation, simulate
from golden_digest import digest

GOLDEN = Path(__file__).with_name("golden_digests.json")
REGEN = os.environ.get("COORP_REGEN_GOLDEN") == "1"


def _scenario(name: str, **kw: Any) -> Any:
    return parse_scenario({"name": name, **kw})


def _stations(n: int, spacing: float = 0.0) -> list[dict[str, Any]]:
    return [{"name": "ap", "position_m": [0.0, 0.0]}] + [
        {"name": f"s{i}", "position_m": [spacing * (i + 1), 0.0]} for i in range(n)
    ]


# -- the scenarios ---------------------------------------------------------------------
def _per_ac_saturation() -> Any:
    """5 saturated uplinks, per-AC rings, A-MPDU, TCP acks: the default shape."""
    return _scenario(
        "per-ac-saturation",
        stations=_stations(5),
        flows=[{"kind": "bulk", "name": f"b{i}", "src": f"s{i}", "dst": "ap"} for i in range(5)],
    )


def _crowd_40() -> Any:
    """40 saturated uplinks: the large benchmark shape."""
    return _scenario(
        "crowd-40",
        stations=_stations(40),
        flows=[{"kind": "bulk", "name": f"b{i}", "src": f"s{i}", "dst": "ap"} for i in range(40)],
    )


def _shared_ring_ls() -> Any:
    """Shared ring: periodic jittered VO perceptions behind bulk data, control replies."""
    return _scenario(
        "shared-ring-ls",
        hw_queue={"mode": "shared", "capacity_packets": 64},
        stations=_stations(2, 5.0),
        flows=[
            {"kind": "bulk", "name": "b0", "src": "s0", "dst": "ap"},
            {"kind": "bulk", "name": "b1", "src": "s1", "dst": "ap", "start_us": 20_000},
            {"kind": "datagram", "name": "perc0", "src": "s0", "dst": "ap",
             "size_bytes": 12288, "period_us": 33333.3, "jitter_us": 500},
            {"kind": "datagram", "name": "perc1", "src": "s1", "dst": "ap",
             "size_bytes": 12288, "period_us": 33333.3, "jitter_us": 500, "start_us": 7000},
            {"kind": "datagram", "name": "ctl", "src": "ap", "dst": "s0", "size_bytes": 1000,
             "times_us": [40_000.0, 90_000.0, 91_000.0, 150_000.0]},
        ],
    )  # fmt: skip


def _rts_finite_vi() -> Any:
    """RTS/CTS for long PSDUs, finite transfers (with and without TCP acks), VI TXOPs."""
    return _scenario(
        "rts-finite-vi",
        mac={"rts_threshold_bytes": 4000, "max_ampdu_mpdus": 32},
        stations=_stations(4),
        flows=[
            {"kind": "bulk", "name": "f0", "src": "s0", "dst": "ap", "total_bytes": 3_000_000},
            {"kind": "bulk", "name": "f1", "src": "s1", "dst": "ap", "total_bytes": 1_234_567,
             "tcp_acks": False, "start_us": 5000},
            {"kind": "bulk", "name": "down", "src": "ap", "dst": "s2", "total_bytes": 2_000_000},
            {"kind": "bulk", "name": "vid", "src": "s3", "dst": "ap", "category": "VI"},
            {"kind": "datagram", "name": "vo", "src": "s2", "dst": "ap", "size_bytes": 6000,
             "period_us": 10_000},
        ],
    )  # fmt: skip


def _ns3_retry_crowd() -> Any:
    """10 contending stations, ns-3 BlockAckReq retry policy, low retry limit: drops."""
    return _scenario(
        "ns3-retry-crowd",
        mac={"retry_policy": "ns3", "retry_limit": 2,
             "edca": {"BE": {"cw_min": 7, "cw_max": 63}}},
        hw_queue={"mode": "per_ac", "capacity_packets": 48},
        stations=_stations(10),
        flows=[{"kind": "bulk", "name": f"b{i}", "src": f"s{i}", "dst": "ap"} for i in range(9)]
        + [{"kind": "bulk", "name": "b9", "src": "s9", "dst": "ap", "total_bytes": 900_000}]
        + [{"kind": "datagram", "name": "vo3", "src": "s3", "dst": "ap", "size_bytes": 3000,
            "period_us": 5000, "jitter_us": 300}],
    )  # fmt: skip


def _packet_errors_distance() -> Any:
    """Distance-based MCS with packet errors: partial A-MPDU failures, requeues."""
    return _scenario(
        "packet-errors-distance",
        links={"mode": "distance", "packet_errors": True},
        mac={"retry_limit": 3},
        stations=[
            {"name": "ap", "position_m": [0.0, 0.0]},
            {"name": "near", "position_m": [5.0, 0.0]},
            {"name": "mid", "position_m": [12.0, 0.0]},
            {"name": "far", "position_m": [25.0, 13.2]},
            {"name": "edge", "position_m": [43.0, 0.0]},
        ],
        flows=[
            {"kind": "bulk", "name": "near-up", "src": "near", "dst": "ap"},
            {"kind": "bulk", "name": "mid-up", "src": "mid", "dst": "ap",
             "total_bytes": 2_500_000},
            {"kind": "bulk", "name": "far-up", "src": "far", "dst": "ap",
             "total_bytes": 3_000_000},
            {"kind": "bulk", "name": "edge-down", "src": "ap", "dst": "edge"},
            {"kind": "datagram", "name": "edge-vo", "src": "edge", "dst": "ap",
             "size_bytes": 12288, "period_us": 20_000},
        ],
    )  # fmt: skip


def _no_aggregation_shared() -> Any:
    """Aggregation off for BE, shared ring, datagrams in BE/VI/VO, many small MPDUs."""
    return _scenario(
        "no-aggregation-shared",
        packet_bytes=1000,
        mac={"edca": {"BE": {"aggregation": False}, "VO": {"aggregation": True}}},
        hw_queue={"mode": "shared", "capacity_packets": 16},
        stations=_stations(3, 2.0),
        flows=[
            {"kind": "bulk", "name": "b0", "src": "s0", "dst": "ap", "total_bytes": 400_000},
            {"kind": "bulk", "name": "b1", "src": "s1", "dst": "s2"},
            {"kind": "bulk", "name": "bk", "src": "s2", "dst": "ap", "category": "BK"},
            {"kind": "datagram", "name": "vo", "src": "s0", "dst": "ap", "size_bytes": 5000,
             "period_us": 7000},
            {"kind": "datagram", "name": "vi", "src": "ap", "dst": "s1", "size_bytes": 20000,
             "period_us": 25000, "category": "VI"},
            {"kind": "datagram", "name": "be", "src": "s1", "dst": "ap", "size_bytes": 300,
             "times_us": [1000.0, 1000.0, 2500.0, 60_000.0], "category": "BE"},
        ],
    )  # fmt: skip


class _RecordingGate:
    """A policy exercising every hook: pauses on a fixed pattern, records every call."""

    def __init__(self, log: list[tuple[Any, ...]], period_ns: int, full: int) -> None:
        self.log = log
        self.period = period_ns
        self.full = full

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        depth = station.hw_queue_length()
        self.log.append(("admit", station.name, now_ns, depth, station.bulk_backlog))
        phase = now_ns % self.period
        if phase < self.period // 4:
            return now_ns - phase + self.period // 4
        if depth > self.full:
            return FOREVER
        return None

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        self.log.append(("ls", station.name, flow, now_ns))

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.log.append(("enq", station.name, pid, ac.value, depth, now_ns))

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self.log.append(("done", station.name, pid, ac.value, now_ns, delivered))


def _run_hooks_api(grouping: str | None = None) -> tuple[SimResult, list[tuple[Any, ...]]]:
    """The programmable API: hooks on some stations, messages, transfers, timers."""
    sc = _scenario(
        "hooks-api",
        hw_queue={"mode": "shared", "capacity_packets": 64},
        stations=_stations(3, 4.0),
        flows=[{"kind": "bulk", "name": "bg", "src": "s2", "dst": "ap"}],
    )
    if grouping is not None:
        sc = _grouped(sc, grouping)
    sim = Simulation(sc, seed=7, trace=True)
    log: list[tuple[Any, ...]] = []
    sim.set_hooks("s0", _RecordingGate(log, 3_000_000, 40))
    sim.set_hooks("ap", _RecordingGate(log, 5_000_000, 56))
    up = sim.flow("up", "s0", "ap", AccessCategory.BE, bulk=True)
    down = sim.flow("down", "ap", "s1", AccessCategory.BE, bulk=True, tcp_acks=False)
    side = sim.flow("side", "s1", "ap", AccessCategory.BE, bulk=True)
    perc = sim.flow("perc", "s0", "ap", AccessCategory.VO, bulk=False)
    cmd = sim.flow("cmd", "ap", "s0", AccessCategory.VO, bulk=False)

    def done(t: Any, now: int) -> None:
        log.append(("transfer-done", t.flow.name, now, t.delivered_bytes))
        if t.flow is down and now < 150_000_000:
            sim.start_transfer(down, 30_000, done)

    def delivered(msg: Any) -> None:
        log.append(("msg", msg.flow.name, msg.msg_id, msg.delivered_ns, msg.first_depth))
        if msg.flow is perc:
            sim.send_message(cmd, 1000, delivered)

    def tick(k: int) -> None:
        sim.send_message(perc, 12288, delivered)
        st = sim.station("s1")
        if k % 3 == 0:
            st.pause_bulk(sim.now_ns + 2_000_000)
        elif k % 3 == 1:
            st.pause_bulk(None)
            sim.call_control_at(sim.now_ns + 1_500_000, st.resume_bulk)
        if k % 4 == 0:
            sim.station("s0").resume_bulk()
        elif k % 4 == 2:
            sim.station("ap").resume_bulk()
        if k < 200:
            sim.call_at(sim.now_ns + 1_000_000 * (7 + k % 5), tick, k + 1)

    sim.call_at(0, sim.start_transfer, up, None)
    sim.call_at(1_000_000, sim.start_transfer, down, 50_000, done)
    sim.call_at(2_000_000, sim.start_transfer, side, 2_000_000, done)
    sim.call_at(3_000_000, tick, 0)
    return sim.run(250_000_000), log


def _grouped(sc: Scenario, grouping: str) -> Scenario:
    return apply_overrides(sc, [("mac.ampdu_grouping", grouping)], source=sc.name)


# -- digests ---------------------------------------------------------------------------
#: name: (scenario, seed, simulated ns)
_SIMULATE = {
    "per-ac-saturation": (_per_ac_saturation, 1, 300_000_000),
    "crowd-40": (_crowd_40, 11, 200_000_000),
    "shared-ring-ls": (_shared_ring_ls, 2, 400_000_000),
    "rts-finite-vi": (_rts_finite_vi, 3, 300_000_000),
    "ns3-retry-crowd": (_ns3_retry_crowd, 4, 300_000_000),
    "packet-errors-distance": (_packet_errors_distance, 5, 400_000_000),
    "no-aggregation-shared": (_no_aggregation_shared, 6, 200_000_000),
}
#: The cases whose results A-MPDUs per receiver and TID changed when they became the
#: default (issue 36); each runs with ``consecutive`` too, against its digest before.
CHANGED_BY_GROUPING = [
    "hooks-api",
    "packet-errors-distance",
    "per-ac-saturation",
    "rts-finite-vi",
    "shared-ring-ls",
]


def _simulate_case(name: str, grouping: str | None = None) -> Any:
    build, seed, duration_ns = _SIMULATE[name]

    def run() -> str:
        sc = build() if grouping is None else _grouped(build(), grouping)
        return digest(simulate(sc, seed=seed, duration_ns=duration_ns, trace=True))

    return run


CASES = {name: _simulate_case(name) for name in _SIMULATE}
CASES["hooks-api"] = lambda: digest(*_run_hooks_api())
for _name in CHANGED_BY_GROUPING:
    CASES[f"{_name}@consecutive"] = (
        (lambda: digest(*_run_hooks_api("consecutive")))
        if _name == "hooks-api"
        else _simulate_case(_name, "consecutive")
    )


def _stored() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.fixture(scope="module")
def stored() -> dict[str, str]:
    if REGEN:
        fresh = {name: case() for name, case in CASES.items()}
        GOLDEN.write_text(json.dumps(fresh, indent=2, sort_keys=True) + "\n")
    return _stored()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_digest(name: str, stored: dict[str, str]) -> None:
    assert name in stored, f"no golden digest for {name}; see the module docstring"
    assert CASES[name]() == stored[name], (
        f"{name}: simulator results changed (trace, counters, messages or hook calls)"
    )


@pytest.mark.skipif(not COMPILED, reason=f"simulator: {describe(COMPILED)}")
def test_plain_python_simulator_gives_the_same_digests(stored: dict[str, str]) -> None:
    """With the compiled modules in use above, the plain ones must agree too."""
    code = (
        "import json, sys; sys.path[:0] = sys.argv[1:]; "
        "import test_golden_equivalence as g; "
        "print(json.dumps({n: c() for n, c in g.CASES.items()}))"
    )
    env = {**os.environ, "COORP_PURE": "1"}
    here = Path(__file__).parent
    out = subprocess.run(
        [sys.executable, "-c", code, str(here), str(here.parent)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == stored
