"""Figures: one style per policy, every requested format, bars that say why they are
empty and how many epochs stand behind them; raw tables written next to results."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib
import pyarrow.parquet as pq
import pytest

from coorp import UsageError, figures
from coorp.report import (
    FIGURE_FORMATS,
    Comparison,
    compare,
    parse_formats,
    plot_comparison,
    plot_run,
    policy_style,
    policy_styles,
    register_policy_style,
    write_comparison_raw_tables,
    write_raw_tables,
)
from coorp.workload import run_crl
from crl_scenarios import crl_scenario

SHIPPED = ["edca", "schedwifi", "coorp", "coorp-global", "coorp-local", "coorp-paper", "oracle"]
MAGIC = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}


@pytest.fixture(scope="module")
def short_cmp() -> Comparison:
    """0.1 s: no epoch can finish (the first batch is in at 0.14 s)."""
    return compare(crl_scenario(2, duration_s=0.1), ["edca", "coorp"], seed=1)


@pytest.fixture(scope="module")
def long_cmp() -> Comparison:
    return compare(crl_scenario(2, duration_s=0.8), ["edca", "coorp"], seed=1)


# -- styles -------------------------------------------------------------------------------


def test_every_shipped_policy_has_its_own_colour_and_line() -> None:
    styles = [policy_style(n) for n in [*SHIPPED, "bh-only"]]
    assert len({s.color for s in styles}) == len(styles)
    assert len({(s.color, str(s.linestyle), s.hatch) for s in styles}) == len(styles)
    # The same in every figure, whatever else is in it and in what order.
    assert policy_styles(["coorp", "edca"])["coorp"] == policy_style("coorp")


def test_unknown_policies_get_stable_distinct_styles() -> None:
    names = [f"user-{i}" for i in range(12)]
    a = policy_styles(names)
    b = policy_styles(list(reversed(names)))
    assert a == {n: b[n] for n in names}  # order-independent
    assert len({(s.color, str(s.linestyle)) for s in a.values()}) == len(names)
    shipped_colors = {policy_style(n).color for n in SHIPPED}
    assert not {s.color for s in a.values()} & shipped_colors
    assert all(s.linestyle != "-" for s in a.values())  # never mistaken for edca/coorp
    assert policy_style("user-3") == policy_style("user-3")


def test_a_registered_style_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "_USER", {})
    register_policy_style("mine", color="#123456", linestyle="--")
    assert policy_style("mine").color == "#123456"
    assert policy_styles(["mine", "edca"])["mine"].linestyle == "--"


# -- formats --------------------------------------------------------------------------------


def test_formats_parse_and_bad_ones_name_the_option() -> None:
    assert parse_formats("png,pdf, svg") == FIGURE_FORMATS
    assert parse_formats("PDF,pdf") == ("pdf",)
    with pytest.raises(UsageError) as info:
        parse_formats("png,jpg")
    assert str(info.value) == (
        "--format 'png,jpg': unknown figure format 'jpg'; allowed: png, pdf, svg "
        "(comma-separated, e.g. png,pdf)"
    )
    with pytest.raises(UsageError, match="unknown figure format"):
        parse_formats(",")


def test_figures_in_every_format(long_cmp: Comparison, tmp_path: Path) -> None:
    paths = plot_comparison(long_cmp, tmp_path, formats=("png", "pdf", "svg"))
    stems = {"reaction_cdf", "utilization_epoch", "ls_queue_depth"}
    assert {(p.stem, p.suffix) for p in paths} == {
        (s, f".{f}") for s in stems for f in FIGURE_FORMATS
    }
    for p in paths:
        assert p.read_bytes().startswith(MAGIC[p.suffix[1:]]), p
    # Same comparison, same figure bytes (no creation date in the files).
    again = plot_comparison(long_cmp, tmp_path / "again", formats=("png", "svg"))
    for p in again:
        assert p.read_bytes() == (tmp_path / p.name).read_bytes(), p.name


def _svg_text(path: Path) -> str:
    return path.read_text()


@pytest.fixture
def svg_text_as_text() -> object:
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        yield


@pytest.mark.usefixtures("svg_text_as_text")
def test_empty_bars_say_why(short_cmp: Comparison, tmp_path: Path) -> None:
    assert all(r.metrics["epochs"] == 0 for r in short_cmp.runs.values())
    plot_comparison(short_cmp, tmp_path, formats=("svg",))
    svg = _svg_text(tmp_path / "utilization_epoch.svg")
    assert svg.count("no epoch in 0.1 s") == 2  # one per policy's epoch bar
    # The BH-only reference moved no bulk data in 0.1 s either: no utilization.
    assert svg.count("no BH-only data in 0.1 s") == 2


@pytest.mark.usefixtures("svg_text_as_text")
def test_epoch_bars_carry_their_epoch_count(long_cmp: Comparison, tmp_path: Path) -> None:
    plot_comparison(long_cmp, tmp_path, formats=("svg",))
    svg = _svg_text(tmp_path / "utilization_epoch.svg")
    for run in long_cmp.runs.values():
        n = run.metrics["epochs"]
        assert n >= 1
        assert f"n={n}" in svg
    cdf = _svg_text(tmp_path / "reaction_cdf.svg")
    for name, run in long_cmp.runs.items():
        assert f"{name} ({run.reaction_ms.size} loops)" in cdf
        # Each curve in its policy's colour.
        assert policy_style(name).color.lower() in cdf.lower()


@pytest.mark.usefixtures("svg_text_as_text")
def test_an_infeasible_policy_bar_says_infeasible(tmp_path: Path) -> None:
    sc = crl_scenario(2, duration_s=0.2, links={"mode": "fixed", "mcs": 0})
    cmp = compare(sc, ["edca", "schedwifi"], seed=1)
    assert cmp.runs["schedwifi"].infeasible
    plot_comparison(cmp, tmp_path, formats=("svg",))
    assert _svg_text(tmp_path / "utilization_epoch.svg").count("infeasible") == 2
    assert "schedwifi: infeasible" in _svg_text(tmp_path / "reaction_cdf.svg")


def test_run_figures(tmp_path: Path) -> None:
    run = run_crl(crl_scenario(2), "coorp", seed=2, duration_ns=400_000_000)
    paths = plot_run(run, tmp_path, formats=("png", "pdf"))
    assert sorted(p.name for p in paths) == [
        "reaction_cdf.pdf", "reaction_cdf.png", "timeseries.pdf", "timeseries.png",
    ]  # fmt: skip


# -- raw tables -------------------------------------------------------------------------------


def test_raw_tables_written_for_each_run(long_cmp: Comparison, tmp_path: Path) -> None:
    written = write_comparison_raw_tables(long_cmp, tmp_path)
    for name in ["edca", "coorp", "bh-only"]:
        d = tmp_path / "raw" / name
        for table in ["loops", "epochs", "ls_messages", "timeseries"]:
            assert d / f"{table}.parquet" in written and d / f"{table}.csv" in written
    for name, run in long_cmp.runs.items():
        loops = pq.read_table(tmp_path / "raw" / name / "loops.parquet").to_pydict()
        assert len(loops["index"]) == run.metrics["loops"]
        assert sum(loops["missed"]) / len(loops["missed"]) == run.metrics["violation_rate"]
        with (tmp_path / "raw" / name / "epochs.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == run.metrics["epochs"]
        mean = sum(int(r["duration_ns"]) for r in rows) / len(rows) / 1e9
        assert mean == pytest.approx(run.metrics["epoch_s"])
    # The reference has no MPC loop: an empty loop table, with its columns.
    ref = pq.read_table(tmp_path / "raw" / "bh-only" / "loops.parquet")
    assert ref.num_rows == 0 and "reaction_ns" in ref.column_names


def test_write_raw_tables_from_a_result(tmp_path: Path) -> None:
    run = run_crl(crl_scenario(2), "edca", seed=2, duration_ns=300_000_000)
    written = write_raw_tables(run, tmp_path)
    assert [p.name for p in written] == [
        "loops.parquet", "loops.csv", "epochs.parquet", "epochs.csv",
        "ls_messages.parquet", "ls_messages.csv", "timeseries.parquet", "timeseries.csv",
    ]  # fmt: skip
    with (tmp_path / "ls_messages.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(run.tables()["ls_messages"]["flow"])
    for r in rows:
        if r["deliver_ns"]:
            assert int(r["latency_ns"]) == int(r["deliver_ns"]) - int(r["enqueue_ns"])
        else:  # never arrived (still in flight at the end): empty cells, not -1
            assert r["latency_ns"] == ""
    ts = pq.read_table(tmp_path / "timeseries.parquet").to_pydict()
    assert sum(ts["bh_bytes"]) == run.bh_bytes
