"""``benchmarks/_edca_depth.py``: perceptions by their robot's queue when they entered it,
from an emulator's frames table (a synthetic one here, every depth known)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _edca_depth as depth

MS = 1_000_000


def test_perceptions_are_classed_by_the_queue_ahead_of_their_last_fragment(
    tmp_path: Path,
) -> None:
    # Robot 1's upload: 1000 full-size frames enqueued every 0.1 ms from 0, each settled
    # 300 ms later (so the uploads "start" at 0); three perception tails: B at 5.05 ms
    # (51 frames ahead, 2 ms on the channel), A at 25.05 ms (251 frames ahead, B settled
    # by then; 40 ms: missed), C at 60.05 ms (601 frames, A and B enqueued, B settled:
    # 602; dropped at the queue: missed). The leader's frames (src 0) never count.
    rows = [(1, 1500, i * MS // 10, i * MS // 10 + 300 * MS, 0) for i in range(1000)]
    rows += [(1, 284, 5_050_000, 7_050_000, 0), (1, 284, 25_050_000, 65_050_000, 0),
             (1, 284, 60_050_000, 60_050_000, 2), (0, 1500, 1 * MS, 2 * MS, 0)]  # fmt: skip
    cols = ("src", "bytes", "enq_ns", "done_ns", "outcome")
    pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}),
                   tmp_path / "frames.parquet")  # fmt: skip
    out = depth.emulated(tmp_path, [{"window_after_uploads_s": 0.0}], window_s=1.0)
    assert out["perceptions"] == 3
    by = {c["depth"]: c for c in out["classes"]}
    assert by["0-100"]["share"] == pytest.approx(1 / 3) and by["0-100"]["missed"] == 0.0
    assert by["0-100"]["us_per_packet"] == pytest.approx(2000 / 51)
    assert by["200-300"]["missed"] == 1.0
    assert by["200-300"]["us_per_packet"] == pytest.approx(40_000 / 251)
    assert by["600-"]["missed"] == 1.0 and by["600-"]["us_per_packet"] is None
    assert by["100-200"]["share"] == 0.0 and by["100-200"]["missed"] is None
    # A window that starts after them holds none.
    late = depth.emulated(tmp_path, [{"window_after_uploads_s": 0.5}], window_s=1.0)
    assert late["perceptions"] == 0


def test_classes_count_lost_perceptions_as_missed() -> None:
    out = depth.classes([10, 20, 450, 450], [1.0, float("inf"), 34.0, 32.0])
    first, *_, deep, _ = out
    assert (first["share"], first["missed"]) == (0.5, 0.5)
    assert first["us_per_packet"] == 100.0  # the lost one has no sojourn
    assert (deep["depth"], deep["share"], deep["missed"]) == ("400-600", 0.5, 0.5)
