"""``coorp simulate`` and ``coorp schema``: run one scenario; print the scenario schema.

A scenario's traffic is its ``[[flows]]``, its ``[workload]`` (the MPC loop and DRLC
epochs, run under one policy: ``--policy``, default ``edca``), or both. A scenario with
neither is refused: there would be nothing to report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from coorp._errors import UsageError
from coorp._manifest import build_manifest, json_safe, write_json
from coorp._tables import write_table
from coorp.cli._common import (
    console,
    duration_ns_option,
    figure_formats,
    load_policy_options,
    load_scenario_arg,
    progress_bar,
)
from coorp.cli._options import (
    FormatOption,
    JsonFileOption,
    OutOption,
    PolicyModuleOption,
    ScenarioArg,
    SeedOption,
    check_out_dir,
    check_out_file,
    duration_opt,
    ensure_out_dir,
)
from coorp.policies import policy_label
from coorp.report import deployable
from coorp.scenario import Scenario
from coorp.sim import FlowStats, SimResult, Simulation
from coorp.stats import percentile
from coorp.units import NS_PER_MS

__all__ = ["register", "render_result", "render_workload"]

#: The policy ``coorp simulate`` runs a ``[workload]`` under unless told otherwise.
DEFAULT_POLICY = "edca"


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


#: More flows than this and ``coorp simulate`` prints one row per kind and access
#: category instead of one per flow (``--all-flows`` prints them all; every flow is in
#: ``flows.csv`` with ``--out``): a thousand rows help nobody on a terminal, and drawing
#: them took longer than simulating them.
MAX_FLOW_ROWS = 40

_COLUMNS = ("flow", "kind", "src→dst", "AC", "Mb/s", "msgs", "lat p50 ms", "lat p99 ms",
            "dropped")  # fmt: skip


def render_result(result: SimResult, *, all_flows: bool = False) -> Table:
    """The run as a table: a row per flow, or with more than :data:`MAX_FLOW_ROWS` flows
    (and not ``all_flows``) a row per kind and access category, latency percentiles
    pooled over the group's messages."""
    table = Table(title=f"{result.scenario_name} · seed {result.seed} · "
                  f"{result.duration_ns / 1e9:g} s simulated")  # fmt: skip
    for col in _COLUMNS:
        table.add_column(col, justify="left" if col in ("flow", "kind", "src→dst") else "right")
    flows = list(result.flows.values())
    grouped = len(flows) > MAX_FLOW_ROWS and not all_flows
    for row in _group_rows(result) if grouped else map(_flow_row, flows):
        table.add_row(*row)
    ch = result.channel
    table.caption = (
        f"total {result.total_throughput_mbps:.1f} Mb/s"
        f" · busy {ch.busy_ns / result.duration_ns:.1%}"
        f" · {ch.exchanges} exchanges, {ch.collisions} collisions"
        f" · {result.events_processed} events, {result.sim_s_per_wall_s:.1f} sim-s/wall-s"
    )
    if grouped:
        table.caption += (
            f"\n{len(flows)} flows, grouped by kind and AC: --all-flows prints each one, "
            "--out DIR writes each to flows.csv"
        )
    return table


def _flow_row(f: FlowStats) -> tuple[str, ...]:
    msgs = f"{f.messages_delivered}/{f.messages_sent}" if f.kind == "datagram" else "-"
    return (f.name, f.kind, f"{f.src}→{f.dst}", f.category, f"{f.throughput_mbps:.2f}", msgs,
            _fmt(f.latency_ms_p50), _fmt(f.latency_ms_p99), str(f.dropped_packets))  # fmt: skip


def _group_rows(result: SimResult) -> list[tuple[str, ...]]:
    groups: dict[tuple[str, str], list[FlowStats]] = {}
    for f in result.flows.values():
        groups.setdefault((f.kind, f.category), []).append(f)
    msg_flow = result.messages["flow"]
    latency = result.messages["latency_ns"]
    rows: list[tuple[str, ...]] = []
    for (kind, ac), members in groups.items():
        names = [f.name for f in members]
        lat = latency[np.isin(msg_flow, names) & (latency >= 0)] / NS_PER_MS
        sent = sum(f.messages_sent for f in members)
        done = sum(f.messages_delivered for f in members)
        rows.append((
            f"{len(members)} flows", kind, f"{len({f.src for f in members})} sources", ac,
            f"{sum(f.throughput_mbps for f in members):.2f}",
            f"{done}/{sent}" if kind == "datagram" else "-",
            _fmt(percentile(lat, 50, empty=None, method="linear")),
            _fmt(percentile(lat, 99, empty=None, method="linear")),
            str(sum(f.dropped_packets for f in members)),
        ))  # fmt: skip
    return rows


def render_workload(metrics: dict[str, Any], policy: str, deadline_ms: float) -> Table:
    """One row: the workload's metrics under ``policy``; warnings in the caption."""
    label = policy_label(policy)  # a reference bound reads "(not deployable)"
    t = Table(title=escape(f"workload under {label} · reaction bound {deadline_ms:g} ms"))
    cols = ("loops", "miss rate", "reaction p50", "p99 ms", "LS lat p99 ms", "BH Mb/s",
            "epochs", "epoch s")  # fmt: skip
    for c in cols:
        t.add_column(c, justify="right")
    r = metrics["reaction_ms"]
    miss = metrics["violation_rate"]
    t.add_row(
        str(metrics["loops"]), "-" if miss is None or not math.isfinite(miss) else f"{miss:.1%}",
        _fmt(r["p50"], 1), _fmt(r["p99"], 1), _fmt(metrics["ls_latency_ms"]["p99"]),
        _fmt(metrics["bh_mbps"], 1), str(metrics["epochs"]), _fmt(metrics["epoch_s"]),
    )  # fmt: skip
    if metrics["warnings"]:
        t.caption = escape("\n".join(f"warning: {w}" for w in metrics["warnings"]))
    return t


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        scenario: ScenarioArg,
        seed: SeedOption = None,
        duration: Annotated[float | None, duration_opt()] = None,
        json_path: JsonFileOption = None,
        out: OutOption = None,
        policy: Annotated[
            str | None,
            typer.Option(
                metavar="NAME",
                help=f"The policy a [workload] runs under (default: {DEFAULT_POLICY}); "
                "coorp compare runs several.",
            ),
        ] = None,
        policy_module: PolicyModuleOption = None,
        fmt: FormatOption = "png",
        all_flows: Annotated[
            bool,
            typer.Option(
                "--all-flows",
                help=f"Print a row per flow even with more than {MAX_FLOW_ROWS} flows "
                "(then: a row per kind and access category).",
            ),
        ] = False,
    ) -> None:
        """Simulate one scenario and print its results.

        The scenario's [[flows]] run as given; its [workload] (the MPC loop and DRLC
        epochs) runs under one policy (--policy)."""
        # Every argument is checked before the simulation starts.
        path, sc = load_scenario_arg(scenario)
        duration_ns = duration_ns_option(duration)
        formats = figure_formats(fmt)
        if out is not None:
            check_out_dir(out)
        if json_path is not None:
            check_out_file(json_path, "--json", made=out)
        load_policy_options(policy_module)
        total = duration_ns if duration_ns is not None else round(sc.duration_s * 1e9)
        if sc.workload is None and policy is not None:
            raise UsageError(
                f"--policy {policy}: {path} has no [workload] section, and a policy acts on "
                "a workload (its [[flows]] run as given); drop --policy"
            )
        if sc.workload is None and not sc.flows:
            raise UsageError(
                f"{path} has no traffic: no [[flows]] and no [workload] section; add one "
                "(docs/scenarios.md), or simulate a built-in scenario such as saturation-5"
            )
        if sc.workload is not None:
            from coorp.policies import get_policy

            get_policy(policy or DEFAULT_POLICY)  # an unknown name, before the folder exists
        out_dir = ensure_out_dir(out) if out is not None else None
        if sc.workload is not None:
            _simulate_workload(sc, path, policy or DEFAULT_POLICY, seed, total, json_path,
                               out_dir, formats)  # fmt: skip
            return
        sim = Simulation(sc, seed=seed, source=str(path))
        with progress_bar(f"simulate {sc.name}", total) as update:
            result = sim.run(total, update)
        console.print(render_result(result, all_flows=all_flows))
        if json_path is not None:
            write_json(json_path, result.summary())
        if out_dir is not None:
            write_run(out_dir, result, sc, str(path))
            console.print(f"results written to {out_dir}/")

    @app.command()
    def schema() -> None:
        """Print the JSON Schema of scenario files."""
        typer.echo(json.dumps(Scenario.model_json_schema(), indent=2))


def _simulate_workload(
    sc: Scenario,
    path: Path,
    policy: str,
    seed: int | None,
    total_ns: int,
    json_path: Path | None,
    out: Path | None,
    formats: tuple[str, ...],
) -> None:
    from coorp.report import plot_run, write_raw_tables
    from coorp.workload import run_crl

    assert sc.workload is not None
    with progress_bar(f"simulate {sc.name} ({policy})", total_ns) as update:
        crl = run_crl(sc, policy, seed=seed, duration_ns=total_ns, on_progress=update,
                      source=str(path))  # fmt: skip
    result = crl.sim
    metrics = json_safe(crl.metrics())
    console.print(render_result(result))
    console.print(render_workload(metrics, policy, sc.workload.mpc.deadline_us / 1000))
    workload = {"policy": policy, "deployable": deployable(policy), **metrics}
    summary = {**result.summary(), "workload": workload}
    if json_path is not None:
        write_json(json_path, summary)
    if out is not None:
        write_run(out, result, sc, str(path), summary=summary)
        write_raw_tables(crl, out)
        figures = plot_run(crl, out, formats)
        console.print(
            f"results, raw tables (loops, epochs, ls_messages, timeseries) and "
            f"{len(figures)} figure file(s) written to {out}/"
        )


def write_run(
    out: Path, result: SimResult, sc: Scenario, path: str, summary: dict[str, Any] | None = None
) -> None:
    """summary.json, messages/flows/stations tables, manifest.json."""
    write_json(out / "summary.json", result.summary() if summary is None else summary)
    tables = result.tables()
    write_table(out / "messages", tables["messages"], csv=False)
    write_table(out / "flows", tables["flows"])
    write_table(out / "stations", tables["stations"])
    write_json(out / "manifest.json", build_manifest(
        scenario=sc.model_dump(mode="json"), scenario_path=path, seed=result.seed,
        wall_s=result.wall_s,
        extra={"duration_ns": result.duration_ns, "events_processed": result.events_processed},
    ))  # fmt: skip
