"""``coorp bench``: transport benchmarks (``broadcast``: large payloads and round trips;
``team``: team capacity, robots × rate × size, the CSLV, against DDS and Zenoh)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coorp._errors import UsageError

__all__ = ["register"]


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _list(flag: str, text: str | None, kind: type[int] | type[float]) -> list[Any] | None:
    """``"1,2,4"`` -> numbers; a clear error naming the flag and the bad item."""
    if text is None:
        return None
    out: list[Any] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            continue
        if kind is int:
            from coorp.bench import parse_sizes

            if flag == "--sizes":
                try:
                    out.extend(parse_sizes(item))
                except UsageError:
                    raise UsageError(
                        f"{flag} {text!r}: {item!r} is not a size; use e.g. 1000, 4250B, 16KB"
                    ) from None
                continue
        try:
            out.append(kind(item))
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise UsageError(f"{flag} {text!r}: {item!r} is not {what}") from None
    if not out:
        raise UsageError(f"{flag} {text!r}: give at least one value")
    return out


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command group to ``app``."""
    bench = typer.Typer(
        help="Benchmarks of Coorp's transport against baselines.", no_args_is_help=True
    )

    @bench.command("broadcast")
    def broadcast(
        sizes: Annotated[str, typer.Option(help="Payload sizes (MB = 10^6 B).")] = "1MB,10MB,50MB",
        subscribers: Annotated[int, typer.Option(help="Subscriber processes.")] = 4,
        rtt_sizes: Annotated[str, typer.Option(help="Round-trip sizes ('' to skip).")] = "64B,12KB",
        impls: Annotated[
            str,
            typer.Option(
                help="Comma-separated implementations (coorp also runs coorp_spin and "
                "coorp_iox beside it)."
            ),
        ] = ("coorp,coorp_copy,shm_segment,pickle5_socket,pyzmq,cyclonedds"),
        iterations: Annotated[int, typer.Option(help="Messages per size and impl.")] = 100,
        rtt_iterations: Annotated[int, typer.Option(help="Round trips per size.")] = 300,
        max_seconds: Annotated[
            float, typer.Option(help="Stop a size early after this long (at least 3 messages).")
        ] = 20.0,
        consume: Annotated[
            str,
            typer.Option(
                help="What subscribers do with each message: 'view' (hold a usable array), "
                "'checksum' (read and checksum every byte, verified); comma-separated."
            ),
        ] = "view,checksum",
        json_path: Annotated[Path | None, typer.Option("--json", help="Write JSON here.")] = None,
        plot_path: Annotated[Path, typer.Option("--plot", help="Write the plot here.")] = Path(
            "results/bench/broadcast.png"
        ),
    ) -> None:
        """Broadcast latency to N processes and small-message round trips, side by side."""
        from rich.console import Console

        from coorp._errors import UsageError
        from coorp.bench import IMPLS, BenchConfig, parse_sizes
        from coorp.bench import plot_broadcast as plot
        from coorp.bench import render_broadcast_tables as render_tables
        from coorp.bench import run_broadcast as run
        from coorp.bench import write_broadcast_json as write_json

        chosen = [s.strip() for s in impls.split(",") if s.strip()]
        unknown = sorted(set(chosen) - set(IMPLS))
        if unknown:
            raise UsageError(f"unknown implementation(s) {unknown}; choose from {list(IMPLS)}")
        if subscribers < 1:
            raise UsageError("--subscribers must be at least 1")
        cfg = BenchConfig(
            sizes=parse_sizes(sizes),
            subscribers=subscribers,
            rtt_sizes=parse_sizes(rtt_sizes) if rtt_sizes.strip() else [],
            impls=chosen,
            iterations=iterations,
            rtt_iterations=rtt_iterations,
            max_seconds=max_seconds,
            consume=[m.strip() for m in consume.split(",") if m.strip()],
        )
        console = Console(stderr=False)
        err = Console(stderr=True, quiet=not sys.stderr.isatty())
        load_before = os.getloadavg()[0]
        # SIGTERM ends the run through the harness's cleanup (no files left behind).
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            result = run(cfg, progress=lambda m: err.log(m))
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
            Path | None, typer.Option(help="A TOML file with the fields below (flags override it).")
        ] = None,
        robots: Annotated[str | None, typer.Option(help="Team sizes N. (default 1,2,4,8)")] = None,
        rates: Annotated[
            str | None, typer.Option(help="Rates f in Hz. (default 10,30,100)")
        ] = None,
        sizes: Annotated[
            str | None,
            typer.Option(help="Message sizes S (B, KB = 1000 B). (default 1000,4250,16000)"),
        ] = None,
        carriers: Annotated[
            str | None,
            typer.Option(
                help="sim, udp, coorp, dds-be, dds-rel, zenoh-be, zenoh-rel. "
                "(default sim,udp,coorp,dds-rel,zenoh-rel)"
            ),
        ] = None,
        bulk: Annotated[
            str | None,
            typer.Option(
                help="Bulk next to the echoes: none, tcp (uncoordinated), coorp "
                "(coordinated). (default none)"
            ),
        ] = None,
        duration: Annotated[
            float | None, typer.Option(help="Seconds of pings per cell. (default 2)")
        ] = None,
        drain: Annotated[
            float | None, typer.Option(help="Seconds to wait for late echoes. (default 1)")
        ] = None,
        repetitions: Annotated[
            int | None, typer.Option(help="Runs of the whole sweep. (default 1)")
        ] = None,
        bound_ms: Annotated[float | None, typer.Option(help="p99 RTT bound. (default 33)")] = None,
        loss_limit: Annotated[
            float | None, typer.Option(help="Loss bound (fraction). (default 0.01)")
        ] = None,
        rate_mbit: Annotated[
            float | None, typer.Option(help="Namespace bottleneck. (default 50)")
        ] = None,
        queue_ms: Annotated[
            float | None, typer.Option(help="Bottleneck queue. (default 100)")
        ] = None,
        scenario: Annotated[
            str | None, typer.Option(help="PHY/MAC of the simulated channel. (default crl-5)")
        ] = None,
        seed: Annotated[int | None, typer.Option(help="Seed of phases. (default 1)")] = None,
        out: Annotated[Path, typer.Option(help="Output directory.")] = Path("results/bench/team"),
        fmt: Annotated[str, typer.Option("--format", help="Figure formats: png,pdf,svg.")] = "png",
        list_carriers: Annotated[
            bool, typer.Option("--list-carriers", help="List and exit.")
        ] = False,
    ) -> None:
        """Team capacity: N robots echo S-byte messages at f Hz; RTT, loss, CPU and the CSLV."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        from coorp.teambench import CARRIERS, load_config, render_tables, run_team, write_outputs

        console = Console(quiet=not sys.stdout.isatty())
        if list_carriers:
            for c in CARRIERS.values():
                typer.echo(f"{c.name:10} bulk: {','.join(c.bulk_modes):14} {c.summary}")
            return
        formats = _names(fmt) or []
        bad = [f for f in formats if f not in ("png", "pdf", "svg")]
        if bad:
            raise UsageError(f"--format {fmt!r}: {bad} not allowed; choose from png, pdf, svg")
        overrides = {
            "robots": _list("--robots", robots, int), "rates_hz": _list("--rates", rates, float),
            "sizes_bytes": _list("--sizes", sizes, int), "carriers": _names(carriers),
            "bulk": _names(bulk), "duration_s": duration, "drain_s": drain,
            "repetitions": repetitions, "bound_ms": bound_ms, "loss_limit": loss_limit,
            "rate_mbit": rate_mbit, "queue_ms": queue_ms, "scenario": scenario, "seed": seed,
        }  # fmt: skip
        cfg = load_config(config, overrides)
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

    app.add_typer(bench, name="bench")
