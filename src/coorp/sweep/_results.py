"""Sweep results on disk and on screen: the long table, the aggregate (mean, 95% CI, n),
the rich table, and reading a saved result folder back for ``coorp plot``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from coorp._errors import UsageError
from coorp._tables import parquet_available, read_csv_rows, write_table
from coorp.policies import policy_label
from coorp.report import BH_ONLY, deployable
from coorp.scenario import parse_scenario
from coorp.stats import mean_ci
from coorp.sweep._overrides import split_overrides
from coorp.sweep._run import METRICS, join_warnings, split_warnings

__all__ = [
    "LONG_COLUMNS",
    "aggregate",
    "aggregate_warnings",
    "clean_json",
    "load_rows",
    "render_aggregate",
    "write_aggregate",
    "write_rows",
]

#: Columns of ``runs.parquet`` / ``runs.csv`` (``warnings``: the run's short-run
#: warnings, separated by " | "; empty: none).
LONG_COLUMNS = ("scenario", "team_size", "policy", "seed", "overrides", "duration_s",
                "code_version", "metric", "value", "infeasible", "warnings")  # fmt: skip

#: Columns a table written by an older version may lack, with their value then.
_OPTIONAL: dict[str, Any] = {"warnings": ""}

#: Group key of the aggregate.
_GROUP = ("scenario", "team_size", "overrides", "policy", "metric")


def aggregate(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, 95% CI half-width (Student's t), low/high and ``n`` over seeds, per scenario,
    overrides, policy and metric. ``n`` counts the runs where the value exists; ``runs``
    all runs; infeasible runs count in ``infeasible`` and nowhere else; ``warned``
    counts the runs with a short-run warning (:func:`aggregate_warnings` has the texts);
    ``deployable`` is false for a reference bound (``oracle``), null for the BH-only
    reference."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in _GROUP), []).append(r)
    out = []
    for key, rs in groups.items():
        feasible = [r for r in rs if not r["infeasible"]]
        ci = mean_ci(r["value"] for r in feasible)
        reasons = sorted({r["infeasible"] for r in rs if r["infeasible"]})
        group = dict(zip(_GROUP, key, strict=True))
        out.append({
            **group, "deployable": deployable(group["policy"]), "mean": ci.mean,
            "ci95": ci.ci95, "low": ci.low, "high": ci.high, "n": ci.n, "runs": len(rs),
            "infeasible": len(rs) - len(feasible), "reason": "; ".join(reasons) or None,
            "warned": sum(1 for r in rs if r.get("warnings")),
        })  # fmt: skip
    return out


def aggregate_warnings(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct short-run warning per scenario, overrides and policy, with how many
    of its ``runs`` gave it: ``{scenario, overrides, policy, warning, count, runs}``."""
    seen: dict[tuple[str, str, str], dict[tuple[Any, ...], list[str]]] = {}
    for r in rows:  # one row per run and metric: each run once
        run = (r["seed"], r["team_size"])
        at = (r["scenario"], r["overrides"], r["policy"])
        seen.setdefault(at, {})[run] = split_warnings(r.get("warnings"))
    out = []
    for (sc, ov, policy), runs in seen.items():
        counts: dict[str, int] = {}
        for ws in runs.values():
            for w in dict.fromkeys(ws):
                counts[w] = counts.get(w, 0) + 1
        out += [{"scenario": sc, "overrides": ov, "policy": policy, "warning": w,
                 "count": k, "runs": len(runs)} for w, k in counts.items()]  # fmt: skip
    return out


def clean_json(value: Any) -> Any:
    """NaN and infinities become null (strict JSON)."""
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _columns(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    return {k: [r[k] for r in rows] for k in names}


def write_rows(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """``runs.parquet`` and ``runs.csv``: the long table."""
    return write_table(out / "runs", _columns(rows, LONG_COLUMNS))


def write_aggregate(
    agg: Sequence[dict[str, Any]],
    out: Path,
    meta: dict[str, Any],
    warnings: Sequence[dict[str, Any]] = (),
) -> list[Path]:
    """``aggregate.json`` (``meta``, the distinct short-run ``warnings`` of
    :func:`aggregate_warnings` and the rows, NaN as null) and ``aggregate.csv``/``.parquet``."""
    path = out / "aggregate.json"
    data = {**meta, "warnings": list(warnings), "rows": list(agg)}
    path.write_text(json.dumps(clean_json(data), indent=2) + "\n")
    names = list(agg[0]) if agg else []
    return [path, *write_table(out / "aggregate", _columns(agg, names))]


def load_rows(folder: Path) -> list[dict[str, Any]]:
    """The long table of a sweep folder (``runs.parquet``, or ``runs.csv`` where pyarrow
    is not installed), or of a ``coorp compare --out`` folder (``compare.json`` +
    ``manifest.json``: one seed, n = 1)."""
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a directory")
    runs = folder / "runs.parquet"
    if runs.is_file() and parquet_available():
        import pyarrow.parquet as pq

        table = pq.read_table(runs)
        return _long_rows(runs, table.column_names, table.to_pylist())
    runs_csv = folder / "runs.csv"
    if runs_csv.is_file():  # written without pyarrow (make demo's .venv), or read without
        records = read_csv_rows(runs_csv)
        return _long_rows(runs_csv, list(records[0]) if records else list(LONG_COLUMNS), records)
    if runs.is_file():
        raise UsageError(f"reading {runs} needs pyarrow: pip install 'coorp[parquet]'")
    cmp = folder / "compare.json"
    if cmp.is_file():
        return _rows_from_compare(folder, json.loads(cmp.read_text()))
    raise UsageError(
        f"{folder} has neither runs.parquet (coorp sweep --out) nor compare.json "
        "(coorp compare --out); nothing to plot"
    )


def _long_rows(
    source: Path, columns: Sequence[str], records: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The long table's rows from a file's columns and records (Parquet or CSV)."""
    missing = sorted(set(LONG_COLUMNS) - set(columns) - set(_OPTIONAL))
    if missing:
        raise UsageError(f"{source} is not a coorp sweep table (missing columns {missing})")
    names = [c for c in LONG_COLUMNS if c in columns]
    return [{**_OPTIONAL, **{k: r[k] for k in names}} for r in records]


def _rows_from_compare(folder: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    team = 0
    manifest = folder / "manifest.json"
    if manifest.is_file():
        sc = json.loads(manifest.read_text()).get("scenario")
        if isinstance(sc, dict):
            team = len(parse_scenario(sc, source=str(manifest)).workers)
    rows = []
    blocks = dict(data["policies"])
    blocks[BH_ONLY] = {**data["reference"], "infeasible": None}
    for policy, block in blocks.items():
        flat: dict[str, float] = {}
        for k, v in block.items():
            if isinstance(v, dict):
                stem, unit = (k[:-3], "_ms") if k.endswith("_ms") else (k, "")
                flat.update({f"{stem}_{q}{unit}": _num(x) for q, x in v.items()})
            elif v is None or (isinstance(v, int | float) and not isinstance(v, bool)):
                flat[k] = _num(v)
        for metric in [m for m in METRICS if m in flat]:
            rows.append({
                "scenario": data["scenario"], "team_size": team, "policy": policy,
                "seed": data["seed"], "overrides": "", "duration_s": data["duration_s"],
                "code_version": "", "metric": metric, "value": flat[metric],
                "infeasible": block.get("infeasible"),
                "warnings": join_warnings(block.get("warnings") or []),
            })  # fmt: skip
    return rows


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _cell(a: dict[str, Any] | None, fmt: str, *, pct: bool = False) -> str:
    if a is None or a["n"] == 0:
        return "-"
    mean, ci = a["mean"], a["ci95"]
    scale = 100 if pct else 1
    text = f"{mean * scale:{fmt}}{'%' if pct else ''}"
    if math.isfinite(ci):
        text += f" ± {ci * scale:{fmt}}"
    if a["n"] < a["runs"] - a["infeasible"]:
        text += f" (n={a['n']})"
    return text


def render_aggregate(
    agg: Sequence[dict[str, Any]],
    *,
    title: str,
    warnings: Sequence[dict[str, Any]] = (),
) -> Table:
    """One row per scenario, overrides and policy: mean ± 95% CI half-width over seeds.
    A reference bound is labelled "(not deployable)"; the caption lists infeasible
    policies and the short-run ``warnings`` (:func:`aggregate_warnings`)."""
    by: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for a in agg:
        by.setdefault((a["scenario"], a["overrides"], a["policy"]), {})[a["metric"]] = a
    multi_sc = len({k[0] for k in by}) > 1
    shared, shown = split_overrides(list(dict.fromkeys(k[1] for k in by)))
    multi_ov = len(shown) > 1

    def where(sc: str, ov: str, policy: str) -> str:
        return " · ".join([*([sc] if multi_sc else []), *([shown[ov]] if multi_ov else []),
                           policy])  # fmt: skip

    t = Table(title=escape(title), caption_justify="left")
    cols = [*(["scenario"] if multi_sc else []), *(["overrides"] if multi_ov else []), "policy",
            "miss rate", "reaction p99 ms", "BH Mb/s", "other Mb/s", "util.", "epoch s",
            "epoch/EDCA", "seeds"]  # fmt: skip
    for c in cols:
        left = c in ("scenario", "overrides", "policy")
        t.add_column(c, justify="left" if left else "right")
    notes = []
    for (sc, ov, policy), m in by.items():
        lead = [*([sc] if multi_sc else []), *([shown[ov]] if multi_ov else [])]
        lead = [escape(x) for x in [*lead, policy_label(policy)]]
        first = next(iter(m.values()))
        runs, infeasible = first["runs"], first["infeasible"]
        if infeasible == runs:
            t.add_row(*lead, "infeasible", *["-"] * 6, str(runs))
            notes.append(f"{where(sc, ov, policy)}: {first['reason']}")
            continue
        if infeasible:
            notes.append(f"{where(sc, ov, policy)}: infeasible in {infeasible} of {runs} runs: "
                         f"{first['reason']}")  # fmt: skip
        if policy == BH_ONLY:
            t.add_row(*lead, "-", "-", _cell(m.get("bh_mbps"), ".1f"),
                      _cell(m.get("other_mbps"), ".1f"), "ref.", _cell(m.get("epoch_s"), ".2f"),
                      "-", str(runs))  # fmt: skip
            continue
        t.add_row(
            *lead, _cell(m.get("violation_rate"), ".1f", pct=True),
            _cell(m.get("reaction_p99_ms"), ".1f"), _cell(m.get("bh_mbps"), ".1f"),
            _cell(m.get("other_mbps"), ".1f"), _cell(m.get("utilization"), ".0f", pct=True),
            _cell(m.get("epoch_s"), ".2f"),
            _cell(m.get("epoch_vs_edca"), ".2f"), str(runs - infeasible),
        )  # fmt: skip
    t.caption = (
        "mean ± 95% CI half-width over seeds (Student's t); (n=k): the value exists in k "
        f"runs only (e.g. no epoch finished); utilization = BH Mb/s / {BH_ONLY} run; "
        "BH Mb/s: the team's bulk data; other Mb/s: traffic outside the team"
    )
    per_flow = []
    for (sc, ov, policy), m in by.items():
        parts = []
        for prefix, label, fmt, pct in (("flow_miss_rate_", "miss", ".1f", True),
                                        ("flow_mbps_", "Mb/s", ".1f", False)):  # fmt: skip
            cells = [f"{k.removeprefix(prefix)} {_cell(a, fmt, pct=pct)}"
                     for k, a in sorted(m.items()) if k.startswith(prefix)]  # fmt: skip
            if cells:
                parts.append(f"{label} " + ", ".join(cells))
        if parts:
            per_flow.append(f"  {where(sc, ov, policy)}: " + " · ".join(parts))
    if per_flow:
        t.caption += "\nper flow:\n" + escape("\n".join(per_flow))
    if shared:
        t.caption += "\n" + escape(f"every run: {shared}")
    if notes:
        t.caption += "\n" + escape("\n".join(notes))
    if warnings:
        lines = [f"  {where(w['scenario'], w['overrides'], w['policy'])}: {w['warning']} "
                 f"({w['count']} of {w['runs']} runs)" for w in warnings]  # fmt: skip
        t.caption += "\nwarnings:\n" + escape("\n".join(lines))
    return t
