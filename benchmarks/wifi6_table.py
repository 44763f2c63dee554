"""The tables of docs/compare.md, "COORP on Wi-Fi 6/7", from saved ``coorp sweep`` runs.

Reads ``aggregate.json`` of each sweep directory given and prints, per scenario and
override combination (``phy.standard=ax`` left out of the labels), one markdown table
row with every policy's miss rate / utilization (mean ± 95% CI half-width over the
seeds, Student's t, as ``coorp sweep`` computes it), and a second table with the
reaction-time p99 and the BH throughput::

    coorp sweep --scenarios crl-5,crl-10 --policies edca,schedwifi,ofdma,rtwt,coorp,\\
        coorp-rtwt,oracle --seeds 1-5 --duration 20 --set phy.standard=ax \\
        --set hw_queue.mode=shared,per_ac --out results/wifi6
    python benchmarks/wifi6_table.py results/wifi6
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ORDER = ("edca", "schedwifi", "ofdma", "rtwt", "coorp", "coorp-rtwt", "oracle")
LABEL = {"oracle": "oracle (not deployable)"}


def _label(overrides: str) -> str:
    parts = [p for p in overrides.split("; ") if p and p != "phy.standard=ax"]
    short = {"hw_queue.mode": "ring", "workload.mpc.phase": "phases"}
    out = []
    for p in parts:
        k, _, v = p.partition("=")
        out.append(f"{short.get(k, k)} {v}")
    return ", ".join(out) or "as shipped"


def _cell(row: dict[str, Any] | None, scale: float, digits: int) -> str:
    if row is None:
        return "–"
    if row.get("infeasible"):
        return "infeasible"
    mean, ci = row["mean"], row["ci95"]
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    ci_txt = (
        ""
        if ci is None or (isinstance(ci, float) and math.isnan(ci))
        else (f" ± {ci * scale:.{digits}f}")
    )
    return f"{mean * scale:.{digits}f}{ci_txt}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="coorp sweep --out directories")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for d in args.dirs:
        rows += json.loads((d / "aggregate.json").read_text())["rows"]
    index = {(r["scenario"], r["overrides"], r["policy"], r["metric"]): r for r in rows}
    groups = list(dict.fromkeys((r["scenario"], r["overrides"]) for r in rows))
    present = {r["policy"] for r in rows}
    policies = [p for p in ORDER if p in present] + sorted(
        p for p in present if p not in ORDER and p != "bh-only"
    )

    def get(g: tuple[str, str], p: str, m: str) -> dict[str, Any] | None:
        return index.get((g[0], g[1], p, m))

    head = "| scenario | variant | " + " | ".join(LABEL.get(p, p) for p in policies) + " |"
    rule = "|---|---|" + "---|" * len(policies)
    print("Miss rate % / utilization %:\n")
    print(head)
    print(rule)
    for g in groups:
        cells = [
            _cell(get(g, p, "violation_rate"), 100, 1)
            + " / "
            + _cell(get(g, p, "utilization"), 100, 0)
            for p in policies
        ]
        print(f"| {g[0]} | {_label(g[1])} | " + " | ".join(cells) + " |")
    print("\nReaction p99 ms / BH Mb/s:\n")
    print(head)
    print(rule)
    for g in groups:
        cells = [
            f"{_cell(get(g, p, 'reaction_p99_ms'), 1, 1)} / {_cell(get(g, p, 'bh_mbps'), 1, 0)}"
            for p in policies
        ]
        print(f"| {g[0]} | {_label(g[1])} | " + " | ".join(cells) + " |")
    ref = {
        f"{r['scenario']} {_label(r['overrides'])}": _cell(r, 1, 0)
        for r in rows
        if r["policy"] == "bh-only" and r["metric"] == "bh_mbps"
    }
    if ref:
        print("\nBH-only reference (MPC off, EDCA), Mb/s: "
              + "; ".join(f"{k} {v}" for k, v in ref.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
