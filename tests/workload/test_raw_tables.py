"""Raw tables of a run (per loop, per epoch, per LS message, 10 ms series) agree with its
metrics; sampling the series changes no result; short runs say what is missing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coorp.units import NS_PER_MS
from coorp.workload import BIN_NS, CrlResult, comparison_warnings, run_crl
from crl_scenarios import crl_scenario

DUR_NS = 1_500_000_000


@pytest.fixture(scope="module")
def coorp_run() -> CrlResult:
    return run_crl(crl_scenario(2), "coorp", seed=4, duration_ns=DUR_NS)


@pytest.mark.parametrize("policy", ["edca", "coorp"])
def test_sampling_the_series_changes_no_result(policy: str) -> None:
    on = run_crl(crl_scenario(2), policy, seed=4, duration_ns=DUR_NS, timeseries=True)
    off = run_crl(crl_scenario(2), policy, seed=4, duration_ns=DUR_NS, timeseries=False)
    assert on.timeseries and not off.timeseries
    assert on.loops == off.loops and on.epochs == off.epochs
    assert str(on.metrics()) == str(off.metrics())  # NaN-safe equality
    for k in off.sim.messages:
        assert np.array_equal(on.sim.messages[k], off.sim.messages[k]), k
    assert on.sim.flows == off.sim.flows and on.sim.stations == off.sim.stations
    assert on.sim.channel == off.sim.channel
    assert on.policy_stats == off.policy_stats
    assert on.sim.events_processed > off.sim.events_processed  # the samples, nothing else


def test_loop_table_agrees_with_the_metrics(coorp_run: CrlResult) -> None:
    loops = coorp_run.tables()["loops"]
    m = coorp_run.metrics()
    assert len(loops["index"]) == m["loops"] > 30
    assert list(loops["index"]) == list(range(m["loops"]))
    assert float(np.mean(loops["missed"])) == m["violation_rate"]
    for i in range(m["loops"]):
        lag = loops["start_ns"][i] - loops["nominal_ns"][i]
        assert loops["lag_ns"][i] == lag >= 0
        if loops["abandoned"][i]:
            assert loops["reaction_ns"][i] is None and loops["end_ns"][i] is None
        else:
            assert loops["reaction_ns"][i] == loops["end_ns"][i] - loops["start_ns"][i]
    finished = np.array([r for r in loops["reaction_ns"] if r is not None]) / NS_PER_MS
    assert np.percentile(finished, 50, method="inverted_cdf") == m["reaction_ms"]["p50"]


def test_epoch_table_agrees_with_the_metrics(coorp_run: CrlResult) -> None:
    epochs = coorp_run.tables()["epochs"]
    m = coorp_run.metrics()
    assert len(epochs["index"]) == m["epochs"] >= 1
    assert np.all(epochs["duration_ns"] == epochs["end_ns"] - epochs["start_ns"])
    assert np.mean(epochs["duration_ns"]) / 1e9 == pytest.approx(m["epoch_s"])
    assert epochs["worker"] == [None] * m["epochs"]  # BSP: every worker


def test_ls_message_table_agrees_with_the_metrics(coorp_run: CrlResult) -> None:
    ls = coorp_run.tables()["ls_messages"]
    m = coorp_run.metrics()
    assert set(ls["flow"]) == set(coorp_run.ls_flows)
    for flow, src, dst in zip(ls["flow"], ls["src"], ls["dst"], strict=True):
        kind, robot = flow.split(":")
        assert (src, dst) == ((robot, "leader") if kind == "perception" else ("leader", robot))
    lat = [x for x in ls["latency_ns"] if x is not None]
    for d, e, x in zip(ls["deliver_ns"], ls["enqueue_ns"], ls["latency_ns"], strict=True):
        assert (d is None and x is None) or x == d - e
    assert sorted(lat) == sorted(coorp_run.ls_latency_ns.tolist())
    p99 = np.percentile(np.array(lat) / NS_PER_MS, 99, method="inverted_cdf")
    assert p99 == m["ls_latency_ms"]["p99"]
    assert np.array_equal(ls["hw_depth"], coorp_run.ls_hw_depths)
    # Perceptions are 12 KB, controls 1 KB (the defaults).
    assert {int(b) for b in ls["size_bytes"]} == {12288, 1024}


def test_time_series_bins_add_up(coorp_run: CrlResult) -> None:
    ts = coorp_run.tables()["timeseries"]
    stations = ["leader", "r1", "r2"]
    n_bins = math.ceil(DUR_NS / BIN_NS)
    assert len(ts["station"]) == n_bins * len(stations)
    assert list(ts["station"][:3]) == stations
    assert ts["t_start_ns"][0] == 0 and ts["t_end_ns"][-1] == DUR_NS
    assert np.all(ts["t_end_ns"] - ts["t_start_ns"] == BIN_NS)
    # Bulk bytes per sender add up to what each sender's DRLC flows delivered.
    sim = coorp_run.sim
    bulk = [f for f in sim.flows.values() if f.kind == "bulk"]
    for st in stations:
        sent = sum(f.delivered_bytes for f in bulk if f.src == st)
        assert ts["bh_bytes"][ts["station"] == st].sum() == sent
    assert ts["bh_bytes"].sum() == coorp_run.bh_bytes > 0
    mbps = ts["bh_bytes"] * 8 / (BIN_NS / 1e9) / 1e6
    assert np.allclose(ts["bh_mbps"], mbps)
    assert ts["ring_depth_max"].max() <= 128
    assert np.all(ts["ring_depth_mean"] <= ts["ring_depth_max"])
    assert np.all((ts["paused_fraction"] >= 0) & (ts["paused_fraction"] <= 1))
    # COORP pauses bulk queues (gate, permits); with data waiting, they show up as paused.
    assert ts["paused_fraction"].sum() > 0


def test_edca_never_pauses_the_bulk_queue() -> None:
    run = run_crl(crl_scenario(2), "edca", seed=4, duration_ns=DUR_NS)
    ts = run.timeseries
    assert ts["paused_fraction"].max() == 0
    assert ts["backlog_fraction"].max() > 0 and ts["ring_depth_max"].max() > 0


def test_a_run_too_short_for_an_epoch_says_so() -> None:
    # 4 items per epoch, one per 33.3 ms loop from 10 ms: no epoch can start before 143 ms.
    short = run_crl(crl_scenario(2), "edca", seed=4, duration_ns=100_000_000)
    m = short.metrics()
    assert m["epochs"] == 0 and math.isnan(m["epoch_s"])
    assert m["warnings"] == [
        "no epoch in 0.1 s: epoch time is null (the first epoch starts at 0.14 s at the "
        "earliest); run longer (--duration)"
    ]
    started = run_crl(crl_scenario(2), "edca", seed=4, duration_ns=300_000_000)
    assert started.metrics()["warnings"] == [
        "no epoch in 0.3 s: epoch time is null (the first epoch's transfers had started); "
        "run longer (--duration)"
    ]


def test_few_epochs_are_flagged_and_enough_are_not(coorp_run: CrlResult) -> None:
    few = run_crl(crl_scenario(2), "coorp", seed=4, duration_ns=500_000_000)
    n = few.metrics()["epochs"]
    assert 1 <= n < 3  # some epochs, but fewer than the warning's threshold
    noun = "epoch" if n == 1 else "epochs"
    assert few.metrics()["warnings"] == [f"epoch time from {n} {noun} only in 0.5 s"]
    assert coorp_run.metrics()["epochs"] >= 3 and coorp_run.warnings() == []


def test_a_dead_reference_warns_every_policy() -> None:
    m = {"epoch_s": 1.0, "bh_mbps": 10.0, "warnings": ["own"]}
    out = comparison_warnings(
        {"edca": m, "x": {**m, "infeasible": "no fit", "warnings": []}},
        {"bh_mbps": 0.0, "warnings": ["no epoch in 1 s"]}, duration_s=1.0,
    )  # fmt: skip
    assert out == {
        "edca": ["own", "utilization is null: the bh-only reference delivered no bulk data in 1 s"],
        "x": [],
        "bh-only": ["no epoch in 1 s"],
    }
    fine = comparison_warnings({"edca": m}, {"bh_mbps": 5.0}, duration_s=1.0)
    assert fine == {"edca": ["own"], "bh-only": []}
