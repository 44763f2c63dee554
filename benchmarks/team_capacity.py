"""Issue 15's targets checked on saved ``coorp bench team`` results (docs/sizing.md).

1. With bulk on the namespace bottleneck: Coorp's CSLV (coorp carrier, coordinated bulk)
   ≥ 2× that of DDS and Zenoh next to uncoordinated (plain TCP) bulk, in one run. A
   carrier whose every cell failed has a CSLV below the smallest load measured: the
   ratio is then a lower bound (``>``).
2. Without bulk: Coorp's RTT p50 within 1.2× raw UDP's — per repetition the median over
   cells of p50(coorp)/p50(udp) at the same N, f, S (cells both carriers passed), then
   mean ± 95% CI over repetitions.
3. A full sweep (N ≤ 8, 3 rates, 3 sizes, ≥ 3 carriers) in ≤ 10 minutes: the run's wall
   time from its manifest.

Usage::

    python benchmarks/team_capacity.py --bulk results/bench/team-bulk \\
        --nobulk results/bench/team-nobulk [--full results/bench/team-full]
    # one figure and table from the cells of several runs (DIR or DIR:carrier,carrier):
    python benchmarks/team_capacity.py --figure docs/figures/sizing_cslv.png \\
        --from results/bench/team-nobulk-frag --from results/bench/team-nobulk:sim,zenoh-rel
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

from coorp.stats import mean_ci
from coorp.teambench._report import load_result, plot_cslv, render_tables
from coorp.teambench._run import TeamBenchResult, summarize_fits


def _load(d: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((d / "results.json").read_text())
    return data


def _per_rep(fit: dict[str, Any]) -> list[tuple[float | None, str]]:
    """(CSLV or None, kind): kind 'value', 'above' (all passed), 'below' (all failed)."""
    out: list[tuple[float | None, str]] = []
    for f in fit["per_rep"]:
        if f["cslv_Bps"] is not None:
            out.append((f["cslv_Bps"], "value"))
        elif f["all_pass"]:
            out.append((f["high_Bps"], "above"))
        else:
            out.append((f["low_Bps"], "below"))
    return out


def bulk_target(res: dict[str, Any]) -> list[str]:
    fits = {(f["carrier"], f["bulk"]): f for f in res["fits"]}
    lines = []
    ours = fits.get(("coorp", "coorp"))
    if ours is None:
        return ["no coorp carrier with coordinated bulk in this run"]
    mine = _per_rep(ours)
    ci = mean_ci([v for v, k in mine if k == "value" and v is not None])
    above = [v for v, k in mine if k == "above" and v is not None]
    lines.append(f"coorp + coordinated bulk: CSLV {ci.mean / 1e3:,.0f} ± {ci.ci95 / 1e3:,.0f} kB/s "
                 f"({ci.n} of {len(mine)} repetitions with a threshold; {len(above)} with every "
                 f"cell passed, CSLV > {max(above, default=0) / 1e3:,.0f} kB/s)")  # fmt: skip
    for other in (("coorp", "tcp"), ("dds-rel", "tcp"), ("dds-be", "tcp"), ("zenoh-rel", "tcp"),
                  ("zenoh-be", "tcp")):  # fmt: skip
        if other not in fits:
            continue
        theirs = _per_rep(fits[other])
        ratios, met = [], 0
        for (a, ka), (b, kb) in zip(mine, theirs, strict=True):
            # Ours above its largest load or theirs below its smallest: a lower bound on
            # the ratio; ours below or theirs above: an upper bound (cannot show >= 2x).
            if a is None or b is None or ka == "below" or kb == "above":
                ratios.append("n/a")
                continue
            r = a / b
            ratios.append(f"{'>' if ka != 'value' or kb == 'below' else ''}{r:.1f}×")
            met += r >= 2
        lines.append(f"  vs {other[0]} + {other[1]} bulk: ratio per repetition "
                     f"{', '.join(ratios)}; ≥ 2× in {met} of {len(theirs)}")  # fmt: skip
    return lines


def p50_ratio(res: dict[str, Any], carrier: str, baseline: str) -> list[float]:
    """Per repetition, the median over the cells both passed of ``carrier``'s p50 round
    trip over ``baseline``'s (no bulk)."""
    cells = res["cells"]
    key = ("robots", "rate_hz", "size_bytes", "rep")
    base = {
        tuple(c[k] for k in key): c
        for c in cells
        if c["carrier"] == baseline and c["bulk"] == "none"
    }
    per_rep: dict[int, list[float]] = {}
    for c in cells:
        if c["carrier"] != carrier or c["bulk"] != "none":
            continue
        u = base.get(tuple(c[k] for k in key))
        if u is None or not (c["ok"] and u["ok"]):
            continue
        per_rep.setdefault(c["rep"], []).append(c["rtt_p50_ms"] / u["rtt_p50_ms"])
    return [statistics.median(v) for _, v in sorted(per_rep.items())]


def p50_target(res: dict[str, Any]) -> list[str]:
    med = p50_ratio(res, "coorp", "udp")
    if not med:
        return ["no coorp/udp cells to compare"]
    ci = mean_ci(med)
    verdict = "met" if ci.mean <= 1.2 else "not met"
    lines = [f"p50 coorp / udp (median over cells both passed): {ci.mean:.2f} ± {ci.ci95:.2f} "
             f"over {ci.n} repetitions (target ≤ 1.2): {verdict}"]  # fmt: skip
    # With the MAC-only carrier in the run: how much of the gap authentication is.
    for carrier, baseline in (("udp-mac", "udp"), ("coorp", "udp-mac")):
        got = p50_ratio(res, carrier, baseline)
        if got:
            m = mean_ci(got)
            lines.append(
                f"p50 {carrier} / {baseline}: {m.mean:.2f} ± {m.ci95:.2f} over {m.n} repetitions"
            )
    return lines


def _merge(sources: list[str]) -> TeamBenchResult:
    parts = []
    for src in sources:
        path, _, names = src.partition(":")
        parts.append(load_result(Path(path), names.split(",") if names else None))
    if not parts:
        raise SystemExit("--figure needs at least one --from DIR")
    first = parts[0]
    rows = [r for p in parts for r in p.rows]
    network = next((p.network for p in parts if p.network), {})
    return TeamBenchResult(first.config, rows, summarize_fits(rows, first.config), [], network,
                           sum(p.wall_s for p in parts))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bulk", type=Path)
    ap.add_argument("--nobulk", type=Path)
    ap.add_argument("--full", type=Path, help="a default sweep's output (its wall time)")
    ap.add_argument("--figure", type=Path, help="draw the cells of the --from runs here")
    ap.add_argument("--from", dest="sources", action="append", default=[],
                    help="DIR or DIR:carrier,carrier (repeatable)")  # fmt: skip
    args = ap.parse_args()
    if args.figure:
        merged = _merge(args.sources)
        plot_cslv(merged, args.figure)
        render_tables(merged, Console(width=160))
        print(f"figure: {args.figure}")
    if args.bulk:
        print("\n".join(bulk_target(_load(args.bulk))))
    if args.nobulk:
        print("\n".join(p50_target(_load(args.nobulk))))
    if args.full:
        res = _load(args.full)
        cfg = res["config"]
        print(f"full sweep: {len(res['cells'])} cells, carriers {cfg['carriers']}, "
              f"{res['wall_s'] / 60:.1f} min (target ≤ 10)")  # fmt: skip


if __name__ == "__main__":
    main()
