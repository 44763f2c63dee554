"""Same scenario + same seed => identical results; the seed actually matters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coorp.scenario import Scenario, load_scenario, parse_scenario
from coorp.sim import SimResult, simulate

ROOT = Path(__file__).resolve().parents[2]
WALL_CLOCK_FIELDS = ("wall_s", "sim_s_per_wall_s")


def _mixed() -> Scenario:
    """Every source of randomness at once: backoff, send jitter, packet errors."""
    return parse_scenario({
        "duration_s": 0.3,
        "seed": 11,
        "hw_queue": {"mode": "shared", "capacity_packets": 32},
        "links": {"mode": "distance", "packet_errors": True},
        "mac": {"retry_policy": "ns3", "rts_threshold_bytes": 20000},
        "stations": [
            {"name": "ap", "position_m": [0, 0]},
            {"name": "a", "position_m": [12, 0]},
            {"name": "b", "position_m": [0, 25]},
            {"name": "c", "position_m": [-30, 5]},
        ],
        "flows": [
            {"kind": "datagram", "name": "ls-a", "src": "a", "dst": "ap", "size_bytes": 12288,
             "period_us": 10000, "jitter_us": 800},
            {"kind": "datagram", "name": "ctl", "src": "ap", "dst": "b", "size_bytes": 1024,
             "period_us": 7000, "jitter_us": 300, "category": "VI"},
            {"kind": "bulk", "name": "bh-b", "src": "b", "dst": "ap"},
            {"kind": "bulk", "name": "bh-c", "src": "c", "dst": "ap", "total_bytes": 400_000},
        ],
    })  # fmt: skip


def _scenarios() -> list[Any]:
    return [
        pytest.param(load_scenario(ROOT / "scenarios" / "saturation-5.toml"), id="saturation-5"),
        pytest.param(_mixed(), id="mixed"),
    ]


def _summary(r: SimResult) -> dict[str, Any]:
    s = r.summary()
    for k in WALL_CLOCK_FIELDS:
        s.pop(k)
    return s


def _assert_same(a: SimResult, b: SimResult) -> None:
    assert _summary(a) == _summary(b)
    assert a.messages.keys() == b.messages.keys()
    for col in a.messages:
        assert np.array_equal(a.messages[col], b.messages[col]), col
    assert a.ls_hw_depths.keys() == b.ls_hw_depths.keys()
    for name in a.ls_hw_depths:
        assert np.array_equal(a.ls_hw_depths[name], b.ls_hw_depths[name]), name
    assert a.trace == b.trace


@pytest.mark.parametrize("scenario", _scenarios())
def test_same_seed_same_everything(scenario: Scenario) -> None:
    dur = 300_000_000
    a = simulate(scenario, duration_ns=dur, trace=True)
    b = simulate(scenario, duration_ns=dur, trace=True)
    assert a.trace  # something happened
    _assert_same(a, b)


@pytest.mark.parametrize("scenario", _scenarios())
def test_different_seed_different_trace(scenario: Scenario) -> None:
    dur = 300_000_000
    a = simulate(scenario, seed=scenario.seed, duration_ns=dur, trace=True)
    b = simulate(scenario, seed=scenario.seed + 1, duration_ns=dur, trace=True)
    assert a.seed != b.seed
    assert a.trace != b.trace


def test_seed_argument_equals_seed_in_scenario() -> None:
    sc = _mixed()
    a = simulate(sc, seed=5, trace=True)
    b = simulate(sc.model_copy(update={"seed": 5}), trace=True)
    _assert_same(a, b)


def test_trace_flag_does_not_change_results() -> None:
    sc = _mixed()
    a, b = simulate(sc, trace=True), simulate(sc, trace=False)
    assert b.trace is None
    assert _summary(a) == _summary(b)


def test_adding_a_flow_keeps_other_flows_send_times() -> None:
    # Random streams are keyed by name: a new flow must not shift the jitter draws of the
    # existing ones (so two variants of a scenario see the same traffic).
    base = _mixed()
    extra = {"kind": "datagram", "name": "zz-new", "src": "c", "dst": "a", "size_bytes": 500,
             "period_us": 3000, "jitter_us": 100}  # fmt: skip
    data = base.model_dump(mode="json")
    data["flows"].insert(0, extra)
    a = simulate(base)
    b = simulate(parse_scenario(data))
    for flow in ("ls-a", "ctl"):
        ca = a.messages["created_ns"][a.messages["flow"] == flow]
        cb = b.messages["created_ns"][b.messages["flow"] == flow]
        assert ca.size > 10
        assert np.array_equal(ca, cb)


_DIGEST = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from test_determinism import _mixed, _summary
from coorp.sim import simulate
r = simulate(_mixed(), duration_ns=100_000_000, trace=True)
h = hashlib.sha256(repr(r.trace).encode())
h.update(json.dumps(_summary(r), sort_keys=True).encode())
for col in sorted(r.messages):
    h.update(repr(r.messages[col].tolist()).encode())
print(h.hexdigest())
"""


def test_results_do_not_depend_on_the_process_hash_seed() -> None:
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", _DIGEST, str(Path(__file__).parent)],
            env=env, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        digests.add(out.stdout.strip())
    assert len(digests) == 1
