"""``coorp model``: the paper's scalability model (§IV-D, Eq. 1–3), optionally next to
the simulator's values for the same team sizes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coorp._errors import UsageError
from coorp._manifest import build_manifest, write_json
from coorp.analysis.crl_model import (
    CrlModelParams,
    CrlModelPoint,
    crl_model,
    params_from_scenario,
    team_scenario,
)
from coorp.cli._common import console, progress_bar
from coorp.cli._options import (
    JsonFileOption,
    OutOption,
    SeedOption,
    check_out_dir,
    check_out_file,
    ensure_out_dir,
)
from coorp.scenario import Scenario, load_scenario
from coorp.stats import percentile
from coorp.units import NS_PER_MS, s
from coorp.workload import run_crl

__all__ = ["SimPoint", "parse_robots", "plot_model", "register", "simulate_team"]

DEFAULT_SCENARIO = Path("scenarios/crl-5.toml")
DEFAULT_ROBOTS = "2,5,10,20,40"
SIM_POLICY = "coorp"
DISC_RADIUS_M = 10.0


@dataclass(frozen=True)
class SimPoint:
    """The simulator's values for ``n`` workers under COORP."""

    n: int
    loops: int
    p50_ns: float
    p99_ns: float
    violation_rate: float
    bh_bps: float

    def to_json(self) -> dict[str, Any]:
        return {
            "loops": self.loops,
            "reaction_ms": {"p50": _ms(self.p50_ns), "p99": _ms(self.p99_ns)},
            "violation_rate": self.violation_rate,
            "b_bh_mbps": self.bh_bps / 1e6,
        }


def _ms(ns: float) -> float | None:
    """ns -> ms for JSON: an abandoned loop's infinite reaction time becomes null."""
    return ns / NS_PER_MS if math.isfinite(ns) else None


def parse_robots(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--robots {text!r}: give worker counts like 2,5,10") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"--robots {text!r}: give one or more worker counts >= 1")
    return list(dict.fromkeys(values))


def simulate_team(
    base: Scenario,
    n: int,
    *,
    duration_s: float,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
) -> SimPoint:
    """Run ``coorp`` on :func:`~coorp.analysis.crl_model.team_scenario` (``n`` workers in a
    10 m disc). Percentiles are order statistics (no interpolation), so abandoned loops
    count as infinitely late; BH throughput is measured from the first loop's end, when
    the bulk traffic starts."""
    sc = team_scenario(base, n, seed=seed, radius_m=DISC_RADIUS_M, duration_s=duration_s)
    result = run_crl(sc, SIM_POLICY, seed=seed, on_progress=on_progress,
                     source=f"<{n}-worker team>")  # fmt: skip
    r = result.reaction_ns
    first = result.loops[0] if result.loops else None
    bulk_from = first.end_ns if first is not None and first.end_ns >= 0 else 0
    window_s = (result.duration_ns - bulk_from) / 1e9

    def pct(q: float) -> float:
        return percentile(r, q)

    return SimPoint(
        n=n,
        loops=len(result.loops),
        p50_ns=pct(50),
        p99_ns=pct(99),
        violation_rate=result.violation_rate,
        bh_bps=result.bh_bytes * 8 / window_s if window_s > 0 else math.nan,
    )


def model_json(
    scenario: Scenario,
    source: str,
    params: CrlModelParams,
    points: Sequence[CrlModelPoint],
    sims: dict[int, SimPoint],
    sim_cfg: dict[str, Any] | None,
) -> dict[str, Any]:
    rows = []
    for m in points:
        rows.append({
            "workers": m.n,
            "model": {
                "reaction_ms": {"p50": m.quantile_ns(0.5) / NS_PER_MS,
                                "p99": m.quantile_ns(0.99) / NS_PER_MS},
                "violation_rate": m.violation_rate,
                "b_bh_mbps": m.bh_bps / 1e6,
                "mean_bh_transmissions": m.mean_bh,
                "pmf": m.pmf.tolist(),
                "reaction_time_ms": (m.reaction_ns / NS_PER_MS).tolist(),
            },
            "simulation": sims[m.n].to_json() if m.n in sims else None,
        })  # fmt: skip
    return {
        "scenario": scenario.name,
        "source": source,
        "parameters": {
            "p0": params.p0,
            "bandwidth_mbps": params.bandwidth_bps / 1e6,
            "bandwidth_source": params.bandwidth_source,
            "mcs": params.mcs,
            "ampdu_bytes": params.ampdu_bytes,
            "perception_bytes": params.perception_bytes,
            "control_bytes": params.control_bytes,
            "inference_ms": params.inference_ns / NS_PER_MS,
            "frequency_hz": params.frequency_hz,
            "deadline_ms": params.deadline_ns / NS_PER_MS,
        },
        "simulation": sim_cfg,
        "rows": rows,
    }


def _f(v: float | None, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if math.isinf(v):
        return "∞"
    return format(v, fmt)


def render_model(
    scenario: Scenario, params: CrlModelParams, points: Sequence[CrlModelPoint],
    sims: dict[int, SimPoint],
) -> Table:  # fmt: skip
    t = Table(title=f"{scenario.name} · model (§IV-D Eq. 1–3, LIMIT 1)"
              + (f" vs simulated {SIM_POLICY}" if sims else ""))  # fmt: skip
    cols = ["N workers", "p50 ms", "p99 ms", "miss", "B_BH Mb/s"]
    if sims:
        cols += ["sim p50", "sim p99", "sim miss", "sim BH Mb/s", "sim loops"]
    for c in cols:
        t.add_column(c, justify="right")
    for m in points:
        row = [str(m.n), _f(m.quantile_ns(0.5) / NS_PER_MS, ".1f"),
               _f(m.quantile_ns(0.99) / NS_PER_MS, ".1f"), _f(m.violation_rate, ".2%"),
               _f(m.bh_bps / 1e6, ".1f")]  # fmt: skip
        sp = sims.get(m.n)
        if sims:
            row += (
                ["-"] * 5 if sp is None else
                [_f(sp.p50_ns / NS_PER_MS, ".1f"), _f(sp.p99_ns / NS_PER_MS, ".1f"),
                 _f(sp.violation_rate, ".1%"), _f(sp.bh_bps / 1e6, ".1f"), str(sp.loops)]
            )  # fmt: skip
        t.add_row(*row)
    t.caption = (
        f"B = {params.bandwidth_bps / 1e6:.1f} Mb/s ({params.bandwidth_source}); "
        f"L_ampdu = {params.ampdu_bytes} B; p0 = {params.p0:.4f}; "
        f"T_inf = {params.inference_ns / NS_PER_MS:g} ms; "
        f"miss = P(reaction > {params.deadline_ns / NS_PER_MS:g} ms)"
    )
    return t


def plot_model(
    path: Path, params: CrlModelParams, points: Sequence[CrlModelPoint],
    sims: dict[int, SimPoint],
) -> Path:  # fmt: skip
    """Model (lines) vs simulation (markers) over N: violation rate, p99, B_BH."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [m.n for m in points]
    sim_ns = [n for n in ns if n in sims]

    def finite(v: float) -> float:
        return v if math.isfinite(v) else math.nan

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    ax.plot(ns, [m.violation_rate for m in points], "o--", label="model")
    if sim_ns:
        ax.plot(sim_ns, [sims[n].violation_rate for n in sim_ns], "s-", label="simulation")
    ax.set(xlabel="N (workers)", ylabel=f"P(reaction > {params.deadline_ns / 1e6:g} ms)",
           title="violation rate", ylim=(-0.02, 1.02))  # fmt: skip
    ax = axes[1]
    ax.plot(ns, [m.quantile_ns(0.99) / 1e6 for m in points], "o--", label="model p99")
    ax.plot(ns, [m.quantile_ns(0.5) / 1e6 for m in points], "o:", label="model p50")
    if sim_ns:
        ax.plot(sim_ns, [finite(sims[n].p99_ns) / 1e6 for n in sim_ns], "s-", label="sim p99")
        ax.plot(sim_ns, [finite(sims[n].p50_ns) / 1e6 for n in sim_ns], "s-.", label="sim p50")
    ax.axhline(params.deadline_ns / 1e6, color="grey", lw=0.8)
    ax.set(xlabel="N (workers)", ylabel="ms", title="reaction time")
    ax = axes[2]
    ax.plot(ns, [m.bh_bps / 1e6 for m in points], "o--", label="model (Eq. 3)")
    if sim_ns:
        ax.plot(sim_ns, [sims[n].bh_bps / 1e6 for n in sim_ns], "s-", label="simulation")
    ax.set(xlabel="N (workers)", ylabel="Mb/s", title="BH throughput")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def register(app: typer.Typer) -> None:
    @app.command(name="model")
    def model_cmd(
        scenario: Annotated[
            Path,
            typer.Argument(metavar="SCENARIO", help="A scenario TOML file with a [workload]."),
        ] = DEFAULT_SCENARIO,
        robots: Annotated[
            str,
            typer.Option(
                metavar="LIST", help="Team sizes N (workers, plus the leader), comma-separated."
            ),
        ] = DEFAULT_ROBOTS,
        bandwidth: Annotated[
            float | None,
            typer.Option(
                metavar="MBPS", help="Effective bandwidth B in Mb/s (default: from the PHY)."
            ),
        ] = None,
        simulate: Annotated[
            bool, typer.Option("--simulate", help="Also simulate each N under coorp.")
        ] = False,
        duration: Annotated[
            float,
            typer.Option(
                metavar="SECONDS", help="Simulated seconds per team size (with --simulate)."
            ),
        ] = 5.0,
        seed: SeedOption = None,
        json_path: JsonFileOption = None,
        out: OutOption = None,
    ) -> None:
        """The paper's analytical model: reaction, misses, bandwidth vs N.

        Eq. 1–3 of the paper (§IV-D) for each team size, next to the simulator's values
        under coorp with --simulate."""
        sc = load_scenario(scenario)
        ns = parse_robots(robots)
        if simulate and not duration > 0:
            raise UsageError(f"--duration must be > 0 seconds, got {duration}")
        if json_path is not None:
            check_out_file(json_path, "--json", made=out)
        if out is not None:
            check_out_dir(out)
        params = params_from_scenario(sc, bandwidth_mbps=bandwidth, source=str(scenario))
        points = [crl_model(n, params) for n in ns]
        sims: dict[int, SimPoint] = {}
        run_seed = sc.seed if seed is None else seed
        t0 = time.perf_counter()
        if simulate:
            per = s(duration)
            with progress_bar(f"model --simulate ({len(ns)} team sizes)", per * len(ns)) as up:
                for i, n in enumerate(ns):
                    cb = None if up is None else (lambda t, off=i * per: up(off + t))
                    sims[n] = simulate_team(sc, n, duration_s=duration, seed=run_seed,
                                            on_progress=cb)  # fmt: skip
        wall = time.perf_counter() - t0
        console.print(render_model(sc, params, points, sims))
        sim_cfg = (
            {"policy": SIM_POLICY, "duration_s": duration, "seed": run_seed,
             "disc_radius_m": DISC_RADIUS_M, "drlc": "batch_items = 1, train_us = 0"}
            if simulate else None
        )  # fmt: skip
        data = model_json(sc, str(scenario), params, points, sims, sim_cfg)
        if json_path is not None:
            write_json(json_path, data)
        if out is not None:
            d = ensure_out_dir(out)
            write_json(d / "model.json", data)
            png = plot_model(d / "model.png", params, points, sims)
            write_json(d / "manifest.json", build_manifest(
                scenario=sc.model_dump(mode="json"), scenario_path=str(scenario),
                seed=run_seed, wall_s=wall,
                extra={"robots": ns, "simulate": simulate, "figures": [png.name]},
            ))  # fmt: skip
            console.print(f"model written to {d}/")
