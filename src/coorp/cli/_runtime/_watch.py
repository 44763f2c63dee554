"""``coorp top`` and ``coorp doctor``: watching a running team, checking a host.

``coorp top --config team.toml`` asks the leader once per interval for every robot's
latest report (:func:`coorp.runtime.aquery_team`) and shows them live: the permit
holder and queue, and per robot its mode, LS send rate, its LS latency as the receiving
inboxes measured it, misses, bulk Mb/s, how much of the time local preemption paused
its bulk, and the connections transparent mode intercepted. ``--json`` prints the same
as JSON (one object per interval, ``--count`` of them).

``coorp doctor [--config team.toml] [--interface IF]`` checks what this host does to
LS packets (:mod:`coorp.runtime` ``diagnose``): WiFi or not, power save, qdisc, DSCP
and priority mapping, MTU against the LS message size, and whether transparent mode
can run here. Exit status 1 when a check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coorp._errors import CoorpError, PeerError, UsageError
from coorp.cli._options import ConfigOption, JsonFlagOption, LeaderOption

if TYPE_CHECKING:
    from coorp.runtime import TeamStatus

__all__ = ["register"]


def _console() -> Any:
    """A console for tables: a terminal's own width; piped, as wide as the table is
    (rich would cut every row to 80 columns)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=1000, soft_wrap=True)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def status_table(status: TeamStatus, title: str) -> Any:
    """The team as a rich table (what ``coorp top`` draws)."""
    from rich.table import Table

    holders = ", ".join(status.holders) or "none"
    waiting = ", ".join(status.waiting) or "none"
    table = Table(title=title, caption=f"permit: {holders}   waiting: {waiting}")
    for col, justify in (
        ("robot", "left"), ("mode", "left"), ("LS Hz", "right"), ("LS flows", "right"),
        ("LS p50 ms", "right"), ("LS p99 ms", "right"), ("late/recv", "right"),
        ("bulk Mb/s", "right"), ("paused", "right"), ("intercepted", "left"),
    ):  # fmt: skip
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in status.rows:
        flows = [f"{f.dest}{'*' if f.active else ''}" for f in r.intercepted]
        shown = ", ".join(flows[:3]) + (f" +{len(flows) - 3}" if len(flows) > 3 else "")
        name = r.robot + ("" if r.connected else " (gone)")
        if r.robot in status.holders:
            name = f"[bold]{name}[/bold]"
        table.add_row(
            name, r.mode, _fmt(r.ls_rate_hz), str(r.ls_flows), _fmt(r.ls_p50_ms, 2),
            _fmt(r.ls_p99_ms, 2), f"{r.ls_late}/{r.ls_received}", _fmt(r.bulk_mbps),
            f"{r.gate_paused:.0%}", f"{r.relayed} ({shown})" if r.relayed else "-",
        )  # fmt: skip
    return table


def top(
    config: ConfigOption,
    robot: Annotated[
        str | None,
        typer.Option(
            "--robot",
            "-r",
            metavar="NAME",
            help="Ask as this robot (with its key file) instead of with the team key.",
        ),
    ] = None,
    leader_addr: LeaderOption = None,
    interval: Annotated[
        float,
        typer.Option(min=0.1, max=60.0, metavar="SECONDS", help="Time between updates."),
    ] = 1.0,
    count: Annotated[
        int, typer.Option(min=0, metavar="N", help="Stop after N updates (0: at Ctrl-C).")
    ] = 0,
    as_json: JsonFlagOption = False,
) -> None:
    """Watch a running team live, from its leader.

    Shows the permit holder and queue and, per robot, its LS rate and latency, misses,
    bulk Mb/s and intercepted flows (every robot reports once a second). With --json,
    one JSON object per update (one update unless --count says more)."""
    from coorp.runtime import aquery_team, load_team_config, resolve_team_key

    cfg = load_team_config(config)
    if robot is not None and robot not in cfg.team.robots:
        raise UsageError(f"--robot {robot!r} is not in team.robots of {config}")
    key = resolve_team_key(cfg, config, robot=robot)
    target = leader_addr or cfg.agent.leader
    source = "--leader" if leader_addr else f"agent.leader in {config}"
    if target is None:
        raise UsageError(f"{config} has no agent.leader: give --leader HOST:PORT")
    if as_json and count == 0:
        count = 1
    live = sys.stdout.isatty() and not as_json

    async def run() -> None:
        from rich.live import Live

        console = _console()
        n = 0
        ctx = Live(console=console, auto_refresh=False) if live else contextlib.nullcontext()
        with ctx as view:
            while count == 0 or n < count:
                t0 = time.monotonic()
                try:
                    status = await aquery_team(target, key)
                except (PeerError, OSError) as exc:
                    raise typer.Exit(_unreachable(target, source, exc)) from None
                n += 1
                if as_json:
                    print(json.dumps(status.to_json()), flush=True)
                elif view is not None:
                    view.update(status_table(status, f"team {cfg.team.name} ({target})"))
                    view.refresh()
                else:
                    console.print(status_table(status, f"team {cfg.team.name} ({target})"))
                if count and n >= count:
                    break
                await asyncio.sleep(max(interval - (time.monotonic() - t0), 0))

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


def _unreachable(target: str, source: str, exc: BaseException) -> int:
    """One line: which leader (and where its address came from) and why it did not
    answer, in words (not ``[Errno 111] Connect call failed``)."""
    if isinstance(exc, ConnectionRefusedError):
        why = "connection refused: nothing listens there; is `coorp leader` running?"
    elif isinstance(exc, TimeoutError):
        why = "no answer in time: is the address right and the leader reachable?"
    elif isinstance(exc, OSError) and exc.strerror:
        why = exc.strerror[0].lower() + exc.strerror[1:]
    else:
        why = str(exc)
    print(f"coorp top: leader {target} (from {source}): {why}", file=sys.stderr)
    return 1


def doctor(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", metavar="TEAM.toml", help="The team file (docs/runtime.md)."
        ),
    ] = None,
    interface: Annotated[
        str | None,
        typer.Option(
            "--interface",
            "-i",
            metavar="IF",
            help="The interface to check (default: the route to the leader).",
        ),
    ] = None,
    ls_bytes: Annotated[
        int,
        typer.Option(min=1, max=65_000, metavar="BYTES", help="The largest LS message you send."),
    ] = 12_000,
    robot: Annotated[
        str | None,
        typer.Option(
            "--robot",
            "-r",
            metavar="NAME",
            help="Also check what this robot's agent needs: its key, its ports, no agent "
            "of it running, the leader accepting it (needs --config).",
        ),
    ] = None,
    as_json: JsonFlagOption = False,
) -> None:
    """Check what this host does to LS packets, and how to fix it.

    Checks WiFi or not, power save, the qdisc, DSCP/priority mapping, the MTU against
    the LS message size, whether transparent mode can run here, whether the agent may
    take a larger CPU share, and (with --config) whether the leader answers. Exit
    status 1 when a check fails."""
    from coorp.cli._runtime._agent_tools import control_socket_path, running_agent
    from coorp.runtime import Finding, diagnose, load_team_config, resolve_team_key

    if robot is not None and config is None:
        raise UsageError("--robot needs --config (the team file names the robot's key)")
    cfg = load_team_config(config) if config is not None else None
    key = None
    early: list[Finding] = []
    if cfg is not None:
        if robot is not None and robot not in cfg.team.robots:
            raise UsageError(f"--robot {robot!r} is not in team.robots of {config}")
        try:
            key = resolve_team_key(cfg, config, robot=robot)
            early.append(Finding("key", "ok", f"{'robot ' + robot if robot else 'team'} key found"))
        except CoorpError as exc:  # a missing or too open key file: reported, not raised
            early.append(Finding("key", "fail" if robot else "info", str(exc)))
        if robot is not None:
            path = control_socket_path(cfg.team.name, robot)
            pid = running_agent(path)
            early.append(
                Finding("agent", "info", f"an agent for {robot} runs here (pid {pid}, {path})")
                if pid is not None
                else Finding("agent", "ok", f"no agent for {robot} runs here yet")
            )
    iface, findings = diagnose(
        config=cfg, interface=interface, ls_bytes=ls_bytes, robot=robot, key=key
    )
    if robot is not None and any(f.check == "agent" and f.status == "info" for f in early):
        # Its own running agent holds the ports: not a fault.
        findings = [f for f in findings if f.check != "ports"]
    findings = early + findings
    failed = any(f.status == "fail" for f in findings)
    if as_json:
        print(json.dumps({"interface": iface, "findings": [f.to_json() for f in findings]}))
    else:
        from rich.table import Table

        table = Table(title=f"coorp doctor: {iface or 'no interface'}", show_lines=True)
        for col in ("check", "status", "found", "fix"):
            table.add_column(col)
        style = {"ok": "green", "warn": "yellow", "fail": "red", "info": "blue"}
        for f in findings:
            table.add_row(f.check, f"[{style[f.status]}]{f.status}[/]", f.detail, f.fix)
        _console().print(table)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("top")(top)
    app.command("doctor")(doctor)
