"""``coorp sweep`` (scenarios × policies × seeds × overrides, with CIs) and ``coorp plot``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

from coorp._errors import UsageError
from coorp._manifest import build_manifest
from coorp.cli._common import console, figure_formats, load_average, load_policy_options, wall_note
from coorp.cli._options import (
    FormatOption,
    OutOption,
    PolicyModuleOption,
    QuietOption,
    check_out_dir,
    duration_opt,
    ensure_out_dir,
    policies_opt,
    seeds_opt,
)
from coorp.sweep import (
    RunCache,
    SweepPlan,
    SweepResult,
    SweepSpec,
    Task,
    aggregate,
    aggregate_warnings,
    load_rows,
    load_sweep_spec,
    parse_override,
    parse_sweep_spec,
    plan_sweep,
    plot_sweep,
    render_aggregate,
    run_sweep,
    save_sweep,
)

__all__ = ["RunProgress", "register", "sweep_manifest"]


class RunProgress:
    """Progress of a sweep's runs on stderr, so that stdout carries the results alone
    (``coorp compare ... | tee``): a rich bar with ETA when stderr is a terminal, one line
    per finished run otherwise (a log file); nothing with ``quiet``."""

    def __init__(self, *, label: str, quiet: bool = False, out: Console | None = None) -> None:
        self.out = out if out is not None else Console(stderr=True, highlight=False)
        self.label = label
        self.quiet = quiet
        self.finished = 0
        self.total = 0
        self._bar: RichProgress | None = None
        self._task: Any = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def start(self, total: int, cached: int) -> None:
        self.total, self.finished = total, cached
        if self.quiet:
            return
        if self.out.is_terminal:
            self._bar = RichProgress(
                TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                TextColumn("{task.fields[last]}"), console=self.out, transient=True,
            )  # fmt: skip
            self._task = self._bar.add_task("runs", total=total, completed=cached, last="")
            self._bar.start()
        else:
            self.out.print(
                f"{self.label}: {total} runs, {cached} from cache, {total - cached} to run"
            )

    def done(self, task: Task, outcome: dict[str, Any]) -> None:
        self.finished += 1
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=1, last=task.describe())
            return
        m = outcome["metrics"]
        if outcome["infeasible"]:
            what = f"infeasible: {outcome['infeasible']}"
        else:
            miss = m["violation_rate"]
            what = f"miss {miss:.1%}" if miss == miss else ""  # NaN: no loop (BH-only)
            what += f" BH {m['bh_mbps']:.1f} Mb/s epochs {int(m['epochs'])}"
        self.out.print(
            f"[{self.finished}/{self.total}] {task.describe()}: {what.strip()} "
            f"({outcome['wall_s']:.1f} s)",
            markup=False, highlight=False,
        )  # fmt: skip


def sweep_manifest(
    plan: SweepPlan, result: SweepResult, *, wall_s: float, extra: dict[str, Any]
) -> dict[str, Any]:
    """``manifest.json`` of a sweep: the resolved spec, every scenario, code version."""
    spec = plan.spec
    return build_manifest(
        scenario={name: sc.model_dump(mode="json") for name, (_, sc) in plan.scenarios.items()},
        scenario_path=None, seed=spec.seeds[0], wall_s=wall_s,
        extra={
            "command": "sweep", "spec": {**spec.model_dump(mode="json"), "policies": plan.policies},
            "scenario_paths": {name: src for name, (src, _) in plan.scenarios.items()},
            "seeds": spec.seeds, "code_version": result.code_version, "runs": len(plan.tasks),
            "executed": result.executed, "cached": result.cached, **extra,
        },
    )  # fmt: skip


def _spec_from(
    spec_file: Path | None,
    *,
    scenarios: str | None,
    policies: str | None,
    seeds: str | None,
    sets: list[str] | None,
    duration: float | None,
) -> tuple[SweepSpec, Path | None, str]:
    data: dict[str, Any] = {}
    source = "<command line>"
    if spec_file is not None:
        data = load_sweep_spec(spec_file).model_dump(exclude_unset=True)
        source = f"{spec_file} + command line"
    flags = {"scenarios": scenarios, "policies": policies, "seeds": seeds, "duration_s": duration}
    data.update({k: v for k, v in flags.items() if v is not None})
    if sets:
        data["overrides"] = dict(data.get("overrides", {}))
        for text in sets:
            key, values = parse_override(text)
            data["overrides"][key] = values
    if "scenarios" not in data:
        raise UsageError("give a sweep file or --scenarios (e.g. --scenarios crl-2,crl-5)")
    spec = parse_sweep_spec(data, source=source)
    origin = "--set" if spec_file is None else f"overrides ({spec_file} or --set)"
    return spec, (spec_file.parent if spec_file is not None else None), origin


def register(app: typer.Typer) -> None:
    @app.command(name="sweep")
    def sweep_cmd(
        spec_file: Annotated[
            Path | None,
            typer.Argument(
                metavar="SWEEP.toml",
                help="A sweep file (docs/sweep.md); flags given too replace its fields.",
                show_default=False,
            ),
        ] = None,
        scenarios: Annotated[
            str | None,
            typer.Option(
                metavar="LIST",
                help="Scenario files or built-in names, comma-separated (crl-2,crl-5).",
            ),
        ] = None,
        policies: Annotated[str | None, policies_opt("every registered one")] = None,
        seeds: Annotated[str | None, seeds_opt("1")] = None,
        sets: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                metavar="KEY=V1,V2",
                help="An override of a scenario field, swept over its values (repeatable; "
                "coorp.x means policy.coorp.x), e.g. --set coorp.margin_us=1000,2000 "
                "--set workload.drlc.sync=bsp,asp.",
            ),
        ] = None,
        duration: Annotated[float | None, duration_opt(default="each scenario's")] = None,
        out: OutOption = Path("results/sweep"),
        jobs: Annotated[
            int | None,
            typer.Option(metavar="N", help="Parallel runs (default: every core; Ray: local CPUs)."),
        ] = None,
        ray: Annotated[
            bool,
            typer.Option("--ray", help="Run the tasks on Ray (pip install 'coorp[ray]')."),
        ] = False,
        ray_address: Annotated[
            str | None,
            typer.Option(
                metavar="ADDRESS",
                help="An existing Ray cluster (implies --ray; default: $RAY_ADDRESS, else a "
                "new local instance).",
            ),
        ] = None,
        cache: Annotated[
            Path | None,
            typer.Option(metavar="DIR", help="Cache directory (default: OUT/cache)."),
        ] = None,
        no_cache: Annotated[
            bool, typer.Option("--no-cache", help="Neither read nor write the cache.")
        ] = False,
        quiet: QuietOption = False,
        policy_module: PolicyModuleOption = None,
        fmt: FormatOption = "png",
    ) -> None:
        """Run scenarios × policies × seeds × overrides; mean and 95% CI.

        Every run is cached (OUT/cache): an interrupted sweep resumes where it stopped,
        and a larger one reuses what a smaller one ran."""
        formats = figure_formats(fmt)
        # Policies from --policy-module files and entry points; the pool's processes are
        # forked from this one and inherit them (Ray workers do not: install them there).
        load_policy_options(policy_module)
        spec, base_dir, origin = _spec_from(
            spec_file, scenarios=scenarios, policies=policies, seeds=seeds, sets=sets,
            duration=duration,
        )  # fmt: skip
        assert out is not None  # it has a default
        check_out_dir(out)
        if cache is not None:
            check_out_dir(cache, "--cache")
        plan = plan_sweep(spec, base_dir=base_dir, origin=origin)
        d = ensure_out_dir(out)
        store = None if no_cache else RunCache(cache if cache is not None else d / "cache")
        use_ray = ray or ray_address is not None
        t0, load0 = time.perf_counter(), load_average()
        progress = RunProgress(label="sweep", quiet=quiet)
        try:
            with progress:
                result = run_sweep(
                    plan, jobs=jobs, use_ray=use_ray, ray_address=ray_address, cache=store,
                    progress=progress,
                )  # fmt: skip
        except KeyboardInterrupt:
            where = f"cached in {store.root}" if store is not None else "lost (--no-cache)"
            typer.echo(
                f"interrupted: {progress.finished} of {progress.total} runs finished and "
                f"{where}; run the same command again to resume",
                err=True,
            )
            raise typer.Exit(130) from None
        wall = time.perf_counter() - t0
        manifest = sweep_manifest(plan, result, wall_s=wall, extra={
            "jobs": jobs, "backend": "ray" if use_ray else "processes",
            "ray_address": ray_address, "cache": str(store.root) if store else None,
        })  # fmt: skip
        paths = save_sweep(result, d, manifest, formats)
        if not quiet:
            rows = result.rows()
            n = len(spec.seeds)
            title = f"sweep · {n} seed{'s' * (n > 1)} · {result.code_version}"
            console.print(
                render_aggregate(aggregate(rows), title=title, warnings=aggregate_warnings(rows))
            )
            shared = len(plan.tasks) - result.executed - result.cached
            same = f", {shared} identical to another (BH-only under policy options)" * (shared > 0)
            console.print(
                f"{len(plan.tasks)} runs: {result.executed} simulated, {result.cached} from "
                f"cache{same}; {len(paths)} files written to {d}/; {wall_note(wall, load0)}"
            )

    @app.command(name="plot")
    def plot_cmd(
        folder: Annotated[
            Path,
            typer.Argument(
                metavar="FOLDER", help="The --out folder of a coorp sweep or coorp compare run."
            ),
        ],
        out: Annotated[
            Path | None,
            typer.Option(metavar="DIR", help="Write the figures here (default: FOLDER)."),
        ] = None,
        fmt: FormatOption = "png",
    ) -> None:
        """Draw a saved sweep's figures again, without simulating."""
        formats = figure_formats(fmt)
        if out is not None:
            check_out_dir(out)
        rows = load_rows(folder)
        d = ensure_out_dir(out if out is not None else folder)
        figures = plot_sweep(aggregate(rows), d, formats)
        for f in figures:
            console.print(str(f))
