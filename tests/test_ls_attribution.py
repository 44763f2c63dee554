"""benchmarks/ls_attribution.py: the trace it reads changes nothing, and every late
message's wait is accounted for (air by sender and category, collisions, idle)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from coorp.scenario import load_scenario, resolve_scenario
from coorp.workload import run_crl

_spec = importlib.util.spec_from_file_location(
    "ls_attribution", Path(__file__).resolve().parents[1] / "benchmarks" / "ls_attribution.py"
)
assert _spec is not None and _spec.loader is not None
ls_attribution = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ls_attribution)


def test_a_traced_run_is_the_plain_run() -> None:
    sc = load_scenario(resolve_scenario("crl-2"))
    plain = run_crl(sc, "edca", seed=3, duration_ns=2 * 10**9, timeseries=False)
    traced = run_crl(sc, "edca", seed=3, duration_ns=2 * 10**9, timeseries=False, trace=True)
    assert plain.sim.trace is None and traced.sim.trace
    assert traced.bh_bytes == plain.bh_bytes
    np.testing.assert_array_equal(traced.sim.messages["delivered_ns"],
                                  plain.sim.messages["delivered_ns"])  # fmt: skip
    # Exchanges are in time order and never overlap (one medium).
    starts = np.array([t[0] for t in traced.sim.trace])
    ends = np.array([t[1] for t in traced.sim.trace])
    assert np.all(starts[1:] >= ends[:-1]) and np.all(ends > starts)


def test_every_late_message_wait_is_accounted_for() -> None:
    # EDCA on crl-5 with random phases: bulk data delays many perceptions.
    run = ls_attribution.attribute("crl-5", "edca", 1, "random", 3.0, late_ms=5.0)
    for kind in ls_attribution.KINDS:
        row = run[kind]
        if row["late"] == 0:
            continue
        parts = sum(row[f"{k} ms"] for k in ls_attribution.SOURCES)
        assert parts == pytest.approx(row["mean wait ms"], rel=1e-9)
        assert min(row[f"{k} ms"] for k in ls_attribution.SOURCES) >= 0.0
    assert run["perception"]["late"] > 0
    assert run["perception"]["W:BE ms"] > 0  # workers' bulk frames were on the air
