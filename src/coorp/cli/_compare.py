"""``coorp compare``: every policy on one scenario and seed; table, JSON, CSV, figures."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coorp._manifest import build_manifest, write_json
from coorp._tables import write_table
from coorp.cli._common import console, duration_ns_option, require_out_dir
from coorp.policies import policy_names
from coorp.report import BH_ONLY, Comparison, PolicyRun, compare, plot_comparison
from coorp.scenario import load_scenario

__all__ = ["register", "render_comparison"]

DEFAULT_SCENARIO = Path("scenarios/crl-5.toml")


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_comparison(cmp: Comparison) -> Table:
    data = cmp.to_json()
    t = Table(
        title=f"{cmp.scenario} · seed {cmp.seed} · {cmp.duration_s:g} s simulated · "
        f"reaction bound {cmp.deadline_ms:g} ms"
    )
    cols = ("policy", "miss rate", "reaction p50", "p90", "p99 ms", "LS lat p99 ms",
            "BH Mb/s", "util.", "epoch s", "epoch/EDCA")  # fmt: skip
    for c in cols:
        t.add_column(c, justify="left" if c == "policy" else "right")
    notes = []
    for name, m in data["policies"].items():
        if m["infeasible"]:
            t.add_row(name, "infeasible", *["-"] * (len(cols) - 2))
            notes.append(f"{name}: {m['infeasible']}")
            continue
        r = m["reaction_ms"]
        t.add_row(
            name, _f(m["violation_rate"], ".1%"), _f(r["p50"], ".1f"), _f(r["p90"], ".1f"),
            _f(r["p99"], ".1f"), _f(m["ls_latency_ms"]["p99"], ".2f"), _f(m["bh_mbps"], ".1f"),
            _f(m["utilization"], ".0%"), _f(m["epoch_s"], ".2f"), _f(m["epoch_vs_edca"], ".2f"),
        )  # fmt: skip
    ref = data["reference"]
    t.caption = (
        f"utilization = BH throughput / BH-only run ({_f(ref['bh_mbps'], '.1f')} Mb/s, "
        "MPC off, EDCA); miss = reaction > bound or loop abandoned"
    )
    if notes:
        t.caption += "\n" + "\n".join(notes)
    return t


def register(app: typer.Typer) -> None:
    @app.command(name="compare")
    def compare_cmd(
        scenario: Annotated[
            Path, typer.Argument(help="Scenario TOML with a [workload] section.")
        ] = DEFAULT_SCENARIO,
        policies: Annotated[
            str | None,
            typer.Option(help="Comma-separated policy names (default: every registered one)."),
        ] = None,
        duration: Annotated[
            float | None, typer.Option(help="Simulated seconds (default: the scenario's).")
        ] = None,
        seed: Annotated[
            int | None, typer.Option(help="RNG seed (default: the scenario's).")
        ] = None,
        json_path: Annotated[Path | None, typer.Option("--json", help="Write JSON here.")] = None,
        out: Annotated[
            Path | None, typer.Option(help="Directory for JSON, CSV, figures and manifest.")
        ] = None,
        jobs: Annotated[
            int, typer.Option(help="Runs in parallel processes (default: CPU count, max 2).")
        ] = min(2, os.cpu_count() or 1),
    ) -> None:
        """Run every policy on the same scenario and seed and compare control vs learning."""
        sc = load_scenario(scenario)
        names = policy_names() if policies is None else [p.strip() for p in policies.split(",")]
        duration_ns = duration_ns_option(duration)
        t0 = time.perf_counter()
        total = len(names) + 1
        if sys.stdout.isatty():
            with Progress(
                TextColumn("[bold]compare"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"), TimeElapsedColumn(), console=console,
                transient=True,
            ) as progress:  # fmt: skip
                task = progress.add_task("runs", total=total, last="")

                def done(run: PolicyRun) -> None:
                    progress.update(task, advance=1, last=f"{run.name} done")

                cmp = compare(sc, names, seed=seed, duration_ns=duration_ns, jobs=jobs,
                              source=str(scenario), on_done=done)  # fmt: skip
        else:
            cmp = compare(sc, names, seed=seed, duration_ns=duration_ns, jobs=jobs,
                          source=str(scenario))  # fmt: skip
        wall = time.perf_counter() - t0
        console.print(render_comparison(cmp))
        data = cmp.to_json()
        if json_path is not None:
            write_json(json_path, data)
        if out is not None:
            d = require_out_dir(out)
            write_json(d / "compare.json", data)
            rows = cmp.rows()
            write_table(d / "compare", {k: [r.get(k) for r in rows] for k in rows[0]})
            figures = plot_comparison(cmp, d)
            stats = {n: r.policy_stats for n, r in cmp.runs.items()}
            write_json(d / "policy_stats.json", stats)
            write_json(d / "manifest.json", build_manifest(
                scenario=sc.model_dump(mode="json"), scenario_path=str(scenario), seed=cmp.seed,
                wall_s=wall, extra={"policies": names, "reference": BH_ONLY, "jobs": jobs,
                                    "duration_s": cmp.duration_s,
                                    "figures": [f.name for f in figures]},
            ))  # fmt: skip
            console.print(f"results and figures written to {d}/ ({wall:.1f} s wall)")
