"""Raw tables next to a result: per MPC loop, per epoch, per LS message, 10 ms series.

:func:`write_raw_tables` writes the tables of one run (:meth:`CrlResult.tables`) as
Parquet and CSV; :func:`write_comparison_raw_tables` writes every run of a comparison
into ``raw/<policy>/`` (and ``raw/bh-only/``). Times are integer nanoseconds of
simulated time; a null (empty CSV cell) is a value that does not exist (an abandoned
loop's reaction, an LS message that never arrived).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coorp._tables import write_table
from coorp.workload import CrlResult, FleetResult

if TYPE_CHECKING:
    from coorp.report._compare import Comparison

__all__ = ["RAW_TABLES", "write_comparison_raw_tables", "write_raw_tables"]

#: The raw tables, in the order they are written (file stems); a fleet's runs have
#: ``loops`` (one row per robot's sample), ``cells`` and ``handovers``.
RAW_TABLES = ("loops", "epochs", "ls_messages", "timeseries", "cells", "handovers")

Tables = Mapping[str, Mapping[str, Any]]


def write_raw_tables(result: CrlResult | FleetResult | Tables, out: Path) -> list[Path]:
    """Write ``loops``, ``epochs``, ``ls_messages`` and ``timeseries`` (``.parquet`` and
    ``.csv``) of one run into ``out``; return the paths written.

    ``result`` is a :class:`~coorp.workload.CrlResult` or what its ``tables()`` returned
    (e.g. carried back from a worker process). A run without a table (no time series
    sampled) writes no file for it.
    """
    tables = result.tables() if hasattr(result, "tables") else result
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in RAW_TABLES:
        if name in tables:
            written += write_table(out / name, tables[name])
    return written


def write_comparison_raw_tables(cmp: Comparison, out: Path) -> list[Path]:
    """Each run's raw tables into ``out/raw/<name>/`` (policies and the reference).

    Runs that carry no tables (infeasible policies, runs from an old cache) are skipped.
    """
    written: list[Path] = []
    for run in [*cmp.runs.values(), cmp.reference]:
        raw = getattr(run, "raw", None)
        if raw:
            written += write_raw_tables(raw, out / "raw" / run.name)
    return written
