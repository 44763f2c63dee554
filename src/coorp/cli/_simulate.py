"""``coorp simulate`` and ``coorp schema``: run one scenario; print the scenario schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coorp._manifest import build_manifest, write_json
from coorp._tables import write_table
from coorp.cli._common import console, duration_ns_option, progress_bar, require_out_dir
from coorp.scenario import Scenario, load_scenario
from coorp.sim import SimResult, Simulation

__all__ = ["register"]


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def render_result(result: SimResult) -> Table:
    table = Table(title=f"{result.scenario_name} · seed {result.seed} · "
                  f"{result.duration_ns / 1e9:g} s simulated")  # fmt: skip
    for col in ("flow", "kind", "src→dst", "AC", "Mb/s", "msgs", "lat p50 ms", "lat p99 ms",
                "dropped"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("flow", "kind", "src→dst") else "right")
    for f in result.flows.values():
        msgs = f"{f.messages_delivered}/{f.messages_sent}" if f.kind == "datagram" else "-"
        table.add_row(
            f.name,
            f.kind,
            f"{f.src}→{f.dst}",
            f.category,
            f"{f.throughput_mbps:.2f}",
            msgs,
            _fmt(f.latency_ms_p50),
            _fmt(f.latency_ms_p99),
            str(f.dropped_packets),
        )
    ch = result.channel
    table.caption = (
        f"total {result.total_throughput_mbps:.1f} Mb/s"
        f" · busy {ch.busy_ns / result.duration_ns:.1%}"
        f" · {ch.exchanges} exchanges, {ch.collisions} collisions"
        f" · {result.events_processed} events, {result.sim_s_per_wall_s:.1f} sim-s/wall-s"
    )
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        scenario: Annotated[
            Path, typer.Argument(help="Scenario TOML file (see docs/scenarios.md).")
        ],
        seed: Annotated[
            int | None, typer.Option(help="RNG seed (default: the scenario's).")
        ] = None,
        duration: Annotated[
            float | None, typer.Option(help="Simulated seconds (default: the scenario's).")
        ] = None,
        json_path: Annotated[
            Path | None, typer.Option("--json", help="Also write the summary JSON here.")
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Directory for summary, tables and manifest.")
        ] = None,
    ) -> None:
        """Simulate one scenario on the built-in 802.11ac channel and print per-flow results."""
        sc = load_scenario(scenario)
        duration_ns = duration_ns_option(duration)
        sim = Simulation(sc, seed=seed, source=str(scenario))
        total = duration_ns if duration_ns is not None else round(sc.duration_s * 1e9)
        with progress_bar(f"simulate {sc.name}", total) as update:
            result = sim.run(total, update)
        console.print(render_result(result))
        summary = result.summary()
        if json_path is not None:
            write_json(json_path, summary)
        if out is not None:
            write_run(require_out_dir(out), result, sc, str(scenario))
            console.print(f"results written to {out}/")

    @app.command()
    def schema() -> None:
        """Print the JSON Schema of scenario files."""
        typer.echo(json.dumps(Scenario.model_json_schema(), indent=2))


def write_run(out: Path, result: SimResult, sc: Scenario, path: str) -> None:
    """summary.json, messages/flows/stations tables, manifest.json."""
    write_json(out / "summary.json", result.summary())
    tables = result.tables()
    write_table(out / "messages", tables["messages"], csv=False)
    write_table(out / "flows", tables["flows"])
    write_table(out / "stations", tables["stations"])
    write_json(out / "manifest.json", build_manifest(
        scenario=sc.model_dump(mode="json"), scenario_path=path, seed=result.seed,
        wall_s=result.wall_s,
        extra={"duration_ns": result.duration_ns, "events_processed": result.events_processed},
    ))  # fmt: skip
