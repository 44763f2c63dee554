"""benchmarks/_emulate_transparent.py: each run's share of the emulator's late frames,
taken from the emulator's per-second report over the run's wall-clock span."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_BENCH))  # it imports benchmarks/transparent.py by name
_spec = importlib.util.spec_from_file_location("_emulate_transparent",
                                               _BENCH / "_emulate_transparent.py")  # fmt: skip
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _second(t_s: int, frames: int, late: int, p99: float) -> dict[str, object]:
    return {"t_ns": t_s * 10**9, "frames": frames, "late": late, "lag_p99_ms": p99}


SERIES = [_second(1, 1000, 0, 0.2), _second(2, 1000, 100, 3.0), _second(3, 2000, 10, 0.9),
          _second(4, 1000, 500, 9.0)]  # fmt: skip


def test_a_run_counts_the_seconds_its_span_covers() -> None:
    # Started at monotonic 100: seconds 2 and 3 end at 102 and 103, inside [101.5, 102.5]
    # with the one-second allowance for the report's last second.
    got = bench.emulator_lag(SERIES, 100.0, 101.5, 102.5)
    assert got["frames_late"] == pytest.approx(110 / 3000)
    assert got["worst_second_lag_p99_ms"] == 3.0
    later = bench.emulator_lag(SERIES, 100.0, 103.5, 104.0)
    assert later == {"frames_late": 0.5, "worst_second_lag_p99_ms": 9.0}


def test_nothing_known_is_none_not_zero() -> None:
    assert bench.emulator_lag(SERIES, None, 0.0, 10.0) == {
        "frames_late": None, "worst_second_lag_p99_ms": None}  # fmt: skip
    assert bench.emulator_lag(SERIES, 100.0, 200.0, 210.0) == {
        "frames_late": None, "worst_second_lag_p99_ms": None}  # fmt: skip
