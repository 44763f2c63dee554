"""``coorp bench``: benchmarks. ``broadcast``: large payloads and round trips on one host;
``team``: team capacity (robots × rate × size, the CSLV) against DDS and Zenoh; ``rl``:
the same PPO on coorp.flow and on Ray (the result tables are in ``coorp.learn``)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coorp._errors import UsageError
from coorp.cli._common import figure_formats, step_progress
from coorp.cli._options import (
    FormatOption,
    JsonFileOption,
    OutOption,
    check_out_file,
    ensure_out_dir,
    parse_list,
    parse_names,
)

__all__ = ["register"]

#: Where ``coorp bench broadcast`` draws its figure unless --plot says otherwise.
BROADCAST_PLOT = Path("results/bench/broadcast.png")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _sizes(flag: str, text: str | None) -> list[int] | None:
    """``"1000,4250B,16KB"`` -> bytes; a clear error naming the flag and the bad item."""
    from coorp.bench import parse_sizes

    if text is None:
        return None
    out: list[int] = []
    for item in parse_names(text) or []:
        try:
            out.extend(parse_sizes(item))
        except UsageError:
            raise UsageError(
                f"{flag} {text!r}: {item!r} is not a size; use e.g. 1000, 4250B, 16KB"
            ) from None
    if not out:
        raise UsageError(f"{flag} {text!r}: give at least one value")
    return out


def _numbers(flag: str, text: str | None, kind: type[int] | type[float]) -> list[Any] | None:
    return None if text is None else parse_list(flag, text, kind)


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command group to ``app``."""
    bench = typer.Typer(
        help="Benchmarks: Coorp's transport, team capacity, flow vs Ray.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )

    @bench.command("broadcast")
    def broadcast(
        sizes: Annotated[
            str, typer.Option(metavar="LIST", help="Payload sizes (MB = 10^6 B).")
        ] = "1MB,10MB,50MB",
        subscribers: Annotated[
            int, typer.Option(min=1, metavar="N", help="Subscriber processes.")
        ] = 4,
        rtt_sizes: Annotated[
            str, typer.Option(metavar="LIST", help="Round-trip sizes ('' to skip).")
        ] = "64B,12KB",
        impls: Annotated[
            str,
            typer.Option(
                metavar="LIST",
                help="Implementations, comma-separated (coorp also runs coorp_spin and "
                "coorp_iox beside it; default: coorp, coorp_copy, shm_segment, "
                "pickle5_socket, pyzmq, cyclonedds).",
                show_default=False,
            ),
        ] = "coorp,coorp_copy,shm_segment,pickle5_socket,pyzmq,cyclonedds",
        iterations: Annotated[
            int, typer.Option(metavar="N", help="Messages per size and implementation.")
        ] = 100,
        rtt_iterations: Annotated[
            int, typer.Option(metavar="N", help="Round trips per size.")
        ] = 300,
        max_seconds: Annotated[
            float,
            typer.Option(
                metavar="SECONDS", help="Stop a size early after this long (at least 3 messages)."
            ),
        ] = 20.0,
        consume: Annotated[
            str,
            typer.Option(
                metavar="LIST",
                help="What subscribers do with each message: 'view' (hold a usable array), "
                "'checksum' (read and checksum every byte, verified); comma-separated.",
            ),
        ] = "view,checksum",
        json_path: JsonFileOption = None,
        plot_path: Annotated[
            Path, typer.Option("--plot", metavar="FILE", help="Draw the figure here.")
        ] = BROADCAST_PLOT,
    ) -> None:
        """Broadcast to N processes and small round trips, side by side."""
        from rich.console import Console

        from coorp.bench import IMPLS, BenchConfig, parse_sizes
        from coorp.bench import plot_broadcast as plot
        from coorp.bench import render_broadcast_tables as render_tables
        from coorp.bench import run_broadcast as run
        from coorp.bench import write_broadcast_json as write_json

        chosen = parse_names(impls) or []
        unknown = sorted(set(chosen) - set(IMPLS))
        if unknown:
            raise UsageError(f"unknown implementation(s) {unknown}; choose from {list(IMPLS)}")
        cfg = BenchConfig(
            sizes=parse_sizes(sizes),
            subscribers=subscribers,
            rtt_sizes=parse_sizes(rtt_sizes) if rtt_sizes.strip() else [],
            impls=chosen,
            iterations=iterations,
            rtt_iterations=rtt_iterations,
            max_seconds=max_seconds,
            consume=parse_names(consume) or [],
        )
        default_plot = plot_path == BROADCAST_PLOT
        if json_path is not None:
            check_out_file(json_path, "--json", made=plot_path.parent if default_plot else None)
        check_out_file(plot_path, "--plot", create_dir=default_plot)
        console = Console(stderr=False)
        load_before = os.getloadavg()[0]
        # SIGTERM ends the run through the harness's cleanup (no files left behind).
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            with step_progress("bench broadcast") as step:
                result = run(cfg, progress=step)
        finally:
            signal.signal(signal.SIGTERM, previous)
        render_tables(result, console)
        # Other work on the machine shows up in the tails; say how busy it was.
        console.print(
            f"machine: {os.cpu_count()} cores, 1-min load average "
            f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        )
        plot(result, plot_path, subscribers)
        console.print(f"plot: {plot_path}")
        if json_path is not None:
            write_json(result, json_path)
            console.print(f"json: {json_path}")

    @bench.command("team")
    def team(
        config: Annotated[
            Path | None,
            typer.Option(
                metavar="FILE.toml", help="A TOML file with the fields below (flags override it)."
            ),
        ] = None,
        robots: Annotated[
            str | None, typer.Option(metavar="LIST", help="Team sizes N (default 1,2,4,8).")
        ] = None,
        rates: Annotated[
            str | None, typer.Option(metavar="LIST", help="Rates f in Hz (default 10,30,100).")
        ] = None,
        sizes: Annotated[
            str | None,
            typer.Option(
                metavar="LIST",
                help="Message sizes S (B, KB = 1000 B; default 1000,4250,16000).",
            ),
        ] = None,
        carriers: Annotated[
            str | None,
            typer.Option(
                metavar="LIST",
                help="sim, udp, coorp, dds-be, dds-rel, zenoh-be, zenoh-rel "
                "(default sim,udp,coorp,dds-rel,zenoh-rel).",
            ),
        ] = None,
        bulk: Annotated[
            str | None,
            typer.Option(
                metavar="LIST",
                help="Bulk next to the echoes: none, tcp (uncoordinated), coorp "
                "(coordinated) (default none).",
            ),
        ] = None,
        duration: Annotated[
            float | None,
            typer.Option(metavar="SECONDS", help="Seconds of pings per cell (default 2)."),
        ] = None,
        drain: Annotated[
            float | None,
            typer.Option(metavar="SECONDS", help="Seconds to wait for late echoes (default 1)."),
        ] = None,
        repetitions: Annotated[
            int | None, typer.Option(metavar="N", help="Runs of the whole sweep (default 1).")
        ] = None,
        bound_ms: Annotated[
            float | None, typer.Option(metavar="MS", help="The p99 RTT bound (default 33).")
        ] = None,
        loss_limit: Annotated[
            float | None,
            typer.Option(metavar="FRACTION", help="The loss bound (default 0.01)."),
        ] = None,
        rate_mbit: Annotated[
            float | None,
            typer.Option(metavar="MBIT", help="The namespaces' bottleneck (default 50)."),
        ] = None,
        queue_ms: Annotated[
            float | None, typer.Option(metavar="MS", help="The bottleneck's queue (default 100).")
        ] = None,
        scenario: Annotated[
            str | None,
            typer.Option(
                metavar="SCENARIO", help="PHY/MAC of the simulated channel (default crl-5)."
            ),
        ] = None,
        seed: Annotated[
            int | None, typer.Option(metavar="N", help="Seed of the phases (default 1).")
        ] = None,
        out: OutOption = Path("results/bench/team"),
        fmt: FormatOption = "png",
        list_carriers: Annotated[
            bool, typer.Option("--list-carriers", help="List the carriers; exit.")
        ] = False,
    ) -> None:
        """Team capacity: RTT, loss, CPU and the CSLV of N robots.

        N robots echo S-byte messages at f Hz over each carrier (docs/sizing.md)."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        from coorp.teambench import CARRIERS, load_config, render_tables, run_team, write_outputs

        console = Console(quiet=not sys.stdout.isatty())
        if list_carriers:
            for c in CARRIERS.values():
                typer.echo(f"{c.name:10} bulk: {','.join(c.bulk_modes):14} {c.summary}")
            return
        formats = list(figure_formats(fmt))
        overrides = {
            "robots": _numbers("--robots", robots, int),
            "rates_hz": _numbers("--rates", rates, float),
            "sizes_bytes": _sizes("--sizes", sizes), "carriers": parse_names(carriers),
            "bulk": parse_names(bulk), "duration_s": duration, "drain_s": drain,
            "repetitions": repetitions, "bound_ms": bound_ms, "loss_limit": loss_limit,
            "rate_mbit": rate_mbit, "queue_ms": queue_ms, "scenario": scenario, "seed": seed,
        }  # fmt: skip
        cfg = load_config(config, overrides)
        assert out is not None  # it has a default
        out = ensure_out_dir(out)
        err = Console(stderr=True, quiet=not sys.stderr.isatty())
        previous = signal.signal(signal.SIGTERM, _terminate)  # cleanup runs on SIGTERM too
        try:
            with Progress(
                TextColumn("{task.description}"), BarColumn(),
                TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(),
                console=err, transient=True,
            ) as bar:  # fmt: skip
                task = bar.add_task("team benchmark", total=None)

                def progress(msg: str, done: int, total: int) -> None:
                    bar.update(task, description=msg, completed=done, total=total)

                result = run_team(cfg, progress=progress, log=err.log)
        finally:
            signal.signal(signal.SIGTERM, previous)
        render_tables(result, console)
        written = write_outputs(
            result, out, config_path=str(config) if config else None, formats=formats
        )
        console.print(f"wall {result.wall_s:.0f} s; wrote " + ", ".join(str(p) for p in written))
        if not sys.stdout.isatty():
            n = len(result.rows)
            typer.echo(f"coorp bench team: {n} cells in {result.wall_s:.0f} s; results in {out}")

    @bench.command("rl")
    def bench_rl(
        workers: Annotated[
            str, typer.Option(metavar="LIST", help="Worker counts for PPO and sampling.")
        ] = "2,4",
        bcast_workers: Annotated[
            str, typer.Option(metavar="LIST", help="Worker counts for broadcast+gather.")
        ] = "2,4,8",
        bcast_mb: Annotated[
            str, typer.Option(metavar="LIST", help="Broadcast sizes in MB (10^6 B).")
        ] = "1,10,100",
        iterations: Annotated[int, typer.Option(metavar="N", help="PPO iterations per run.")] = 8,
        reruns: Annotated[
            int, typer.Option(metavar="N", help="PPO reruns (the bit-identity check).")
        ] = 3,
        hidden: Annotated[
            int, typer.Option(metavar="N", help="Hidden units per layer (2 layers).")
        ] = 64,
        contenders: Annotated[
            str, typer.Option(metavar="LIST", help="flow,ray (or one of them).")
        ] = "flow,ray",
        ray_idiom: Annotated[
            bool,
            typer.Option(help="Also time PPO as Ray code is usually written (ray.wait)."),
        ] = True,
        json_path: JsonFileOption = None,
    ) -> None:
        """The same PPO on coorp.flow and on Ray actors, side by side.

        Also broadcast+gather and sampling micro-benchmarks; prints flow's speedup over
        Ray (>1: flow wins)."""
        from rich.console import Console

        from coorp.learn import RlBenchConfig, run_rl_bench

        cfg = RlBenchConfig(
            workers=tuple(parse_list("--workers", workers, int)),
            bcast_workers=tuple(parse_list("--bcast-workers", bcast_workers, int)),
            bcast_mb=tuple(parse_list("--bcast-mb", bcast_mb, float)),
            iterations=iterations,
            reruns=reruns,
            hidden=hidden,
            contenders=tuple(parse_names(contenders) or []),
            ray_idiom=ray_idiom,
        )
        if json_path is not None:
            check_out_file(json_path, "--json")
        console = Console(highlight=False)
        with step_progress("bench rl") as step:
            res = run_rl_bench(cfg, progress=step)
        _render_rl(res, cfg, console)
        if json_path is not None:
            json_path.write_text(json.dumps(res, indent=2) + "\n")
            console.print(f"json: {json_path}")

    app.add_typer(bench, name="bench")


def _render_rl(res: dict[str, Any], cfg: Any, console: Any) -> None:
    """The tables of ``coorp bench rl``: PPO, sampling, broadcast, Ray's own idiom."""
    from rich.table import Table

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
            for c in cfg.contenders:
                t.add_column(f"{c} worker CPU s/iter", justify="right")
        if len(cfg.contenders) == 2:
            t.add_column("flow speedup", justify="right")
        for row in res[kind]:
            cells = [f"{row[k]:g}" for k in keys]
            cells += [f"{row[f'{c}_{metric}']:.4g}" for c in cfg.contenders]
            if kind == "ppo":
                cells += [
                    "yes" if row[f"{c}_bit_identical_reruns"] else "NO" for c in cfg.contenders
                ]
                cells += [f"{row[f'{c}_worker_cpu_s_per_iteration']:.3g}" for c in cfg.contenders]
            if "flow_speedup" in row:
                cells.append(f"{row['flow_speedup']:.2f}x")
            t.add_row(*cells)
        console.print(t)
    if res["ray_idiom_ppo"]:
        t = Table(title="PPO as Ray code is usually written (driver loop, ray.wait gathers)")
        for col in ("workers", "s per iteration", "bit-identical reruns", "flow speedup"):
            t.add_column(col, justify="right")
        for row, flow_row in zip(res["ray_idiom_ppo"], res["ppo"], strict=True):
            flow_s = flow_row.get("flow_s_per_iteration")
            vs = "-" if flow_s is None else f"{row['s_per_iteration'] / flow_s:.2f}x"
            same = (
                "yes"
                if row["bit_identical_reruns"]
                else (f"NO ({row['distinct_results']} results in {row['reruns']} runs)")
            )
            t.add_row(str(row["workers"]), f"{row['s_per_iteration']:.4g}", same, vs)
        console.print(t)
    conf = res["config"]
    m = res["machine"]
    console.print(
        f"PPO: {conf['params']} parameters ({conf['param_bytes']} B), {conf['robots']} robots "
        f"x {conf['envs_per_worker']} envs x {conf['horizon']} steps per worker per "
        f"iteration; {m['cores']} cores, load {m['load_before']:.2f} -> {m['load_after']:.2f}"
    )
