"""``coorp learn`` (RL over the team's simulated network) and ``coorp bench rl``
(coorp.flow against Ray on the same reactors)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from coorp._errors import UsageError

__all__ = ["register"]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not vals:
        raise UsageError(f"{what} is empty")
    return vals


def _seeds(text: str) -> tuple[int, ...]:
    """``1-3`` or ``1,2,5``."""
    if "-" in text and "," not in text:
        lo, _, hi = text.partition("-")
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            raise UsageError(f"--seeds must look like 1-3 or 1,2,5, got {text!r}") from None
        if b < a:
            raise UsageError(f"--seeds range {text!r} is empty")
        return tuple(range(a, b + 1))
    return _ints(text, "--seeds")


def _bench_group(app: typer.Typer) -> typer.Typer:
    for info in app.registered_groups:
        if info.name == "bench" and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help="Benchmarks.", no_args_is_help=True)
    app.add_typer(group, name="bench")
    return group


def register(app: typer.Typer) -> None:
    """Add ``learn`` and ``bench rl``."""
    bench = _bench_group(app)

    @bench.command("rl")
    def bench_rl(
        workers: Annotated[str, typer.Option(help="Worker counts for PPO and sampling.")] = "2,4",
        bcast_workers: Annotated[
            str, typer.Option(help="Worker counts for broadcast+gather.")
        ] = "2,4,8",
        bcast_mb: Annotated[str, typer.Option(help="Broadcast sizes in MB (10^6 B).")] = "1,10,100",
        iterations: Annotated[int, typer.Option(help="PPO iterations per run.")] = 8,
        reruns: Annotated[int, typer.Option(help="PPO reruns (bit-identity check).")] = 3,
        hidden: Annotated[int, typer.Option(help="Hidden units per layer (2 layers).")] = 64,
        contenders: Annotated[str, typer.Option(help="flow,ray (or one of them).")] = "flow,ray",
        json_path: Annotated[Path | None, typer.Option("--json", help="Write JSON here.")] = None,
    ) -> None:
        """The same PPO workload on coorp.flow and on Ray actors, plus broadcast+gather
        and sampling micro-benchmarks; prints flow's speedup over Ray (>1: flow wins)."""
        from rich.console import Console
        from rich.table import Table

        from coorp.learn._bench import RlBenchConfig, run_rl_bench

        try:
            mbs = tuple(float(x) for x in bcast_mb.split(",") if x.strip())
        except ValueError:
            raise UsageError(f"--bcast-mb must be numbers, got {bcast_mb!r}") from None
        cfg = RlBenchConfig(
            workers=_ints(workers, "--workers"),
            bcast_workers=_ints(bcast_workers, "--bcast-workers"),
            bcast_mb=mbs,
            iterations=iterations,
            reruns=reruns,
            hidden=hidden,
            contenders=tuple(c.strip() for c in contenders.split(",") if c.strip()),
        )
        console = Console(highlight=False)
        err = Console(stderr=True, quiet=not sys.stderr.isatty())
        res = run_rl_bench(cfg, progress=lambda m: err.log(m))
        titles = {
            "ppo": ("PPO iteration time (s)", "s_per_iteration"),
            "sampling": ("sampling throughput (env steps/s)", "samples_per_s"),
            "broadcast": ("broadcast+gather (ms per round)", "ms_per_round"),
        }
        for kind, (title, metric) in titles.items():
            t = Table(title=title)
            keys = ["workers"] + (["mb"] if kind == "broadcast" else [])
            for k in keys:
                t.add_column(k, justify="right")
            for c in cfg.contenders:
                t.add_column(c, justify="right")
            if kind == "ppo":
                for c in cfg.contenders:
                    t.add_column(f"{c} bit-identical", justify="center")
            if len(cfg.contenders) == 2:
                t.add_column("flow speedup", justify="right")
            for row in res[kind]:
                cells = [f"{row[k]:g}" for k in keys]
                cells += [f"{row[f'{c}_{metric}']:.4g}" for c in cfg.contenders]
                if kind == "ppo":
                    cells += [
                        "yes" if row[f"{c}_bit_identical_reruns"] else "NO" for c in cfg.contenders
                    ]
                if "flow_speedup" in row:
                    cells.append(f"{row['flow_speedup']:.2f}x")
                t.add_row(*cells)
            console.print(t)
        conf = res["config"]
        m = res["machine"]
        console.print(
            f"PPO: {conf['params']} parameters ({conf['param_bytes']} B), {conf['robots']} robots "
            f"x {conf['envs_per_worker']} envs x {conf['horizon']} steps per worker per "
            f"iteration; {m['cores']} cores, load {m['load_before']:.2f} -> {m['load_after']:.2f}"
        )
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(res, indent=2) + "\n")
            console.print(f"json: {json_path}")
