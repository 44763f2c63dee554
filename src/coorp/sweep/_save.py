"""Everything a sweep leaves in its output folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coorp._manifest import write_json
from coorp.report import fleet_cells_from_aggregate, fleet_figures, save_figure
from coorp.sweep._plots import plot_sweep
from coorp.sweep._results import aggregate, aggregate_warnings, write_aggregate, write_rows
from coorp.sweep._run import SweepResult

__all__ = ["save_sweep"]


def save_sweep(
    result: SweepResult,
    out: Path,
    manifest: dict[str, Any],
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """``runs.parquet``/``.csv`` (long table), ``aggregate.json``/``.csv``/``.parquet``,
    ``miss_vs_utilization.<fmt>``, ``team_size.<fmt>``, for fleets ``fleet_channels.<fmt>``
    and ``fleet_cells.<fmt>`` (each of ``formats``) and ``manifest.json``; return the
    paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    agg = aggregate(rows)
    written = write_rows(rows, out)
    meta = {"code_version": result.code_version}
    written += write_aggregate(agg, out, meta, aggregate_warnings(rows))
    figures = plot_sweep(agg, out, formats)
    figures += _fleet_figures(agg, out, formats)
    written += figures
    write_json(out / "manifest.json", {**manifest, "figures": [f.name for f in figures]})
    return [*written, out / "manifest.json"]


def _fleet_figures(agg: list[dict[str, Any]], out: Path, formats: Sequence[str]) -> list[Path]:
    """Per channel and per cell, for each fleet scenario of the sweep (named after it when
    the sweep has several)."""
    scenarios = list(dict.fromkeys(a["scenario"] for a in agg))
    paths: list[Path] = []
    for sc in scenarios:
        mine = [a for a in agg if a["scenario"] == sc]
        for key in ("channel", "cell"):
            rows = fleet_cells_from_aggregate(mine, key)
            if rows:
                stem = f"fleet_{key}s" if len(scenarios) == 1 else f"fleet_{key}s_{sc}"
                paths += save_figure(fleet_figures(rows, key), out, stem, formats)
    return paths
