"""The sweep: every carrier × bulk mode × N × f × S × repetition, then the CSLV fits."""

from __future__ import annotations

import itertools
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import ConfigurationError
from coorp.stats import mean_ci, percentile
from coorp.teambench._carriers import CARRIERS, CellMeasurement, Session
from coorp.teambench._config import TeamBenchConfig
from coorp.teambench._fit import CslvFit, fit_cslv

__all__ = ["TeamBenchResult", "cell_row", "run_team", "summarize_fits"]

Progress = Callable[[str, int, int], None]


@dataclass
class TeamBenchResult:
    config: TeamBenchConfig
    rows: list[dict[str, Any]]
    #: (carrier, bulk) -> per-repetition fits and the fit over every repetition's cells.
    fits: dict[tuple[str, str], dict[str, Any]]
    skipped: list[str] = field(default_factory=list)
    network: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0


def cell_row(
    carrier: str, bulk: str, robots: int, rate_hz: float, size: int, rep: int,
    m: CellMeasurement, cfg: TeamBenchConfig,
) -> dict[str, Any]:  # fmt: skip
    """One result row (JSON/CSV) from a measurement."""
    rtt = m.rtt_ns / 1e6
    loss = 1 - m.echoed / m.sent if m.sent else math.nan
    p99 = percentile(rtt, 99, empty=math.inf)
    robot_cpu = [v for k, v in m.cpu_s.items() if k.startswith("r")]
    other = {k: v for k, v in m.cpu_s.items() if not k.startswith("r")}
    wall = max(m.wall_s, 1e-9)
    return {
        "carrier": carrier, "bulk": bulk, "robots": robots, "rate_hz": rate_hz,
        "size_bytes": size, "rep": rep, "load_Bps": robots * rate_hz * size,
        "sent": m.sent, "echoed": m.echoed, "loss": loss,
        "rtt_p50_ms": percentile(rtt, 50, empty=math.inf), "rtt_p99_ms": p99,
        "rtt_max_ms": float(rtt.max()) if rtt.size else math.inf,
        "ok": bool(p99 <= cfg.bound_ms and loss <= cfg.loss_limit),
        "cpu_leader_pct": 100 * other.get("leader", other.get("simulator", math.nan)) / wall,
        "cpu_robot_mean_pct": 100 * float(np.mean(robot_cpu)) / wall if robot_cpu else math.nan,
        "cpu_robot_max_pct": 100 * max(robot_cpu) / wall if robot_cpu else math.nan,
        "cpu_s": dict(m.cpu_s), "wall_s": m.wall_s, "counters": dict(m.counters),
        "bulk_mbps": m.bulk_bytes * 8 / 1e6 / m.bulk_window_s if m.bulk_window_s > 0 else 0.0,
        "notes": "; ".join(m.notes),
    }  # fmt: skip


def summarize_fits(
    rows: list[dict[str, Any]], cfg: TeamBenchConfig
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (carrier, bulk): a CSLV fit per repetition, their mean ± 95% CI, and one fit
    over every repetition's cells (what the figure draws)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    keys = list(dict.fromkeys((r["carrier"], r["bulk"]) for r in rows))
    for key in keys:
        mine = [r for r in rows if (r["carrier"], r["bulk"]) == key]

        def fit(sel: list[dict[str, Any]]) -> CslvFit:
            return fit_cslv([r["load_Bps"] for r in sel], [r["rtt_p99_ms"] for r in sel],
                            [r["loss"] for r in sel], bound_ms=cfg.bound_ms,
                            loss_limit=cfg.loss_limit)  # fmt: skip

        passed = [r["rtt_p50_ms"] for r in mine if r["ok"]]
        reps = sorted({r["rep"] for r in mine})
        per_rep = [fit([r for r in mine if r["rep"] == k]) for k in reps]
        values = [f.cslv for f in per_rep if f.cslv is not None]
        ci = mean_ci(values)
        out[key] = {
            "per_rep": per_rep,
            "cslv_mean": ci.mean, "cslv_ci95": ci.ci95, "cslv_n": ci.n,
            "censored": len(per_rep) - len(values),
            "pooled": fit(mine),
            # The typical round trip where the carrier keeps up: median over passed cells.
            "rtt_p50_ms": statistics.median(passed) if passed else math.nan,
        }  # fmt: skip
    return out


def run_team(
    cfg: TeamBenchConfig,
    *,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> TeamBenchResult:
    """Run the whole sweep. Namespace carriers need root and iproute2
    (:class:`ConfigurationError` naming the reason otherwise)."""
    say = log or (lambda _m: None)
    t0 = time.monotonic()
    plan: list[tuple[str, str]] = []
    skipped = []
    for c in cfg.carriers:
        for b in cfg.bulk:
            if b in CARRIERS[c].bulk_modes:
                plan.append((c, b))
            else:
                skipped.append(
                    f"{c} with bulk {b!r}: not a mode it runs ({', '.join(CARRIERS[c].bulk_modes)})"
                )
    per = cfg.cells_per_repetition() * cfg.repetitions
    total, done = per * len(plan), 0
    rows: list[dict[str, Any]] = []
    network_info: dict[str, Any] = {}
    net = None
    try:
        if any(CARRIERS[c].netns for c, _ in plan):
            from coorp.teambench._netns import IPFRAG_TIME_S, Network, netns_unavailable

            why = netns_unavailable()
            if why is not None:
                names = sorted({c for c, _ in plan if CARRIERS[c].netns})
                raise ConfigurationError(
                    f"carriers {names} run in network namespaces, which this machine cannot "
                    f"provide ({why}); choose --carriers sim, or run as root"
                )
            net = Network(max(cfg.robots))
            net.create(rate_mbit=cfg.rate_mbit, queue_ms=cfg.queue_ms)
            network_info = {
                "rate_mbit": cfg.rate_mbit, "queue_ms": cfg.queue_ms, "shaper": net.shaper,
                "ipfrag_time_s": IPFRAG_TIME_S,
                "qdiscs_available": sorted(q for q, ok in net.qdiscs.items() if ok),
                "qdiscs_missing": sorted(q for q, ok in net.qdiscs.items() if not ok),
            }  # fmt: skip
            missing = network_info["qdiscs_missing"] or "none"
            say(f"namespaces: {len(net.hosts)} hosts, bottleneck {net.shaper} "
                f"{cfg.rate_mbit:g} Mbit/s each way; qdiscs missing here: {missing}")  # fmt: skip
        for carrier in dict.fromkeys(c for c, _ in plan):
            modes = [b for c, b in plan if c == carrier]
            session: Session = CARRIERS[carrier].open(cfg, net)
            try:
                grid = itertools.product(
                    range(cfg.repetitions), modes, cfg.robots, cfg.rates_hz, cfg.sizes_bytes
                )
                for rep, bulk, n, f, size in grid:
                    m = session.cell(n, f, size, bulk, rep)
                    rows.append(cell_row(carrier, bulk, n, f, size, rep, m, cfg))
                    done += 1
                    if progress is not None:
                        what = f"{carrier} bulk={bulk} N={n} f={f:g} S={size} rep {rep + 1}"
                        progress(what, done, total)
            finally:
                session.close()
    finally:
        if net is not None:
            net.destroy()
    return TeamBenchResult(cfg, rows, summarize_fits(rows, cfg), skipped, network_info,
                           time.monotonic() - t0)  # fmt: skip


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "load_1min": os.getloadavg()[0]}
