"""The paper's analytical CRL model (§IV-D, Eq. 1–3) and the ``coorp model`` command."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from coorp._errors import UsageError
from coorp.analysis.bianchi import ampdu_size, saturation_throughput
from coorp.analysis.crl_model import (
    CrlModelParams,
    bh_bandwidth_bps,
    bh_count_pmf,
    bh_first_probability,
    crl_model,
    p0_from_mac,
    params_from_scenario,
    reaction_times_ns,
    team_scenario,
)
from coorp.cli import app
from coorp.scenario import MacConfig, load_scenario, parse_scenario

CRL5 = Path(__file__).resolve().parents[2] / "scenarios" / "crl-5.toml"


def brute_force_p0(cw_ls: int, cw_bh: int, cw_ls2: int, cw_bh2: int) -> Fraction:
    """Enumerate every pair of backoff draws: BH wins a first draw with a lower counter;
    a tie is one collision, after which a fresh pair from the doubled windows decides
    (a second tie counts for LS: at most one collision)."""
    total = Fraction(0)
    first = Fraction(1, (cw_ls + 1) * (cw_bh + 1))
    second = Fraction(1, (cw_ls2 + 1) * (cw_bh2 + 1))
    for ls, bh in itertools.product(range(cw_ls + 1), range(cw_bh + 1)):
        if bh < ls:
            total += first
        elif bh == ls:
            for ls2, bh2 in itertools.product(range(cw_ls2 + 1), range(cw_bh2 + 1)):
                if bh2 < ls2:
                    total += first * second
    return total


def params(**over: object) -> CrlModelParams:
    base: dict[str, object] = dict(
        bandwidth_bps=200e6, ampdu_bytes=64 * 1500, perception_bytes=12_288,
        control_bytes=1_024, inference_ns=5_000_000, frequency_hz=30.0,
        deadline_ns=33_000_000, p0=0.1,
    )  # fmt: skip
    base.update(over)
    return CrlModelParams(**base)  # type: ignore[arg-type]


# -- p0 ------------------------------------------------------------------------------
def test_p0_of_the_standard_windows_is_the_papers_count() -> None:
    paper = Fraction(1 + 2 + 3, 4 * 16) + Fraction(4, 4 * 16) * Fraction(sum(range(8)), 8 * 32)
    assert brute_force_p0(3, 15, 7, 31) == paper
    assert bh_first_probability(3, 15, 7, 1023) == paper
    assert p0_from_mac(MacConfig()) == pytest.approx(float(paper), abs=0)
    assert 0.1 < float(paper) < 0.101  # "≈ 0.1"


@pytest.mark.parametrize(
    ("vo", "be"),
    [((3, 7), (15, 1023)), ((7, 15), (31, 1023)), ((1, 1), (3, 7)), ((15, 15), (7, 7)),
     ((0, 0), (15, 1023))],
)  # fmt: skip
def test_p0_matches_the_enumeration(vo: tuple[int, int], be: tuple[int, int]) -> None:
    mac = MacConfig.model_validate(
        {"edca": {"VO": {"cw_min": vo[0], "cw_max": vo[1]},
                  "BE": {"cw_min": be[0], "cw_max": be[1]}}}
    )  # fmt: skip
    ls2, bh2 = min(2 * vo[0] + 1, vo[1]), min(2 * be[0] + 1, be[1])
    expected = brute_force_p0(vo[0], be[0], ls2, bh2)
    assert bh_first_probability(vo[0], be[0], vo[1], be[1]) == expected
    assert p0_from_mac(mac) == float(expected)


def test_p0_grows_with_the_ls_window() -> None:
    ps = [bh_first_probability(cw, 15) for cw in (0, 1, 3, 7, 15)]
    # LS always draws 0: BH goes first only after the tie (1/16), from doubled windows.
    assert ps[0] == Fraction(1, 16) * Fraction(1, 2 * 32)
    assert ps == sorted(ps) and len(set(ps)) == len(ps)
    with pytest.raises(UsageError):
        bh_first_probability(-1, 15)


# -- Eq. 1 ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 17, 40])
@pytest.mark.parametrize("p0", [0.0, 0.1005859375, 0.5, 1.0])
def test_binomial_pmf(n: int, p0: float) -> None:
    pmf = bh_count_pmf(n, p0)
    k = np.arange(2 * n + 1)
    assert pmf.size == 2 * n + 1 and np.all(pmf >= 0)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.dot(k, pmf) == pytest.approx(2 * n * p0, abs=1e-9)
    var = np.dot(k**2, pmf) - np.dot(k, pmf) ** 2
    assert var == pytest.approx(2 * n * p0 * (1 - p0), abs=1e-9)


def test_pmf_rejects_nonsense() -> None:
    with pytest.raises(UsageError):
        bh_count_pmf(0, 0.1)
    with pytest.raises(UsageError):
        bh_count_pmf(3, 1.5)


# -- Eq. 2 and 3 -----------------------------------------------------------------------
def test_reaction_times_follow_eq2() -> None:
    p = params()
    n = 7
    t = reaction_times_ns(n, p)
    t_tr = n * (12_288 + 1_024) * 8 / 200e6 * 1e9
    step = 64 * 1500 * 8 / 200e6 * 1e9
    assert t.size == 2 * n + 1
    assert t[0] == pytest.approx(5e6 + t_tr)
    assert np.diff(t) == pytest.approx(np.full(2 * n, step))


def test_bh_bandwidth_follows_eq3() -> None:
    p = params()
    for n in (1, 10, 40):
        assert bh_bandwidth_bps(n, p) == pytest.approx(200e6 - n * 30.0 * (12_288 + 1_024) * 8)
    # Enough robots leave nothing for bulk data.
    assert bh_bandwidth_bps(1000, p) < 0


def test_violation_rate_and_quantiles_come_from_the_distribution() -> None:
    p = params()
    m = crl_model(20, p)
    late = m.reaction_ns > p.deadline_ns
    assert m.violation_rate == pytest.approx(float(m.pmf[late].sum()))
    assert 0 < m.violation_rate < 1
    assert m.cdf[-1] == pytest.approx(1.0)
    for q in (0.5, 0.9, 0.99):
        t = m.quantile_ns(q)
        k = int(np.flatnonzero(m.reaction_ns == t)[0])
        assert m.cdf[k] >= q - 1e-12
        assert k == 0 or m.cdf[k - 1] < q
    assert m.mean_bh == pytest.approx(40 * 0.1)


def test_monotone_in_the_team_size() -> None:
    p = params(p0=0.1005859375)
    points = [crl_model(n, p) for n in range(2, 41)]
    viol = [m.violation_rate for m in points]
    p99 = [m.quantile_ns(0.99) for m in points]
    p50 = [m.quantile_ns(0.5) for m in points]
    bh = [m.bh_bps for m in points]
    assert viol == sorted(viol) and viol[-1] > viol[0]
    assert p99 == sorted(p99) and p50 == sorted(p50)
    assert all(a > b for a, b in itertools.pairwise(bh))
    means = [float(np.dot(m.pmf, m.reaction_ns)) for m in points]
    assert all(b > a for a, b in itertools.pairwise(means))


def test_bandwidth_must_be_positive() -> None:
    with pytest.raises(UsageError):
        params(bandwidth_bps=0.0)


# -- parameters from a scenario ---------------------------------------------------------
def test_params_from_scenario_use_the_slowest_link() -> None:
    sc = parse_scenario({
        "stations": [{"name": "L"}, {"name": "a"}, {"name": "b"}],
        "links": {"mode": "fixed", "mcs": 8, "overrides": [{"src": "b", "dst": "L", "mcs": 4}]},
        "workload": {"leader": "L", "mpc": {"period_us": 50_000.0, "inference_us": 2_000.0}},
    })  # fmt: skip
    p = params_from_scenario(sc)
    sat = saturation_throughput(1, payload_bytes=1500, mcs=4, phy=sc.phy, mac=sc.mac)
    assert p.mcs == 4
    assert p.bandwidth_bps == pytest.approx(sat.throughput_mbps * 1e6)
    assert p.ampdu_bytes == ampdu_size(1500, 4, sc.phy, sc.mac) * 1500
    assert p.frequency_hz == pytest.approx(20.0)
    assert p.inference_ns == 2_000_000 and p.deadline_ns == 33_000_000
    assert p.p0 == p0_from_mac(sc.mac)
    assert "MCS 4" in p.bandwidth_source
    given = params_from_scenario(sc, bandwidth_mbps=150.0)
    assert given.bandwidth_bps == 150e6 and given.bandwidth_source == "given"
    with pytest.raises(UsageError):
        params_from_scenario(sc, bandwidth_mbps=-1.0)
    with pytest.raises(UsageError, match="workload"):
        params_from_scenario(parse_scenario({"stations": [{"name": "x"}, {"name": "y"}]}))


def test_team_scenario_places_n_workers_in_the_disc() -> None:
    base = load_scenario(CRL5)
    sc = team_scenario(base, 12, seed=4, duration_s=2.0)
    assert sc.workload is not None
    assert sc.workers == [f"w{i}" for i in range(1, 13)]
    assert base.workload is not None and sc.stations[0].name == base.workload.leader
    assert sc.stations[0].position_m == (0.0, 0.0)
    assert all(math.dist(s.position_m, (0, 0)) <= 10.0 for s in sc.stations)
    assert sc.workload.drlc.batch_items == 1 and sc.workload.drlc.train_us == 0
    assert sc.duration_s == 2.0 and sc.phy == base.phy and sc.hw_queue == base.hw_queue
    assert team_scenario(base, 12, seed=4).stations == sc.stations
    assert team_scenario(base, 12, seed=5).stations != sc.stations


# -- the command ---------------------------------------------------------------------
def test_cli_writes_json_and_png(tmp_path: Path) -> None:
    out = tmp_path / "model"
    js = tmp_path / "m.json"
    res = CliRunner().invoke(
        app, ["model", str(CRL5), "--robots", "2,3", "--out", str(out), "--json", str(js)]
    )
    assert res.exit_code == 0, res.output
    assert "B_BH" in res.output and "p0 = 0.1006" in res.output
    data = json.loads(js.read_text())
    assert data == json.loads((out / "model.json").read_text())
    assert [r["workers"] for r in data["rows"]] == [2, 3]
    assert data["simulation"] is None and data["rows"][0]["simulation"] is None
    assert data["parameters"]["p0"] == pytest.approx(0.1005859375)
    row = data["rows"][1]["model"]
    assert len(row["pmf"]) == 7 and sum(row["pmf"]) == pytest.approx(1.0)
    assert row["reaction_ms"]["p50"] <= row["reaction_ms"]["p99"]
    png = (out / "model.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert json.loads((out / "manifest.json").read_text())["robots"] == [2, 3]


def test_cli_simulate_smoke(tmp_path: Path) -> None:
    js = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["model", str(CRL5), "--robots", "1", "--simulate",
                                   "--duration", "0.5", "--json", str(js)])  # fmt: skip
    assert res.exit_code == 0, res.output
    sim = json.loads(js.read_text())["rows"][0]["simulation"]
    assert sim["loops"] > 5 and 0 <= sim["violation_rate"] <= 1 and sim["b_bh_mbps"] > 0


@pytest.mark.parametrize("robots", ["0", "2,x", ""])
def test_cli_rejects_bad_robot_lists(robots: str) -> None:
    from coorp.cli import main

    with pytest.raises(SystemExit) as info:
        main(["model", str(CRL5), "--robots", robots])
    assert info.value.code == 2
