"""``coorp bench``: transport benchmarks (``broadcast``: large payloads and round trips)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


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
        impls: Annotated[str, typer.Option(help="Comma-separated implementations.")] = (
            "coorp,coorp_copy,shm_segment,pickle5_socket,pyzmq,cyclonedds"
        ),
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
        from coorp.transport._bench import IMPLS, BenchConfig, parse_sizes, run
        from coorp.transport._bench_report import plot, render_tables, write_json

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

    app.add_typer(bench, name="bench")
