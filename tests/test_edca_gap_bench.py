"""``benchmarks/_edca_gap.py acks``: the receivers' acks per delivered burst, counted from
an emulator's frames table (a synthetic one here, every count known)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _edca_gap as gap


def _table(rows: list[tuple[int, int, int, int, int, int]], path: Path) -> Path:
    cols = ("src", "final", "bytes", "outcome", "enq_ns", "done_ns")
    pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}), path)
    return path


def test_acks_are_counted_per_delivered_burst(tmp_path: Path) -> None:
    rows = []
    # Station 1 to the leader (0): a burst of 64 at t=1000 acked 4 times, one of 10 at
    # t=5000 acked twice, one of 3 at t=9000 acked once; a dropped frame is no data.
    for t, n, acks in ((1000, 64, 4), (5000, 10, 2), (9000, 3, 1)):
        rows += [(1, 0, 1500, 0, t - 500, t)] * n
        rows += [(0, 1, 76, 0, t + 600 + 10 * a, t + 900) for a in range(acks)]
    rows.append((1, 0, 1500, 2, 9500, 9600))
    # Station 2: one burst of 40 acked 5 times; a datagram of the leader's (big) is no ack.
    rows += [(2, 0, 1500, 0, 1900, 2000)] * 40
    rows += [(0, 2, 64, 0, 2500 + a, 2600) for a in range(5)] + [(0, 2, 1400, 0, 2700, 2800)]
    out = gap.ack_batches(_table(rows, tmp_path / "frames.parquet"))
    small, mid, big = out["classes"]
    assert (small["bursts"], small["segments"], small["acks_per_burst"]) == (1, 3, 1.0)
    assert (mid["bursts"], mid["segments"], mid["segments_per_ack"]) == (1, 10, 5.0)
    assert (big["bursts"], big["segments"], big["acks_per_burst"]) == (2, 104, 4.5)
    assert big["segments_per_ack"] == 104 / 9
    s1, s2 = out["stations"]
    assert (s1["station"], s1["bursts"], s1["segments_per_ack"]) == (1, 3, 77 / 7)
    assert (s2["station"], s2["segments_per_ack_32_up"]) == (2, 8.0)
    assert s2["segments_per_ack_1_8"] is None
    # The leader's 7 acks to 1 (4, 2 and 1 at three times) and 5 to 2 (between the first
    # two of 1's) in queue order: runs of 4, 5 and 3 (1's last two groups follow each
    # other); the 1400-byte datagram to 2 is no ack.
    runs = out["ack_runs"]
    assert (runs["mean"], runs["p50"]) == (4.0, 4.0)
    assert runs["share_in_runs_of_4_up"] == 9 / 12
    # The large bursts' first acks: 600 ns after 1's, 500 ns after 2's.
    assert out["first_ack_us"]["p50"] == 0.55


def test_the_emulated_windows_are_sampled_in_the_window_only() -> None:
    # One sample a second from t=100 (the upload's first, in slow start): with the
    # loop's window from 102 for 3 s only those at 102..105 count.
    samples = [{"t": 100.0 + k, "cwnd": 10 * (k + 1)} for k in range(8)]
    kept = gap._in_window(samples, 102.0, 3.0)
    assert [s["t"] for s in kept] == [102.0, 103.0, 104.0, 105.0]
    assert gap._in_window([], 102.0, 3.0) == []


def test_the_aps_exchanges_are_counted_in_the_window_only() -> None:
    # (start, collided, stations, mpdus): the AP's successful exchanges of 1, 3, 9 and 20
    # MPDUs in [10, 100), one outside, a collision and a robot's exchange not its own.
    ex = [(10, False, ("leader",), (1,)), (20, False, ("leader",), (3,)),
          (30, False, ("r1",), (64,)), (40, True, ("leader", "r2"), (5, 64)),
          (50, False, ("leader",), (9,)), (60, False, ("leader",), (20,)),
          (100, False, ("leader",), (64,))]  # fmt: skip
    out = gap._ap_exchanges(ex, "leader", 10, 100)
    assert out["ap_exchange_share"] == 4 / 5
    assert out["ap_mpdus_per_exchange"] == (1 + 3 + 9 + 20) / 4
    assert out["ap_mpdus_p50"] == 6.0 and out["ap_small_exchanges"] == 0.5


def test_overflow_episodes_are_drops_grouped_per_robot() -> None:
    ms = 1_000_000
    # r1: drops at 0-2 ms and 100-101 ms (two episodes, 50 ms apart or more); r2: one
    # burst; r3: none; r4: drops 40 ms apart stay one episode.
    drops = [[0, ms, 2 * ms, 100 * ms, 101 * ms], [5 * ms], [], [0, 40 * ms, 80 * ms]]
    assert gap._episodes(drops) == (2 + 1 + 0 + 1) / 4
    assert gap._episodes(drops, gap_ns=30 * ms) == (2 + 1 + 0 + 3) / 4
    assert gap._episodes([]) == 0.0


def test_hystart_exits_and_their_mean_window() -> None:
    out = gap._hystart({"hystart_train": 3, "hystart_delay": 1,
                        "hystart_train_cwnd": 300, "hystart_delay_cwnd": 500})  # fmt: skip
    assert out == {"run_hystart_exits": 4, "run_hystart_cwnd": 200.0}
    none = gap._hystart(dict.fromkeys(("hystart_train", "hystart_delay", "hystart_train_cwnd",
                                       "hystart_delay_cwnd"), 0))  # fmt: skip
    assert none["run_hystart_exits"] == 0 and math.isnan(none["run_hystart_cwnd"])


def test_the_simulated_columns_read_each_robots_own_samples() -> None:
    # A short window of the cell with a 300-packet kernel queue: each robot's queue
    # (kernel queue + ring) stays within 300 + the ring, every upload's slow start ends
    # by HyStart once, the windows are what is in flight, and overflow episodes are
    # counted when, and only when, the robots' queues dropped.
    sets = ["hw_queue.kernel_queue_fifo=true", "hw_queue.kernel_queue_packets=300",
            "tcp.sack=true"]  # fmt: skip
    r = gap.sim_seed(1, sets, 1.0, 2.0)
    import _emulate_edca as edca

    ring = edca.scenario("shared", gap.BE).hw_queue.capacity_packets
    assert r["robot_queue_p50"] <= r["robot_queue_p90"] <= r["robot_queue_p95"] <= 300 + ring
    assert r["robot_kernel_queue"] <= 300 and r["robot_ring"] <= ring
    assert r["cwnd"] == pytest.approx(r["in_flight"], rel=0.01) and r["cwnd"] > 100
    assert r["run_hystart_exits"] == 4 and r["run_hystart_cwnd"] >= 16
    assert (r["loss_episodes"] > 0) == (r["kernel_drops_robots"] > 0)
    assert r["loss_episodes"] * 4 <= r["kernel_drops_robots"]
