"""``benchmarks/tcp_crosscheck.py`` and ``benchmarks/sim_speed.py --tcp``: what they run
and how they report (ns-3 itself is not needed: its column stays empty)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sim_speed
import tcp_crosscheck as xc


def test_the_json_has_exactly_the_rows_schema(tmp_path: Path) -> None:
    out, details = tmp_path / "tcp.json", tmp_path / "details.json"
    args = ["--no-ns3", "--cases", "reno-1,cubic-2-64k", "--warmup", "0.05",
            "--duration", "0.1", "--json", str(out), "--details", str(details)]  # fmt: skip
    assert xc.main(args) == 0
    doc = json.loads(out.read_text())
    assert list(doc) == ["rows"]
    assert [list(r) for r in doc["rows"]] == [["case", "coorp_mbps", "ns3_mbps"]] * 2
    assert [r["case"] for r in doc["rows"]] == ["reno-1", "cubic-2-64k"]
    assert all(r["coorp_mbps"] > 100 and r["ns3_mbps"] is None for r in doc["rows"])
    full = json.loads(details.read_text())["results"]
    assert full[1]["rwnd_bytes"] == 64 * 1024 and full[1]["n"] == 2
    assert [r["coorp_mbps"] for r in full] == [r["coorp_mbps"] for r in doc["rows"]]
    # Each connection opens with a SYN and a SYN-ACK over the channel (a few hundred µs),
    # and its window trace starts with the initial window when it is established.
    runs = [run for r in full for run in r["runs"]]
    assert len(runs) == 2
    for run in runs:
        starts = run["coorp"]["starts_ns"]
        assert all(0 < s < 2_000_000 for s in starts)
        assert [t[0] for t in run["coorp"]["traces"]] == [[s, 10] for s in starts]


def test_bad_cases_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("vegas-1", "reno-x", "reno-0", "cubic-1-64"):
        assert xc.main(["--no-ns3", "--cases", bad]) == 2
        assert bad in capsys.readouterr().out


def test_trace_comparison() -> None:
    cap = xc.Case.parse("reno-1-64k", 0).rwnd_bytes // xc.MSS  # 45 segments
    trace = [(0, 10), (500_000, 20), (1_000_000, 40)]
    ours: dict[str, Any] = {"traces": [trace], "starts_ns": [0]}
    same = xc.compare_traces(ours, ours, 64 * 1024, 2.0)
    assert same["mean_rel_diff"] == 0 == same["aggregate_mean_rel_diff"]
    # ns-3 a sample period later everywhere, started later: per connection the same shape.
    later = {"traces": [[(t + 300_000, w) for t, w in trace]], "starts_ns": [300_000]}
    c = xc.compare_traces(ours, later, 64 * 1024, 2.0)
    assert c["mean_rel_diff"] == 0 and c["aggregate_mean_rel_diff"] > 0
    assert c["connections"][0]["coorp_reach_ms"] is None and c["cap_segments"] == cap
    # Over seeds: the mean window per connection, from the applications' start.
    runs = [{"coorp": ours, "ns3": later, "cwnd": c}] * 2
    m = xc.compare_seeds(runs, 64 * 1024, 2.0)
    assert m["mean_rel_diff"] == 0 and m["mean_window_rel_diff"] == c["aggregate_mean_rel_diff"]
    # Windows beyond the receive window count as the receive window.
    big = {"traces": [[(0, 10), (500_000, 400)]], "starts_ns": [0]}
    capped = {"traces": [[(0, 10), (500_000, cap)]], "starts_ns": [0]}
    assert xc.compare_traces(big, capped, 64 * 1024, 2.0)["mean_rel_diff"] == 0


def test_sim_speed_times_the_tcp_model_against_none(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    args = ["--policies", "coorp", "--scenarios", "crl-2", "--tcp", "none,cubic",
            "--duration", "0.3", "--repeat", "1", "--json", str(out)]  # fmt: skip
    assert sim_speed.main(args) == 0
    rows = {(r["scenario"], r["policy"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {
        (f"crl-2 tcp={t}", p) for t in ("none", "cubic") for p in ("edca", "coorp")
    }
    for p in ("edca", "coorp"):
        r = rows[("crl-2 tcp=cubic", p)]
        assert r["cpu_vs_no_tcp"] == pytest.approx(
            r["cpu_s"][0] / rows[("crl-2 tcp=none", p)]["cpu_s"][0]
        )
        assert "cpu_vs_no_tcp" not in rows[("crl-2 tcp=none", p)]


def test_seed_noise_bounds_the_mean_window_difference() -> None:
    # Four seeds whose ns-3 curves differ from each other; coorp's are ns-3's + 10%.
    theirs = [[10.0, 20.0, 40.0], [12.0, 22.0, 44.0], [8.0, 18.0, 36.0], [10.0, 21.0, 41.0]]
    ours = [[1.1 * x for x in curve] for curve in theirs]
    interval, halves = xc.seed_noise(ours, theirs)
    assert interval is not None and halves is not None
    assert interval == pytest.approx([0.1, 0.1])  # every resample: exactly 10% apart
    assert halves > 0  # two halves of ns-3's own seeds are not the same curve
    same, _ = xc.seed_noise(theirs, theirs)
    assert same == [0.0, 0.0]
    assert xc.seed_noise(ours[:3], theirs[:3]) == (None, None)  # too few seeds to say
    # The same numbers again: the generator is seeded.
    assert xc.seed_noise(ours, theirs) == (interval, halves)


def test_the_queue_bound_and_sack_map_onto_coorp(capsys: pytest.CaptureFixture[str]) -> None:
    case = xc.Case.parse("cubic-2", 4 * 1024 * 1024)
    sc = xc.coorp_scenario(case, None, xc.Loss(sack=True, queue_packets=200))
    # The ring and the FIFO kernel queue in front of it hold the bound together.
    assert sc.hw_queue.capacity_packets == xc.RING_PACKETS == 128
    assert sc.hw_queue.kernel_queue_packets == 200 - 128 and sc.hw_queue.kernel_queue_fifo
    assert sc.tcp.sack
    plain = xc.coorp_scenario(case)
    assert plain.hw_queue.kernel_queue_packets is None and not plain.tcp.sack
    for bound in ("128", "50"):
        assert xc.main(["--no-ns3", "--cases", "reno-1", "--queue-packets", bound]) == 2
        assert "more than 128" in capsys.readouterr().out


def test_a_bounded_queue_loses_segments_and_the_details_count_them(tmp_path: Path) -> None:
    out, details = tmp_path / "tcp.json", tmp_path / "details.json"
    args = ["--no-ns3", "--cases", "cubic-2", "--rwnd", "4194304", "--queue-packets", "150",
            "--sack", "on", "--warmup", "0.2", "--duration", "0.3",
            "--json", str(out), "--details", str(details)]  # fmt: skip
    assert xc.main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [list(r) for r in rows] == [["case", "coorp_mbps", "ns3_mbps"]]
    full = json.loads(details.read_text())
    assert full["queue_packets"] == 150 and full["coorp_kernel_queue_packets"] == 22
    assert full["sack"] is True
    r = full["results"][0]
    s = r["losses"]["coorp"]
    assert r["losses"]["ns3"] is None and s["queue_limit_packets"] == 150
    assert s["drops"] > 0 and s["retransmits"] > 0 and s["fast_recoveries"] > 0
    assert s["mbps"] == r["coorp_mbps"] and s["mbps_ci95"] is None  # one seed: no interval
    per_run = r["runs"][0]["coorp"]["losses"]
    assert len(per_run["retransmits"]) == 2 and s["retransmits"] == sum(per_run["retransmits"])


def test_mean_ci95() -> None:
    assert xc.mean_ci95([5.0]) == (5.0, None)
    mean, half = xc.mean_ci95([1.0, 3.0])  # s = √2, s/√2 = 1, t(1) = 12.706
    assert mean == 2.0 and half == pytest.approx(12.706)
    assert xc.mean_ci95([2.0] * 40) == (2.0, 0.0)
