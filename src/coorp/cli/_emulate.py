"""``coorp emulate``: real programs on the simulated WiFi channel, in real time.

One network namespace per station of the scenario, each with a TUN interface ``wlan0``
whose packets cross Coorp's simulated 802.11 channel and come out in the receiver's
namespace at their simulated delivery time (``coorp.emulate``; docs/emulate.md). The
command runs until ``-- CMD`` exits, until ``--duration`` or until Ctrl-C, then prints
the emulator's verdict on real time (lag p50/p99/max, frames late by > 1 ms) and, with
``--json``, writes its whole report.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from coorp._errors import ConfigurationError, UsageError
from coorp._manifest import build_manifest, write_json
from coorp.cli._common import load_scenario_arg
from coorp.cli._options import check_out_dir, check_out_file

__all__ = ["register"]


def _env_name(station: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", station)


def _parse_run(text: str, stations: list[str]) -> tuple[str, str]:
    station, sep, cmd = text.partition("=")
    if not sep or not cmd.strip():
        raise UsageError(f"--run {text!r}: give STATION=COMMAND, like --run r1='iperf3 -s'")
    if station not in stations:
        raise UsageError(f"--run {text!r}: {station!r} is not a station; stations: {stations}")
    return station, cmd


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate(
        scenario: Annotated[
            str, typer.Argument(metavar="SCENARIO", help="A TOML file or a built-in name.")
        ],
        cmd: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="ARGS",
                help="After --: a program to run as root (in the root namespace, or in --at "
                "STATION's); the emulation ends when it exits, with its exit code.",
            ),
        ] = None,
        at: Annotated[
            str | None,
            typer.Option(metavar="STATION", help="Run CMD inside this station's namespace."),
        ] = None,
        run: Annotated[
            list[str] | None,
            typer.Option(
                "--run",
                metavar="STATION=COMMAND",
                help="Start COMMAND (a shell line) in STATION's namespace for the whole "
                "emulation (repeatable); killed at the end.",
            ),
        ] = None,
        sets: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                metavar="KEY=VALUE",
                help="Override into the scenario (repeatable), e.g. --set phy.width_mhz=20 "
                "--set phy.spatial_streams=1 --set hw_queue.mode=per_ac.",
            ),
        ] = None,
        seed: Annotated[
            int | None, typer.Option(metavar="N", help="Seed (default: the scenario's).")
        ] = None,
        ap: Annotated[
            str | None,
            typer.Option(
                metavar="STATION",
                help="The access point (default: the workload's leader, else a station "
                "named ap or leader, else the first).",
            ),
        ] = None,
        duration: Annotated[
            float | None,
            typer.Option(metavar="S", help="Stop after S seconds (default: CMD's end or Ctrl-C)."),
        ] = None,
        subnet: Annotated[
            str, typer.Option(metavar="A.B.C", help="The stations' /24: AP .1, others .11..")
        ] = "10.77.0",
        queue_packets: Annotated[
            int,
            typer.Option(metavar="N", help="Each station's kernel queue (tail drop beyond)."),
        ] = 1000,
        background: Annotated[
            bool,
            typer.Option("--background", help="Also run the scenario's own modelled [[flows]]."),
        ] = False,
        rt_priority: Annotated[
            int,
            typer.Option(
                metavar="N",
                help="SCHED_FIFO priority of the emulator process (1-99; 0: ordinary "
                "scheduling). Real time on a busy host needs it (docs/emulate.md).",
            ),
        ] = 10,
        split_cpus: Annotated[
            bool,
            typer.Option(
                "--split-cpus/--no-split-cpus",
                help="Pin the emulator to one CPU (the highest it may use) and steer the "
                "stations' received packets to the others (RPS), so that the receivers' "
                "network stacks do not run inside the emulator's writes (docs/emulate.md). "
                "Needs two CPUs; on one, nothing is split.",
            ),
        ] = True,
        gro: Annotated[
            bool,
            typer.Option(
                "--gro/--no-gro",
                help="Hand each station's stack the TCP segments one exchange delivers "
                "coalesced as a NIC driver's GRO does (one GSO packet per flow, up to 64 "
                "KiB; the interfaces carry virtio-net headers), not one packet per frame "
                "(docs/emulate.md).",
            ),
        ] = True,  # coorp.emulate.GRO_DEFAULT (the CLI does not import the emulator early)
        trace: Annotated[
            Path | None,
            typer.Option(
                metavar="DIR",
                help="Write frames/exchanges/writes/arrivals tables (Parquet) and "
                "frames.mcap to DIR.",
            ),
        ] = None,
        json_path: Annotated[
            Path | None,
            typer.Option("--json", metavar="FILE", help="Write the emulator's report (JSON)."),
        ] = None,
        quiet: Annotated[
            bool, typer.Option("--quiet", "-q", help="No status line every second.")
        ] = False,
    ) -> None:
        """Real programs on the simulated WiFi channel, in real time.

        Needs root. Every station of SCENARIO gets a network namespace with interface wlan0 (its
        address in --subnet; /etc/hosts names every station). Enter one with
        `ip netns exec NAMESPACE CMD` (the names are printed), or give
        `-- CMD`: it gets COORP_EMU_NS_<STATION> and COORP_EMU_ADDR_<STATION> in its
        environment. Examples:

          coorp emulate crl-5 --set phy.width_mhz=20 --set phy.spatial_streams=1 \\
              --run leader='iperf3 -s' --at r1 -- iperf3 -c leader -t 10

          coorp emulate crl-5 --duration 60
        """
        from coorp.emulate import Emulation, EmulationReport, emulation_unavailable
        from coorp.scenario import apply_overrides
        from coorp.sweep import parse_override

        if rt_priority < 0 or rt_priority > 99:
            raise UsageError(f"--rt-priority {rt_priority}: allowed 0-99")
        if duration is not None and not duration > 0:
            raise UsageError(f"--duration {duration}: must be > 0 seconds")
        if queue_packets < 1:
            raise UsageError(f"--queue-packets {queue_packets}: must be >= 1")
        if json_path is not None:
            check_out_file(json_path, "--json")
        if trace is not None:
            check_out_dir(trace, "--trace")
        path, sc = load_scenario_arg(scenario)
        pairs: list[tuple[str, Any]] = []
        for text in sets or []:
            key, values = parse_override(text)
            if len(values) != 1:
                raise UsageError(f"--set {text!r}: one value per key")
            pairs.append((key, values[0]))
        sc = apply_overrides(sc, pairs, source=str(path))
        stations = [s.name for s in sc.stations]
        runs = [_parse_run(t, stations) for t in run or []]
        if at is not None and at not in stations:
            raise UsageError(f"--at {at!r} is not a station; stations: {stations}")
        if at is not None and not cmd:
            raise UsageError("--at STATION needs a command after --")
        em = Emulation(
            sc, seed=seed, ap=ap, subnet=subnet, queue_packets=queue_packets,
            background=background, duration_s=duration if not cmd else None,
            trace_dir=trace, record_arrivals=trace is not None, status=not quiet,
            rt_priority=rt_priority, source=str(path), split_cpus=split_cpus,
            gro=gro,
        )  # fmt: skip
        why = emulation_unavailable()
        if why is not None:
            raise ConfigurationError(f"coorp emulate cannot run here: {why}")

        def on_term(signum: int, frame: object) -> None:
            raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C

        signal.signal(signal.SIGTERM, on_term)
        code = 0
        report: EmulationReport | None = None
        t0 = time.perf_counter()
        load0 = os.getloadavg()
        try:
            em.up()
            if em.removed_stale:
                typer.echo(f"emulate: removed what dead runs left: {em.removed_stale}", err=True)
            env = dict(os.environ)
            env["COORP_EMU_STATIONS"] = " ".join(stations)
            for st in stations:
                env[f"COORP_EMU_NS_{_env_name(st)}"] = em.ns(st)
                env[f"COORP_EMU_ADDR_{_env_name(st)}"] = em.addr(st)
                role = "AP" if st == em.ap else "station"
                typer.echo(f"emulate: {st:>12}  {em.addr(st):<15} ip netns exec {em.ns(st)}  "
                           f"({role})", err=True)  # fmt: skip
            for st, line in runs:
                em.popen(st, ["sh", "-c", line], env=env, stdout=None, stderr=None)
            if cmd:
                p = em.popen(at, list(cmd), env=env, stdout=None, stderr=None)
                try:
                    code = p.wait()
                except KeyboardInterrupt:
                    p.send_signal(signal.SIGINT)
                    code = 130
            else:
                try:
                    assert em.emulator is not None
                    em.emulator.wait(timeout=None)
                except KeyboardInterrupt:
                    code = 0
            report = em.stop()
        except KeyboardInterrupt:
            report = em.stop() if em.emulator is not None else None
            code = 130
        finally:
            em.destroy()
        if report is None:
            sys.exit(code)
        d = report.data
        lag, wake = d["frame_lag"], d["wake_lag"]
        typer.echo(
            f"emulate: {d['frames_out']} frames delivered, {d['frames_in']} read in "
            f"{d['wall_s']:.1f} s; frame lag p50 {lag['p50_ms']:.3f} ms p99 {lag['p99_ms']:.3f} "
            f"ms max {lag['max_ms']:.3f} ms; wake-up lag p99 {wake['p99_ms']:.3f} ms; 1-min "
            f"load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
            err=True,
        )
        typer.echo(f"emulate: {report.verdict}", err=True)
        if json_path is not None:
            write_json(json_path, {
                "report": d,
                "manifest": build_manifest(
                    scenario=sc.model_dump(mode="json"), scenario_path=str(path),
                    seed=d["seed"], wall_s=time.perf_counter() - t0,
                    extra={"command": cmd, "at": at, "runs": runs},
                ),
            })  # fmt: skip
        if code:
            sys.exit(code)
