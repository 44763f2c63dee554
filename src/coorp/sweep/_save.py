"""Everything a sweep leaves in its output folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coorp._manifest import write_json
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
    ``miss_vs_utilization.<fmt>``, ``team_size.<fmt>`` (each of ``formats``) and
    ``manifest.json``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    agg = aggregate(rows)
    written = write_rows(rows, out)
    meta = {"code_version": result.code_version}
    written += write_aggregate(agg, out, meta, aggregate_warnings(rows))
    figures = plot_sweep(agg, out, formats)
    written += figures
    write_json(out / "manifest.json", {**manifest, "figures": [f.name for f in figures]})
    return [*written, out / "manifest.json"]
