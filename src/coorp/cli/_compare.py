"""``coorp compare``: every policy on one scenario, one seed or several; table, JSON, CSV,
figures. Several seeds (``--seeds 1-5``) run through the sweep machinery and show means
with 95% confidence intervals; one seed keeps the single-run table."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coorp._errors import UsageError
from coorp._manifest import build_manifest, write_json
from coorp._tables import write_table
from coorp.cli._common import (
    console,
    duration_ns_option,
    figure_formats,
    load_average,
    load_policy_options,
    wall_note,
)
from coorp.cli._options import (
    FormatOption,
    OutOption,
    PolicyModuleOption,
    QuietOption,
    SeedOption,
    check_out_dir,
    check_out_file,
    duration_opt,
    ensure_out_dir,
    policies_opt,
    seeds_opt,
)
from coorp.cli._sweep import RunProgress, sweep_manifest
from coorp.policies import get_policy, policy_label, policy_names
from coorp.report import (
    BH_ONLY,
    Comparison,
    PolicyRun,
    compare,
    plot_comparison,
    write_comparison_raw_tables,
)
from coorp.scenario import Scenario, load_scenario
from coorp.seeds import seeds_option
from coorp.sweep import (
    RunCache,
    aggregate,
    aggregate_warnings,
    apply_overrides,
    multi_seed_json,
    parse_override,
    parse_sweep_spec,
    plan_sweep,
    render_aggregate,
    resolve_scenario,
    run_sweep,
    save_sweep,
)

__all__ = ["register", "render_comparison"]

DEFAULT_SCENARIO = "crl-5"


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_comparison(cmp: Comparison) -> Table:
    data = cmp.to_json()
    t = Table(
        caption_justify="left",
        title=escape(f"{cmp.scenario} · seed {cmp.seed} · {cmp.duration_s:g} s simulated · "
                     f"reaction bound {cmp.deadline_ms:g} ms"),
    )  # fmt: skip
    cols = ("policy", "miss rate", "reaction p50", "p90", "p99 ms", "LS lat p99 ms",
            "BH Mb/s", "other Mb/s", "util.", "epoch s", "epoch/EDCA")  # fmt: skip
    for c in cols:
        t.add_column(c, justify="left" if c == "policy" else "right")
    notes = []
    for name, m in data["policies"].items():
        label = escape(policy_label(name))  # a reference bound reads "(not deployable)"
        if m["infeasible"]:
            t.add_row(label, "infeasible", *["-"] * (len(cols) - 2))
            notes.append(f"{name}: {m['infeasible']}")
            continue
        r = m["reaction_ms"]
        t.add_row(
            label, _f(m["violation_rate"], ".1%"), _f(r["p50"], ".1f"), _f(r["p90"], ".1f"),
            _f(r["p99"], ".1f"), _f(m["ls_latency_ms"]["p99"], ".2f"), _f(m["bh_mbps"], ".1f"),
            _f(m.get("other_mbps"), ".1f"), _f(m["utilization"], ".0%"), _f(m["epoch_s"], ".2f"),
            _f(m["epoch_vs_edca"], ".2f"),
        )  # fmt: skip
    ref = data["reference"]
    t.caption = (
        f"utilization = BH throughput / BH-only run ({_f(ref['bh_mbps'], '.1f')} Mb/s, "
        "MPC off, EDCA); miss = reaction > bound or loop abandoned (with LS flows beside "
        "the loop: the worst flow's share of late messages); BH: the team's bulk data, "
        "other: traffic outside the team"
    )
    per_flow = [f"{name}: {line}" for name, m in data["policies"].items()
                if (line := _per_flow_line(m))]  # fmt: skip
    if per_flow:
        t.caption += "\nper flow:\n" + escape("\n".join(f"  {x}" for x in per_flow))
    if notes:
        t.caption += "\n" + escape("\n".join(notes))
    if data["warnings"]:
        t.caption += "\nwarnings:\n" + escape("\n".join(f"  {w}" for w in data["warnings"]))
    return t


def _per_flow_line(m: dict[str, object]) -> str:
    """Each LS flow's miss rate and each flow outside the team's Mb/s (JSON blocks
    ``flow_miss_rate``, ``flow_mbps``), when the scenario has any."""
    parts = []
    misses = m.get("flow_miss_rate")
    if isinstance(misses, dict):
        parts.append("miss " + ", ".join(f"{k} {_f(v, '.1%')}" for k, v in misses.items()))
    mbps = m.get("flow_mbps")
    if isinstance(mbps, dict):
        parts.append("Mb/s " + ", ".join(f"{k} {_f(v, '.1f')}" for k, v in mbps.items()))
    return " · ".join(parts)


def _seed_list(seed: int | None, seeds: str | None) -> list[int] | None:
    if seeds is None:
        return None if seed is None else [seed]
    if seed is not None:
        raise UsageError("give --seed N or --seeds LIST, not both")
    return seeds_option(seeds)


def _overrides(sets: list[str] | None) -> list[tuple[str, Any]]:
    """``--set KEY=VALUE`` flags as (key, value) pairs: one value each (a grid of values
    is what ``coorp sweep`` is for)."""
    pairs: list[tuple[str, Any]] = []
    for text in sets or []:
        key, values = parse_override(text)
        if len(values) != 1:
            raise UsageError(
                f"--set {text!r}: coorp compare takes one value per key; for several "
                f"({len(values)} given) use coorp sweep --set"
            )
        if any(k == key for k, _ in pairs):
            raise UsageError(f"--set {key} is given twice")
        pairs.append((key, values[0]))
    return pairs


def _json_target(json_path: str | None, out: Path | None) -> Path | None:
    if json_path is None or json_path == "-":
        return None
    return check_out_file(Path(json_path), "--json", made=out)


def register(app: typer.Typer) -> None:
    @app.command(name="compare")
    def compare_cmd(
        scenario: Annotated[
            str,
            typer.Argument(
                metavar="SCENARIO",
                help="A scenario with a [workload] section: a TOML file or a built-in name.",
            ),
        ] = DEFAULT_SCENARIO,
        policies: Annotated[
            str | None,
            policies_opt("every registered one that runs on the scenario's phy.standard"),
        ] = None,
        sets: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                metavar="KEY=VALUE",
                help="Override into the scenario (repeatable; coorp.x = policy.coorp.x), e.g. "
                "--set phy.standard=ax --set hw_queue.mode=per_ac.",
            ),
        ] = None,
        duration: Annotated[float | None, duration_opt()] = None,
        seed: SeedOption = None,
        seeds: Annotated[str | None, seeds_opt("one run, the scenario's seed")] = None,
        json_path: Annotated[
            str | None,
            typer.Option(
                "--json",
                metavar="FILE",
                help="Also write the results as JSON to FILE (its folder must exist); - "
                "writes it on stdout and the table on stderr.",
            ),
        ] = None,
        out: OutOption = None,
        jobs: Annotated[
            int,
            typer.Option(
                metavar="N", help="Runs in parallel processes (default: cores, at most 2)."
            ),
        ] = min(2, os.cpu_count() or 1),
        quiet: QuietOption = False,
        policy_module: PolicyModuleOption = None,
        fmt: FormatOption = "png",
    ) -> None:
        """Run every policy on one scenario; compare control and learning.

        One seed prints the single run's table; several (--seeds 1-5) the mean ± 95% CI
        of every metric over them. The last line gives the wall time and the machine's
        load."""
        # Every argument is checked before the first simulation.
        formats = figure_formats(fmt)
        to_stdout = json_path == "-"
        json_file = _json_target(json_path, out)
        show = Console(stderr=True, highlight=False, width=console.width) if to_stdout else console
        seed_list = _seed_list(seed, seeds)
        duration_ns = duration_ns_option(duration)
        if out is not None:
            check_out_dir(out)
        load_policy_options(policy_module)  # --policy-module files, entry points
        path = resolve_scenario(scenario)
        overrides = _overrides(sets)
        sc = apply_overrides(load_scenario(path), overrides, source=str(path))
        names = (
            policy_names(sc.phy.standard)
            if policies is None
            else [p.strip() for p in policies.split(",")]
        )
        for name in names:
            get_policy(name)  # an unknown name, before anything is created
        _refuse_other_standards(names, sc, path)
        d = ensure_out_dir(out) if out is not None else None
        if seed_list is not None and len(seed_list) > 1:
            data = _multi_seed(
                path, sc, names, seed_list, duration, jobs=jobs, out=d, show=show, quiet=quiet,
                formats=formats, overrides=overrides,
            )  # fmt: skip
        else:
            data = _single_seed(
                path, sc, names, None if seed_list is None else seed_list[0], duration_ns,
                jobs=jobs, out=d, show=show, quiet=quiet, formats=formats,
            )  # fmt: skip
        if json_file is not None:
            write_json(json_file, data)
        if to_stdout:
            sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _refuse_other_standards(names: list[str], sc: Scenario, path: Path) -> None:
    """A policy asked for by name that cannot run on the scenario's PHY standard is an
    error, with the fix, before anything runs: a table with one ``infeasible`` row and
    the hint in its caption looked like a result."""
    std = sc.phy.standard
    wrong = {n: get_policy(n).standards for n in names if std not in get_policy(n).standards}
    if not wrong:
        return
    needs = sorted({s.value for stds in wrong.values() for s in stds})
    raise UsageError(
        f"--policies {','.join(wrong)}: {'these run' if len(wrong) > 1 else 'it runs'} on "
        f"phy.standard {' or '.join(repr(s) for s in needs)} only, and {path.name} is "
        f"{std.value!r}: add --set phy.standard={needs[0]}, or leave "
        f"{'them' if len(wrong) > 1 else 'it'} out"
    )


def _single_seed(
    path: Path,
    sc: Scenario,
    names: list[str],
    seed: int | None,
    duration_ns: int | None,
    *,
    jobs: int,
    out: Path | None,
    show: Console,
    quiet: bool,
    formats: tuple[str, ...] = ("png",),
) -> dict[str, Any]:
    t0, load0 = time.perf_counter(), load_average()
    total = len(names) + 1
    if show.is_terminal and not quiet:
        with Progress(
            TextColumn("[bold]compare"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[last]}"), TimeElapsedColumn(), console=show,
            transient=True,
        ) as progress:  # fmt: skip
            task = progress.add_task("runs", total=total, last="")

            def done(run: PolicyRun) -> None:
                progress.update(task, advance=1, last=f"{run.name} done")

            cmp = compare(sc, names, seed=seed, duration_ns=duration_ns, jobs=jobs,
                          source=str(path), on_done=done)  # fmt: skip
    else:
        cmp = compare(sc, names, seed=seed, duration_ns=duration_ns, jobs=jobs,
                      source=str(path))  # fmt: skip
    wall = time.perf_counter() - t0
    if not quiet:
        show.print(render_comparison(cmp))
    data = cmp.to_json()
    if out is not None:
        write_json(out / "compare.json", data)
        rows = cmp.rows()
        write_table(out / "compare", {k: [r.get(k) for r in rows] for k in rows[0]})
        figures = plot_comparison(cmp, out, formats)
        write_comparison_raw_tables(cmp, out)  # raw/<policy>/loops.csv, ... (coorp.report)
        stats = {n: r.policy_stats for n, r in cmp.runs.items()}
        write_json(out / "policy_stats.json", stats)
        write_json(out / "manifest.json", build_manifest(
            scenario=sc.model_dump(mode="json"), scenario_path=str(path), seed=cmp.seed,
            wall_s=wall, extra={"policies": names, "reference": BH_ONLY, "jobs": jobs,
                                "duration_s": cmp.duration_s,
                                "figures": [f.name for f in figures]},
        ))  # fmt: skip
        if not quiet:
            show.print(f"results and figures written to {out}/")
    if not quiet:
        show.print(wall_note(wall, load0))
    return data


def _multi_seed(
    path: Path,
    sc: Scenario,
    names: list[str],
    seeds: list[int],
    duration: float | None,
    *,
    jobs: int,
    out: Path | None,
    show: Console,
    quiet: bool,
    formats: tuple[str, ...] = ("png",),
    overrides: list[tuple[str, Any]] | None = None,
) -> dict[str, Any]:
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    if sc.workload is None:
        raise UsageError(f"{path} has no [workload] section; coorp compare needs one")
    spec = parse_sweep_spec(
        {
            "scenarios": [str(path)],
            "policies": names,
            "seeds": seeds,
            "duration_s": duration,
            "overrides": {k: [v] for k, v in overrides or []},
        }
    )
    plan = plan_sweep(spec)
    store = RunCache(out / "cache") if out is not None else None
    t0, load0 = time.perf_counter(), load_average()
    with RunProgress(label="compare", quiet=quiet) as progress:
        result = run_sweep(plan, jobs=jobs, cache=store, progress=progress)
    wall = time.perf_counter() - t0
    deadline_ms = sc.workload.mpc.deadline_us / 1000
    data = multi_seed_json(result, deadline_ms=deadline_ms)
    if not quiet:
        lo, hi = seeds[0], seeds[-1]
        seed_text = f"seeds {lo}-{hi}" if seeds == list(range(lo, hi + 1)) else f"seeds {seeds}"
        title = (f"{sc.name} · {seed_text} · {data['duration_s']:g} s simulated · "
                 f"reaction bound {deadline_ms:g} ms")  # fmt: skip
        rows = result.rows()
        show.print(
            render_aggregate(aggregate(rows), title=title, warnings=aggregate_warnings(rows))
        )
    if out is not None:
        write_json(out / "compare.json", data)
        save_sweep(result, out, sweep_manifest(plan, result, wall_s=wall, extra={
            "command": "compare", "jobs": jobs, "cache": str(out / "cache"),
        }), formats=formats)  # fmt: skip
        if not quiet:
            show.print(
                f"{len(plan.tasks)} runs ({result.cached} from cache); results and figures "
                f"written to {out}/"
            )
    if not quiet:
        show.print(wall_note(wall, load0))
    return data
