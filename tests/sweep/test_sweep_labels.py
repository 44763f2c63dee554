"""Sweep tables, aggregate files and figures: the reference bound labelled "(not
deployable)", the shared per-policy styles, short-run warnings counted and listed, every
figure format. Long-table rows are built by hand (no simulation)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pytest
from rich.console import Console

from coorp import UsageError
from coorp.report import BH_ONLY, policy_style
from coorp.sweep import (
    WARNING_SEP,
    aggregate,
    aggregate_warnings,
    plot_sweep,
    render_aggregate,
    sweep_figures,
    write_aggregate,
)

ORACLE = "oracle (not deployable)"
POLICIES = ("edca", "coorp", "coorp-paper", "oracle", BH_ONLY)
SHORT = "no epoch in 1 s: epoch time is null; run longer (--duration)"


def rows(
    *, scenarios: tuple[tuple[str, int], ...] = (("crl-2", 2), ("crl-5", 5)), seeds: int = 3
) -> list[dict[str, Any]]:
    """The long table of a sweep: every policy warns "no epoch" in seed 1 only."""
    out = []
    for sc, team in scenarios:
        for p, policy in enumerate(POLICIES):
            for seed in range(1, seeds + 1):
                warned = [SHORT] if seed == 1 else []
                if policy == "oracle" and seed == 1:
                    warned.append("epoch time from 2 epochs only in 1 s")
                for metric, value in (("violation_rate", 0.01 * (p + seed)),
                                      ("utilization", 0.5 + 0.05 * p), ("bh_mbps", 100.0 + p),
                                      ("epoch_s", 2.0 + 0.1 * seed)):  # fmt: skip
                    out.append({
                        "scenario": sc, "team_size": team, "policy": policy, "seed": seed,
                        "overrides": "", "duration_s": 1.0, "code_version": "v",
                        "metric": metric, "value": value, "infeasible": None,
                        "warnings": WARNING_SEP.join(warned),
                    })  # fmt: skip
    return out


def text_of(table: Any) -> str:
    console = Console(record=True, width=220, file=io.StringIO())
    console.print(table)
    return " ".join(console.export_text().split())


def test_aggregate_has_deployable_and_warned_columns() -> None:
    agg = aggregate(rows())
    by = {(a["scenario"], a["policy"], a["metric"]): a for a in agg}
    assert by[("crl-2", "oracle", "utilization")]["deployable"] is False
    assert by[("crl-2", "coorp", "utilization")]["deployable"] is True
    assert by[("crl-2", BH_ONLY, "bh_mbps")]["deployable"] is None
    assert {a["warned"] for a in agg} == {1}  # seed 1 of 3, in every group
    assert {a["runs"] for a in agg} == {3}


def test_distinct_warnings_with_their_counts() -> None:
    ws = aggregate_warnings(rows(scenarios=(("crl-2", 2),)))
    oracle = [w for w in ws if w["policy"] == "oracle"]
    assert [(w["warning"], w["count"], w["runs"]) for w in oracle] == [
        (SHORT, 1, 3), ("epoch time from 2 epochs only in 1 s", 1, 3),
    ]  # fmt: skip
    assert len(ws) == len(POLICIES) + 1  # one text each, two for the oracle


def test_aggregate_files_carry_the_warnings_and_the_flag(tmp_path: Path) -> None:
    long = rows()
    agg = aggregate(long)
    write_aggregate(agg, tmp_path, {"code_version": "v"}, aggregate_warnings(long))
    data = json.loads((tmp_path / "aggregate.json").read_text())
    assert {"scenario": "crl-5", "overrides": "", "policy": "oracle", "warning": SHORT,
            "count": 1, "runs": 3} in data["warnings"]  # fmt: skip
    header = (tmp_path / "aggregate.csv").read_text().splitlines()[0]
    assert '"deployable"' in header and '"warned"' in header


def test_the_table_labels_the_bound_and_lists_the_warnings() -> None:
    long = rows()
    text = text_of(render_aggregate(aggregate(long), title="t", warnings=aggregate_warnings(long)))
    assert ORACLE in text and text.count("(not deployable)") == 2  # one row per scenario
    assert "warnings:" in text
    assert f"crl-5 · oracle: {SHORT} (1 of 3 runs)" in text
    assert "(--duration)" in text  # rich markup kept every character


def _legend(fig: Any, ax: int = 0) -> list[str]:
    return [t.get_text() for t in fig.axes[ax].get_legend().get_texts()]


def _figure_legend(fig: Any) -> list[str]:
    """miss_vs_utilization has one legend for all panels, below them."""
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def test_sweep_figures_use_the_shared_styles_and_labels() -> None:
    figs = sweep_figures(aggregate(rows()))
    try:
        assert set(figs) == {"miss_vs_utilization", "team_size"}
        expected = ["edca", "coorp", "coorp-paper", ORACLE]  # no BH-only in the figures
        assert _figure_legend(figs["miss_vs_utilization"]) == expected
        assert all(ax.get_legend() is None for ax in figs["miss_vs_utilization"].axes)
        assert _legend(figs["team_size"], 0) == expected
        for ax in figs["team_size"].axes:
            lines = {ln.get_label(): ln for ln in ax.get_lines()}
            for name, label in zip(["edca", "coorp", "coorp-paper", "oracle"], expected,
                                   strict=True):  # fmt: skip
                style, line = policy_style(name), lines[label]
                assert mcolors.same_color(line.get_color(), style.color), name
                assert line.get_marker() == style.marker, name
                solid = style.linestyle == "-"
                assert (line.get_linestyle() == "-") == solid, name
        ax = figs["miss_vs_utilization"].axes[0]
        points = {c.get_label(): c.lines[0] for c in ax.containers}  # errorbar containers
        for name, label in zip(["coorp-paper", "oracle"], expected[2:], strict=True):
            assert mcolors.same_color(points[label].get_color(), policy_style(name).color)
            assert points[label].get_marker() == policy_style(name).marker
    finally:
        for fig in figs.values():
            plt.close(fig)


def test_sweep_figures_in_every_format(tmp_path: Path) -> None:
    paths = plot_sweep(aggregate(rows()), tmp_path, formats=("svg", "pdf", "png"))
    assert sorted(p.name for p in paths) == sorted(
        f"{stem}.{fmt}" for stem in ("miss_vs_utilization", "team_size")
        for fmt in ("png", "pdf", "svg")
    )  # fmt: skip
    magic = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}
    for p in paths:
        assert p.read_bytes().startswith(magic[p.suffix]), p
    with pytest.raises(UsageError, match="--format 'gif': unknown figure format 'gif'"):
        plot_sweep(aggregate(rows()), tmp_path, formats="gif")


def test_legend_labels_name_an_override_by_its_last_key() -> None:
    from coorp.sweep._plots import _short

    assert _short("workload.mpc.phase=random") == "phase=random"
    assert _short("workload.mpc.phase=random; seed=2") == "phase=random; seed=2"
    assert _short("defaults") == "defaults"
