"""Outputs of ``coorp bench team``: JSON, CSV (+ Parquet), manifest, rich tables, figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from coorp._manifest import build_manifest, json_safe, write_json
from coorp._tables import write_table
from coorp.teambench._config import TeamBenchConfig
from coorp.teambench._fit import SEED_REFERENCE, CslvFit
from coorp.teambench._run import TeamBenchResult, machine, summarize_fits

__all__ = ["load_result", "plot_cslv", "render_tables", "to_json", "write_outputs"]

_COLUMNS = (
    "carrier", "bulk", "robots", "rate_hz", "size_bytes", "rep", "load_Bps", "sent", "echoed",
    "loss", "rtt_p50_ms", "rtt_p99_ms", "rtt_max_ms", "ok", "cpu_leader_pct",
    "cpu_robot_mean_pct", "cpu_robot_max_pct", "bulk_mbps", "wall_s", "notes",
)  # fmt: skip
_SEED_RANGE: tuple[float, float] = SEED_REFERENCE["wifi_range_kBps"]  # type: ignore[assignment]
_COLORS = {
    "sim": "#999999", "udp": "#000000", "coorp": "#009E73", "dds-be": "#56B4E9",
    "dds-rel": "#0072B2", "zenoh-be": "#E69F00", "zenoh-rel": "#D55E00",
}  # fmt: skip


def _fit_json(f: CslvFit) -> dict[str, Any]:
    return {
        "cslv_Bps": f.cslv, "low_Bps": f.low, "high_Bps": f.high, "all_pass": f.all_pass,
        "all_fail": f.all_fail, "misclassified": f.misclassified, "cells": f.cells,
        "curve": {"r0_ms": f.r0_ms, "l_sat_Bps": f.l_sat, "crosses_bound_Bps": f.curve_cslv},
        "describe": f.describe(),
    }  # fmt: skip


def to_json(res: TeamBenchResult) -> dict[str, Any]:
    fits = []
    for (carrier, bulk), f in res.fits.items():
        fits.append({
            "carrier": carrier, "bulk": bulk, "cslv_mean_Bps": f["cslv_mean"],
            "cslv_ci95_Bps": f["cslv_ci95"], "repetitions_with_a_cslv": f["cslv_n"],
            "repetitions_censored": f["censored"], "pooled": _fit_json(f["pooled"]),
            "per_rep": [_fit_json(x) for x in f["per_rep"]],
        })  # fmt: skip
    return json_safe({
        "config": res.config.model_dump(), "network": res.network, "machine": machine(),
        "wall_s": res.wall_s, "skipped": res.skipped, "fits": fits,
        "seed_reference": SEED_REFERENCE,
        "cells": [{k: r[k] for k in (*_COLUMNS, "cpu_s")} | {"counters": r.get("counters", {})}
                  for r in res.rows],
    })  # fmt: skip


def load_result(out: Path, carriers: list[str] | None = None) -> TeamBenchResult:
    """A saved run (``out/results.json``) again, its fits recomputed; only ``carriers``
    if given (to draw cells of several runs in one figure)."""
    import json

    data = json.loads((out / "results.json").read_text())
    cfg = TeamBenchConfig.model_validate(data["config"])
    rows = [
        {
            k: v if v is not None else math.inf if k.startswith("rtt_") else math.nan
            for k, v in r.items()
        }
        for r in data["cells"]
        if carriers is None or r["carrier"] in carriers
    ]
    fits = summarize_fits(rows, cfg)
    skipped = list(data.get("skipped", []))
    return TeamBenchResult(cfg, rows, fits, skipped, dict(data.get("network", {})),
                           float(data.get("wall_s", 0.0)))  # fmt: skip


def write_outputs(
    res: TeamBenchResult, out: Path, *, config_path: str | None, formats: list[str]
) -> list[Path]:
    """``results.json``, ``cells.csv``/``.parquet``, ``manifest.json`` and the figure."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json"]
    write_json(written[0], to_json(res))
    cols = {k: [r[k] for r in res.rows] for k in _COLUMNS}
    written += write_table(out / "cells", cols)
    manifest = build_manifest(
        scenario=res.config.model_dump(), scenario_path=config_path, seed=res.config.seed,
        wall_s=res.wall_s,
        extra={"command": "bench team", "network": res.network, "machine": machine()},
    )  # fmt: skip
    write_json(out / "manifest.json", manifest)
    written.append(out / "manifest.json")
    for fmt in formats:
        written.append(plot_cslv(res, out / f"sizing_cslv.{fmt}"))
    return written


def _ms(v: float) -> str:
    return "∞" if not math.isfinite(v) else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def render_tables(res: TeamBenchResult, console: Any) -> None:
    from rich.table import Table

    t = Table(title="CSLV per carrier (offered echo load N·f·S at the p99/loss bound)")
    for col in (
        "carrier",
        "bulk",
        "CSLV kB/s",
        "95% CI",
        "reps",
        "bracket kB/s",
        "misfit",
        "p50 ms (passed cells)",
    ):
        t.add_column(col, justify="left" if col in ("carrier", "bulk") else "right")
    for (carrier, bulk), f in res.fits.items():
        pooled: CslvFit = f["pooled"]
        mean = f["cslv_mean"]
        t.add_row(
            carrier, bulk, f"{mean / 1e3:,.0f}" if math.isfinite(mean) else pooled.describe(),
            f"± {f['cslv_ci95'] / 1e3:,.0f}" if math.isfinite(f["cslv_ci95"]) else "-",
            f"{f['cslv_n']}/{f['cslv_n'] + f['censored']}",
            f"{(pooled.low or 0) / 1e3:,.0f}–{(pooled.high or 0) / 1e3:,.0f}",
            str(pooled.misclassified), _ms(f["rtt_p50_ms"]),
        )  # fmt: skip
    console.print(t)
    cells = Table(title="cells (mean over repetitions)")
    for col in (
        "carrier",
        "bulk",
        "N",
        "f Hz",
        "S B",
        "kB/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "loss",
        "CPU ld/rb %",
        "bulk Mb/s",
    ):
        cells.add_column(col, justify="left" if col in ("carrier", "bulk") else "right")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in res.rows:
        groups.setdefault(
            (r["carrier"], r["bulk"], r["robots"], r["rate_hz"], r["size_bytes"]), []
        ).append(r)
    for (c, b, n, f, s), rs in groups.items():

        def m(k: str, rs: list[dict[str, Any]] = rs) -> float:
            return float(np.mean([r[k] for r in rs]))

        cells.add_row(
            c, b, str(n), f"{f:g}", str(s), f"{n * f * s / 1e3:,.0f}", _ms(m("rtt_p50_ms")),
            _ms(m("rtt_p99_ms")), _ms(m("rtt_max_ms")), f"{m('loss'):.1%}",
            f"{m('cpu_leader_pct'):.0f}/{m('cpu_robot_max_pct'):.0f}", f"{m('bulk_mbps'):.1f}",
        )  # fmt: skip
    console.print(cells)
    for s in res.skipped:
        console.print(f"skipped: {s}")


SEED_REFERENCE_CSLV_KBPS = float(SEED_REFERENCE["cslv_kBps"])  # type: ignore[arg-type]


def _draw_carrier(ax: Any, res: TeamBenchResult, carrier: str, bulk: str, pooled: CslvFit) -> None:
    color = _COLORS.get(carrier)
    rs = [r for r in res.rows if (r["carrier"], r["bulk"]) == (carrier, bulk)]
    x = np.array([r["load_Bps"] / 1e3 for r in rs])
    y = np.array([min(r["rtt_p99_ms"], 1e5) for r in rs])
    ok = np.array([r["ok"] for r in rs])
    ax.scatter(x[ok], y[ok], s=14, color=color, label=f"{carrier}: CSLV {pooled.describe()}")
    ax.scatter(x[~ok], y[~ok], s=14, facecolors="none", edgecolors=color)
    if pooled.r0_ms is not None and pooled.l_sat is not None:
        xs = np.geomspace(max(x.min(), 1e-3), min(x.max(), pooled.l_sat / 1e3 * 0.999), 200)
        ax.plot(xs, pooled.r0_ms / (1 - xs * 1e3 / pooled.l_sat), color=color, lw=1)
    if pooled.cslv is not None:
        ax.axvline(pooled.cslv / 1e3, color=color, lw=0.8, ls="-.")


def plot_cslv(res: TeamBenchResult, path: Path) -> Path:
    """p99 RTT vs offered load per carrier, one panel per bulk mode: the cells (filled:
    passed), the fitted curve, each carrier's CSLV, the bound, and the seed's values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from coorp.teambench._carriers import CARRIERS

    bulks = list(dict.fromkeys(r["bulk"] for r in res.rows))
    media = [m for m in (False, True) if any(CARRIERS[c].netns == m for c, _ in res.fits)]
    ncol, nrow = max(len(bulks), 1), max(len(media), 1)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.6 * nrow), squeeze=False,
                             sharey=True)  # fmt: skip
    bound = res.config.bound_ms
    seed = SEED_REFERENCE
    for row, netns in enumerate(media):
        for ax, bulk in zip(axes[row], bulks, strict=False):
            lo, hi = _SEED_RANGE
            ax.axvspan(
                lo, hi, color="#CC79A7", alpha=0.12, label=f"{seed['label']}, 680–1,360 kB/s"
            )
            ax.axvline(SEED_REFERENCE_CSLV_KBPS, color="#CC79A7", lw=1, ls=":",
                       label="seed: CSLV ≈ 300 × 4.25 kB = 1,275 kB/s")  # fmt: skip
            ax.axhline(bound, color="0.3", lw=0.8, ls="--", label=f"bound {bound:g} ms")
            for (carrier, b), f in res.fits.items():
                if b != bulk or CARRIERS[carrier].netns != netns:
                    continue
                _draw_carrier(ax, res, carrier, bulk, f["pooled"])
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("offered echo load N·f·S (kB/s)")
            where = (
                f"namespaces, {res.config.rate_mbit:g} Mbit/s {res.network.get('shaper', '')} "
                "bottleneck"
                if netns
                else f"simulated channel ({res.config.scenario} PHY/MAC)"
            )
            ax.set_title(f"{where}; bulk: {bulk}", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=6.5, loc="upper left")
        axes[row][0].set_ylabel("p99 round trip (ms); hollow: over bound or > 1% lost")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
