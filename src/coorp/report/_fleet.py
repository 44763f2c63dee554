"""A fleet's comparison per channel and per cell (AP): tables and figures.

Reads the blocks of a fleet run (``channel_miss_rate``, ``channel_utilization``,
``channel_bh_mbps`` and the same per ``cell``, ``coorp.workload.FleetResult.metrics``)
from one comparison (:meth:`Comparison.to_json`) or from a sweep's aggregate (the same
metrics flattened as ``channel_miss_rate_<channel>``, with mean and 95% CI), and draws
each group's miss rate and utilization per policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from rich.markup import escape
from rich.table import Table

from coorp.figures import parse_formats, policy_styles, save_figure
from coorp.policies import policy_label

__all__ = [
    "FleetCell",
    "fleet_cells_from_aggregate",
    "fleet_cells_from_json",
    "fleet_figures",
    "render_fleet",
    "write_fleet_figures",
]

#: One row of a fleet table: a group (channel or cell) under one policy.
FleetCell = dict[str, Any]
_BH_ONLY = "bh-only"


def fleet_cells_from_json(data: dict[str, Any], key: str) -> list[FleetCell]:
    """Rows per ``key`` (``"channel"`` or ``"cell"``) and policy of one comparison's JSON
    (:meth:`Comparison.to_json`); none if it is not a fleet's."""
    rows: list[FleetCell] = []
    for policy, m in data["policies"].items():
        miss = m.get(f"{key}_miss_rate")
        if not isinstance(miss, dict):
            continue
        util = m.get(f"{key}_utilization") or {}
        bh = m.get(f"{key}_bh_mbps") or {}
        for g in miss:
            rows.append({
                "group": g, "policy": policy,
                "miss": (_num(miss.get(g)), None), "util": (_num(util.get(g)), None),
                "bh": (_num(bh.get(g)), None),
            })  # fmt: skip
    return rows


def fleet_cells_from_aggregate(agg: Sequence[dict[str, Any]], key: str) -> list[FleetCell]:
    """The same rows from a sweep's aggregate (mean, 95% CI half-width), one scenario."""
    pattern = re.compile(rf"^{key}_(miss_rate|utilization|bh_mbps)_(.+)$")
    by: dict[tuple[str, str], FleetCell] = {}
    for a in agg:
        m = pattern.match(str(a["metric"]))
        if m is None or a["policy"] == _BH_ONLY:
            continue
        field = {"miss_rate": "miss", "utilization": "util", "bh_mbps": "bh"}[m.group(1)]
        row = by.setdefault((m.group(2), a["policy"]), {"group": m.group(2), "policy": a["policy"]})
        row[field] = (_num(a["mean"]), _num(a["ci95"]))
        row["n"] = a["n"]
    return sorted(by.values(), key=lambda r: (_order(r["group"]), r["policy"]))


def _order(group: str) -> tuple[int, str]:
    return (int(group), "") if group.isdigit() else (10**9, group)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and v is not None else math.nan


def _fmt(v: tuple[float, float | None] | None, spec: str, pct: bool = False) -> str:
    if v is None or math.isnan(v[0]):
        return "-"
    k = 100.0 if pct else 1.0
    mean, ci = v
    text = format(mean * k, spec)
    if ci is not None and not math.isnan(ci):
        text += f" ± {format(ci * k, spec)}"
    return text


def render_fleet(rows: Sequence[FleetCell], *, key: str, title: str) -> Table:
    """A table of ``rows``: each channel (or cell) and policy, miss %, utilization %, Mb/s."""
    t = Table(title=escape(title), caption_justify="left")
    for c in (key, "policy", "miss %", "util. %", "BH Mb/s"):
        t.add_column(c, justify="left" if c in (key, "policy") else "right")
    for r in rows:
        t.add_row(
            escape(r["group"]), escape(policy_label(r["policy"])),
            _fmt(r.get("miss"), ".2f", pct=True), _fmt(r.get("util"), ".1f", pct=True),
            _fmt(r.get("bh"), ".1f"),
        )  # fmt: skip
    t.caption = (
        "per channel: every cell of the channel; miss = the loops sent there (loops lost to "
        "a hand-over apart); util. = learning data delivered there / the BH-only run's; - : "
        "no value (the policy cannot serve that channel, or no BH-only run to compare with)"
    )
    return t


def fleet_figures(rows: Sequence[FleetCell], key: str) -> Figure:
    """Miss rate (top) and utilization (bottom) per ``key`` group, a bar per policy."""
    groups = list(dict.fromkeys(r["group"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    styles = policy_styles(policies)
    at = {(r["group"], r["policy"]): r for r in rows}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 1.1 * len(groups) + 3), 5.6),
                                      sharex=True)  # fmt: skip
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(groups))
    for i, p in enumerate(policies):
        for ax, field in ((top, "miss"), (bottom, "util")):
            vals = [at.get((g, p), {}).get(field, (math.nan, None)) for g in groups]
            mean = np.array([100 * v[0] for v in vals])
            ci = np.array([100 * (v[1] if v[1] is not None and not math.isnan(v[1]) else 0)
                           for v in vals])  # fmt: skip
            pos = x + (i - (len(policies) - 1) / 2) * width
            for xi, m in zip(pos, mean, strict=True):
                if math.isnan(m):  # the policy cannot serve that group
                    ax.text(xi, 1, "infeasible", rotation=90, fontsize=7, ha="center",
                            va="bottom", color="0.4")  # fmt: skip
            ax.bar(pos, np.nan_to_num(mean), width,
                   yerr=ci, label=policy_label(p), color=styles[p].color, hatch=styles[p].hatch,
                   edgecolor="black", linewidth=0.6)  # fmt: skip
    top.set_ylabel("loops missed (%)")
    bottom.set_ylabel("utilization (%)")
    bottom.set_xticks(x, [f"{key} {g}" if key == "channel" else g for g in groups])
    top.legend(fontsize=8, ncol=min(3, len(policies)))
    top.set_title(f"per {key}: loops missed, learning throughput / BH-only run", fontsize=10)
    fig.tight_layout()
    return fig


def write_fleet_figures(
    rows_by_key: Mapping[str, Sequence[FleetCell]], out: Path, formats: Sequence[str] = ("png",)
) -> list[Path]:
    """``fleet_channels.<fmt>`` and ``fleet_cells.<fmt>`` (each key with rows)."""
    formats = parse_formats(formats)
    paths: list[Path] = []
    for key, rows in rows_by_key.items():
        if rows:
            fig = fleet_figures(rows, key)
            paths += save_figure(fig, out, f"fleet_{key}s", formats)
    return paths
