"""Reference bounds labelled "(not deployable)" in every table, JSON and figure of a
comparison; the shipped styles of ``oracle`` and ``coorp-paper``; short-run warnings in
the JSON and the table. Comparisons are built by hand (no simulation)."""

from __future__ import annotations

import io
import json
from typing import Any

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest
from rich.console import Console

from coorp.cli._compare import render_comparison
from coorp.policies import policy_label, policy_names
from coorp.report import (
    BH_ONLY,
    Comparison,
    PolicyRun,
    comparison_figures,
    deployable,
    policy_style,
)

ORACLE = "oracle (not deployable)"


def run(name: str, *, bh_mbps: float = 300.0, epochs: int = 4, warnings: Any = ()) -> PolicyRun:
    metrics = {
        "violation_rate": 0.01, "reaction_ms": {"p50": 10.0, "p90": 12.0, "p99": 20.0},
        "ls_latency_ms": {"p50": 1.0, "p99": 5.0}, "bh_mbps": bh_mbps,
        "epoch_s": 2.0 if epochs else float("nan"), "loops": 30, "epochs": epochs,
        "lag_ms_max": 0.0, "warnings": list(warnings),
    }  # fmt: skip
    return PolicyRun(
        name=name, metrics=metrics, reaction_ms=np.linspace(5.0, 30.0, 30),
        ls_hw_depths=np.array([0, 1, 2, 2, 3]), policy_stats={}, wall_s=0.0, events=1,
    )  # fmt: skip


def comparison(names: list[str], *, ref_mbps: float = 400.0, **kw: Any) -> Comparison:
    return Comparison(
        scenario="hand-made", seed=1, duration_s=1.0, deadline_ms=33.0,
        runs={n: run(n, **kw) for n in names},
        reference=run(BH_ONLY, bh_mbps=ref_mbps, warnings=kw.get("warnings", ())),
    )  # fmt: skip


def table_text(cmp: Comparison) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(render_comparison(cmp))
    return console.export_text()


# -- labels -------------------------------------------------------------------------------


def test_labels_and_deployable_flags_of_the_registry() -> None:
    assert policy_label("oracle") == ORACLE and policy_label("coorp") == "coorp"
    assert deployable("oracle") is False and deployable("edca") is True
    assert deployable(BH_ONLY) is None and deployable("not-registered") is None


def test_the_table_and_json_label_the_reference_bound() -> None:
    cmp = comparison(["edca", "oracle", "coorp"])
    text = table_text(cmp)
    assert ORACLE in text
    assert text.count("(not deployable)") == 1  # only the oracle
    data = cmp.to_json()
    assert [data["policies"][n]["deployable"] for n in cmp.runs] == [True, False, True]
    rows = {r["policy"]: r for r in cmp.rows()}  # compare.csv
    assert rows["oracle"]["deployable"] is False and rows["edca"]["deployable"] is True


def _legend(fig: Any, ax: int = 0) -> list[str]:
    legend = fig.axes[ax].get_legend()
    return [t.get_text() for t in legend.get_texts()]


def test_every_comparison_figure_labels_the_reference_bound() -> None:
    figs = comparison_figures(comparison(["edca", "oracle", "coorp-paper"]))
    try:
        cdf = _legend(figs["reaction_cdf"])
        assert cdf == ["edca (30 loops)", f"{ORACLE} (30 loops)", "coorp-paper (30 loops)"]
        assert _legend(figs["ls_queue_depth"]) == ["edca", ORACLE, "coorp-paper"]
        for ax in figs["utilization_epoch"].axes:  # bar labels, the qualifier on its own line
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert ticks == ["edca", "oracle\n(not deployable)", "coorp-paper"]
        # The curves are drawn in the shared styles.
        lines = {ln.get_label(): ln for ln in figs["reaction_cdf"].axes[0].get_lines()}
        oracle = lines[f"{ORACLE} (30 loops)"]
        assert mcolors.same_color(oracle.get_color(), policy_style("oracle").color)
        assert oracle.get_linestyle() == "--"  # a dash pattern, not solid
    finally:
        for fig in figs.values():
            plt.close(fig)


# -- styles -------------------------------------------------------------------------------


def _lightness(color: str) -> float:
    r, g, b = mcolors.to_rgb(color)
    return (max(r, g, b) + min(r, g, b)) / 2


def test_oracle_and_coorp_paper_have_proper_shipped_styles() -> None:
    oracle, paper, coorp = (policy_style(n) for n in ("oracle", "coorp-paper", "coorp"))
    # The bound: black, dashed (long dashes: not schedwifi's "--").
    assert oracle.color == "#000000"
    assert isinstance(oracle.linestyle, tuple) and len(oracle.linestyle[1]) == 2
    assert oracle.linestyle != policy_style("schedwifi").linestyle
    # COORP as published: coorp's hue, lighter, dotted (dashes no longer than the gaps).
    hue = [mcolors.rgb_to_hsv(mcolors.to_rgb(s.color))[0] for s in (paper, coorp)]
    assert hue[0] == pytest.approx(hue[1], abs=0.03)
    assert _lightness(paper.color) > _lightness(coorp.color)
    assert isinstance(paper.linestyle, tuple)
    on, off = paper.linestyle[1]
    assert on <= 1 < off
    # Every registered policy and the reference: its own colour and its own line.
    names = [*policy_names(), BH_ONLY]
    styles = [policy_style(n) for n in names]
    assert len({s.color for s in styles}) == len(names)
    assert len({(s.color, str(s.linestyle), s.marker) for s in styles}) == len(names)
    assert len({s.marker for s in styles}) == len(names)


# -- warnings -----------------------------------------------------------------------------


def test_short_run_warnings_in_the_json_and_the_table() -> None:
    warn = "no epoch in 1 s: epoch time is null (the first epoch starts at 1.20 s at the earliest)"
    cmp = comparison(["edca", "oracle"], epochs=0, warnings=[warn])
    data = cmp.to_json()
    assert data["policies"]["edca"]["warnings"] == [warn]
    assert data["reference"]["warnings"] == [warn]
    assert data["warnings"] == [f"edca: {warn}", f"oracle: {warn}", f"{BH_ONLY}: {warn}"]
    json.dumps(data, allow_nan=False)
    text = " ".join(table_text(cmp).split())  # the caption wraps
    assert "warnings:" in text and f"oracle: {warn}" in text


def test_a_reference_without_bulk_data_warns_every_policy() -> None:
    data = comparison(["edca"], ref_mbps=0.0).to_json()
    assert data["policies"]["edca"]["utilization"] is None
    (w,) = data["policies"]["edca"]["warnings"]
    assert w == "utilization is null: the bh-only reference delivered no bulk data in 1 s"
    assert data["warnings"] == [f"edca: {w}"]


def test_no_warnings_no_caption_lines() -> None:
    cmp = comparison(["edca"])
    assert cmp.to_json()["warnings"] == []
    assert "warnings:" not in table_text(cmp)
