"""``coorp leader`` and ``coorp agent``: the runtime daemons.

``coorp leader --config team.toml`` runs the permit service for the team until
interrupted (``--status`` asks a running one for its counters instead).
``coorp agent --config team.toml --robot r2`` joins the team as ``r2``, receives LS
and bulk messages on ``agent.listen`` (saving bulk messages with ``--save-dir``), and
can send a file as one coordinated bulk message (``--send FILE --to HOST:PORT``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coorp._errors import PeerError, UsageError
from coorp.cli._options import (
    ConfigOption,
    ControlOption,
    LeaderOption,
    LogLevel,
    LogLevelOption,
    RobotOption,
    check_out_dir,
)

if TYPE_CHECKING:
    from coorp.runtime import AsyncTeam, Ruleset, TeamConfig

__all__ = ["register"]


def _setup_logging(level: LogLevel) -> None:
    numeric = logging.getLevelName(level.value.upper())
    root = logging.getLogger("coorp")
    root.setLevel(numeric)
    if root.handlers:
        return
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _print_counters(title: str, counters: dict[str, int], extra: dict[str, str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in extra.items():
        table.add_row(k, v)
    for k, n in sorted(counters.items()):
        table.add_row(k, str(n))
    Console().print(table)


def _status_target(override: str | None, listen: str, agent_leader: str | None) -> str:
    """Where to ask a running leader: ``--listen`` if given; else ``leader.listen``,
    unless it is a wildcard, then ``agent.leader`` (where the robots reach it), and
    only without that loopback on the listen port."""
    from coorp.runtime import format_address, parse_address

    address = override or listen
    host, port = parse_address(address, what="leader.listen")
    if host not in ("0.0.0.0", "::", ""):
        return address
    if agent_leader is not None and override is None:
        return agent_leader
    return format_address(("127.0.0.1" if host != "::" else "::1", port))


def health_line(c: dict[str, int]) -> str:
    """The leader's accept-loop health in one line, from its counters."""
    state = "accepting" if c.get("accept_healthy", 1) else "NOT accepting (backing off)"
    early = c.get("dropped_early", 0) + c.get("preauth_evicted", 0)
    return (
        f"{state}; {c.get('open_connections', 0)}/{c.get('max_connections', 0)} connections, "
        f"{c.get('agents', 0)} agents, {c.get('limited_connections', 0)} limited, "
        f"{early} dropped early, {c.get('quota_refused', 0)} over quota, "
        f"{c.get('throttled_frames', 0)} frames throttled, "
        f"{c.get('handshake_timeouts', 0)} handshake timeouts, "
        f"{c.get('fd_exhaustions', 0)} fd exhaustions, {c.get('dropped', 0)} frames dropped"
    )


def leader(
    config: ConfigOption,
    listen: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", help="Where to serve (default: leader.listen)."),
    ] = None,
    status: Annotated[
        bool, typer.Option("--status", help="Ask a running leader for its counters; exit.")
    ] = False,
    cell: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="In a fleet (the team file's [fleet]): lead this cell, peering with the "
            "leaders of the other cells on its channel.",
        ),
    ] = None,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run the team's permit service (the global controller)."""
    from coorp.runtime import (
        CellService,
        PermitService,
        TeamKey,
        format_address,
        leader_settings,
        load_team_config,
        parse_address,
        query_leader_stats,
        resolve_team_key,
    )

    _setup_logging(log_level)
    cfg = load_team_config(config)
    key = resolve_team_key(cfg, config)
    if not isinstance(key, TeamKey):
        raise UsageError(f"{config}: the leader needs the team key (team.key_file)")
    cell_cfg = None
    if cell is not None:
        if cfg.fleet is None:
            raise UsageError(f"--cell {cell!r}: {config} has no [fleet] section listing cells")
        names = [c.name for c in cfg.fleet.cells]
        if cell not in names:
            raise UsageError(
                f"--cell {cell!r} is not in fleet.cells of {config} ({', '.join(names)})"
            )
        cell_cfg = cfg.fleet.cell(cell)
    address = listen or (cell_cfg.listen if cell_cfg is not None else None) or cfg.leader.listen
    host, port = parse_address(address, what="--listen")
    if status:
        target = _status_target(listen, cfg.leader.listen, cfg.agent.leader)
        try:
            st = query_leader_stats(target, key)
        except (PeerError, OSError) as exc:
            print(f"coorp leader --status: leader {target} (from {config}): {exc}", file=sys.stderr)
            raise typer.Exit(1) from None
        print(f"health: {health_line(st.counters)}", flush=True)
        _print_counters(
            f"leader {target}",
            st.counters,
            {"holders": ", ".join(st.holders) or "-", "waiting": ", ".join(st.waiting) or "-"},
        )
        return
    settings = leader_settings(cfg)

    async def run() -> dict[str, int]:
        service: PermitService
        if cfg.fleet is not None and cell is not None:
            f = cfg.fleet
            peers = {
                c.name: parse_address(c.leader, what=f"fleet cell {c.name}")
                for c in f.peers_of(cell)
            }
            service = CellService(
                cfg.team.robots,
                key,
                settings,
                cell=cell,
                peers=peers,
                peer_heartbeat_ns=round(f.peer_heartbeat_ms * 1e6),
                peer_timeout_ns=round(f.peer_timeout_ms * 1e6),
            )
        else:
            service = PermitService(cfg.team.robots, key, settings)
        bound = await service.start((host, port))
        where = f" cell {cell!r}" if cell is not None else ""
        print(
            f"coorp leader: serving team {cfg.team.name!r}{where} on {format_address(bound)}",
            flush=True,
        )
        try:
            await _until_signalled()
        finally:
            await service.close()
        return service.stats()

    stats = asyncio.run(run())
    if sys.stdout.isatty():
        _print_counters("leader counters", stats, {})
    else:
        print("coorp leader: stopped; " + " ".join(f"{k}={v}" for k, v in sorted(stats.items())))


def agent(
    config: ConfigOption,
    robot: RobotOption,
    leader_addr: LeaderOption = None,
    listen: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", help="This robot's inbox (default: agent.listen)."),
    ] = None,
    save_dir: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Write received bulk messages here.")
    ] = None,
    send: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Send this file as one bulk message.")
    ] = None,
    to: Annotated[
        str | None, typer.Option(metavar="HOST:PORT", help="The inbox --send sends to.")
    ] = None,
    ls: Annotated[
        str | None,
        typer.Option(
            "--ls",
            metavar="HZ:BYTES[:HOST:PORT]",
            help="Send LS pings and report their round trips, once a second and in total "
            "(default destination: the leader host's inbox).",
        ),
    ] = None,
    duration: Annotated[float, typer.Option(metavar="SECONDS", help="How long --ls sends.")] = 10.0,
    control: ControlOption = None,
    transparent: Annotated[
        bool,
        typer.Option(
            "--transparent",
            help="Also protect programs that know nothing of Coorp, per the team file's "
            "[transparent] selectors (kernel rules; needs root).",
        ),
    ] = False,
    show_rules: Annotated[
        bool,
        typer.Option("--show-rules", help="Print the kernel rules --transparent installs; exit."),
    ] = False,
    remove_rules: Annotated[
        bool,
        typer.Option(
            "--remove-rules", help="Delete this robot's kernel rules (after a crash); exit."
        ),
    ] = False,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Join a team as one robot: receive, send, generate LS traffic.

    The agent receives LS and bulk messages and serves `coorp send`; with --send it
    sends one file (handed to the running agent if there is one), with --ls it sends
    pings and reports their round trips.

    With --transparent, unmodified programs' LS traffic is marked and observed and their
    bulk TCP connections are sent under the robot's permit (docs/ros2.md)."""
    from coorp.cli._runtime._agent_tools import (
        LsGenerator,
        PingEcho,
        control_socket_path,
        parse_ls_spec,
        running_agent,
        send_via_agent,
        serve_control,
    )
    from coorp.runtime import (
        Message,
        TransparentAgent,
        ajoin,
        apply_scheduling,
        load_team_config,
        parse_address,
        parse_scheduling,
        resolve_team_key,
        team_settings,
    )

    _setup_logging(log_level)
    cfg = load_team_config(config)
    if robot not in cfg.team.robots:
        raise UsageError(
            f"--robot {robot!r} is not in team.robots of {config} ({', '.join(cfg.team.robots)})"
        )
    if (send is None) != (to is None):
        raise UsageError("--send and --to go together")
    if show_rules or remove_rules or transparent:
        if cfg.transparent is None:
            raise UsageError(
                f"{config} has no [transparent] section: list LS and bulk selectors there "
                "first (docs/ros2.md)"
            )
        ruleset = _ruleset(cfg, robot, leader_addr, listen)
        if show_rules:
            print(ruleset.render())
            return
        if remove_rules:
            _remove_rules(ruleset)
            return
    ls_spec = parse_ls_spec(ls) if ls is not None else None
    if save_dir is not None:
        check_out_dir(save_dir, "--save-dir")
    control_path = control or control_socket_path(cfg.team.name, robot)
    if send is not None and to is not None and control_path.exists():
        # A daemon of this robot is running: hand the file over instead of joining as
        # the same robot a second time.
        _print_send_reply(send_via_agent(control_path, send, to, timeout_s=3600))
        return
    pid = running_agent(control_path) if send is None else None
    if pid is not None:
        raise UsageError(
            f"an agent for robot {robot} is already running (pid {pid}, control socket "
            f"{control_path}); stop it first: two agents under one robot's name would knock "
            "each other off the leader"
        )
    payload = None
    if send is not None:
        try:
            payload = send.read_bytes()
        except OSError as exc:
            raise UsageError(f"--send {send}: {exc.strerror}") from None
    key = resolve_team_key(cfg, config, robot=robot)
    a = cfg.agent
    settings = team_settings(cfg)
    log = logging.getLogger("coorp.runtime.agent")
    try:
        log.info("%s: CPU scheduling %s", robot, apply_scheduling(parse_scheduling(a.scheduling)))
    except PermissionError as exc:
        # The agent still works; on a busy CPU its pacing may come late (docs/runtime.md).
        (log.warning if transparent else log.info)(
            "%s: %s (agent.scheduling; `coorp doctor` shows what this host allows)", robot, exc
        )

    async def run() -> None:
        if payload is not None and to is not None:
            team = await ajoin(leader_addr or a.leader, robot, key, settings=settings)
            try:
                receipt = await team.bulk("file", to).send(payload)
            finally:
                await team.close()
            waited = receipt.permit_wait_ns / 1e9
            print(
                f"coorp agent: sent {receipt.nbytes} bytes in "
                f"{receipt.duration_ns / 1e9:.2f} s (waited {waited:.2f} s for permits)",
                flush=True,
            )
            return
        stack = contextlib.AsyncExitStack()
        streams: list[str] = []
        local: dict[str, Any] = {}

        async def send_file(path: Path, dest: str) -> dict[str, object]:
            data = await asyncio.to_thread(path.read_bytes)
            stream = local["team"].bulk(f"send-{len(streams)}", dest)
            streams.append(dest)
            try:
                receipt = await stream.send(data)
            finally:
                await stream.close()  # one file per stream: free the receiver's connection
            return {
                "ok": True,
                "nbytes": receipt.nbytes,
                "seconds": receipt.duration_ns / 1e9,
                "permit_wait_s": receipt.permit_wait_ns / 1e9,
            }

        async def prepare(team: AsyncTeam) -> None:
            """Everything local, before the leader hears of this robot: a port in use
            or missing capabilities fail here, and never knock a running agent of the
            same robot off the leader."""
            local["team"] = team
            where = listen or a.listen
            try:
                local["inbox"] = await team.listen(where)
            except OSError as exc:
                raise UsageError(
                    f"cannot receive on {where} (agent.listen): {exc.strerror or exc}; is "
                    "another program (another agent?) using that port?"
                ) from None
            if transparent:
                assert cfg.transparent is not None
                tmode = TransparentAgent(
                    team,
                    cfg.transparent,
                    team_hosts=cfg.team_hosts(besides=robot),
                    coorp_ports=_coorp_ports(cfg, leader_addr, listen),
                )
                try:
                    await tmode.start()
                except OSError as exc:
                    raise UsageError(str(exc)) from None
                # Run after tmode.close (LIFO): every relayed connection's counters are
                # in by then. Where the bulk's time went, as the leader prints its own.
                stack.callback(_print_relay_counters, tmode)
                stack.push_async_callback(tmode.close)
                local["tmode"] = tmode
            local["server"] = await serve_control(control_path, send_file)

        team = await ajoin(leader_addr or a.leader, robot, key, settings=settings, prepare=prepare)
        try:
            inbox, server = local["inbox"], local["server"]
            print(
                f"coorp agent: {robot} ({team.mode}) receiving on "
                f"{inbox.address[0]}:{inbox.address[1]}",
                flush=True,
            )
            if "tmode" in local:
                assert cfg.transparent is not None
                extra = ""
                if local["tmode"].inbound is not None:
                    extra = f", inbound 0.0.0.0:{cfg.transparent.inbound_relay_port}"
                print(
                    f"coorp agent: transparent mode on (table ip {local['tmode'].ruleset.table}; "
                    f"relay 127.0.0.1:{cfg.transparent.relay_port}{extra})",
                    flush=True,
                )
            if save_dir is not None:
                save_dir.mkdir(parents=True, exist_ok=True)
            print(f"coorp agent: control socket {control_path}", flush=True)
            echo = PingEcho(team)
            gen: LsGenerator | None = None
            gen_task: asyncio.Task[None] | None = None
            if ls_spec is not None:
                hz, nbytes, dest = ls_spec
                if dest is None:
                    if a.leader is None:
                        raise UsageError("--ls needs HOST:PORT: no agent.leader configured")
                    dest = f"{parse_address(a.leader)[0]}:{parse_address(a.listen)[1]}"
                gen = LsGenerator(team, hz, nbytes, dest, inbox.address[1])
                gen_task = asyncio.create_task(
                    gen.run(duration, lambda line: print(line, flush=True))
                )

            def handle(msg: Message) -> None:
                if echo.handle(msg) or (gen is not None and gen.handle(msg)):
                    return
                if msg.kind != "bulk":
                    return
                log.info("bulk %s/%s #%d: %d bytes", msg.robot, msg.channel, msg.seq,
                         len(msg.payload))  # fmt: skip
                if save_dir is not None:
                    name = f"{msg.robot}-{msg.channel}-{msg.seq}-{time.time_ns()}.bin"
                    (save_dir / name).write_bytes(msg.payload)

            stop = asyncio.create_task(_until_signalled())
            while not stop.done() and not (gen_task is not None and gen_task.done()):
                with contextlib.suppress(TimeoutError):
                    handle(await inbox.recv(timeout_s=0.5))
            stop.cancel()
            if gen_task is not None:
                gen_task.cancel()
                await asyncio.gather(gen_task, return_exceptions=True)
            server.close()
            with contextlib.suppress(FileNotFoundError):
                control_path.unlink()
            # Senders already hold a confirmation for what is still queued: keep it.
            await inbox.close()
            for msg in inbox.drain():
                handle(msg)
        finally:
            await stack.aclose()
            await team.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


def _print_relay_counters(tmode: Any) -> None:
    """The relays' pacing counters (time in ns) on stderr when the agent stops."""
    for relay in tmode.relays:
        line = " ".join(f"{k}={v}" for k, v in sorted(relay.pacing.items()))
        print(f"coorp agent: relay {relay.port} pacing {line}", file=sys.stderr, flush=True)


def _coorp_ports(cfg: TeamConfig, leader_addr: str | None, listen: str | None) -> tuple[int, ...]:
    """Ports of Coorp's own connections (never intercepted): the leader's, the inbox's,
    and in a fleet every cell's leader (a robot that roams keeps its rules as they are)."""
    from coorp.runtime import parse_address

    ports = [parse_address(listen or cfg.agent.listen)[1], parse_address(cfg.leader.listen)[1]]
    if leader_addr or cfg.agent.leader:
        ports.append(parse_address(leader_addr or cfg.agent.leader or "")[1])
    if cfg.fleet is not None:
        ports += [parse_address(c.leader)[1] for c in cfg.fleet.cells]
    return tuple(sorted(set(ports)))


def _ruleset(cfg: TeamConfig, robot: str, leader_addr: str | None, listen: str | None) -> Ruleset:
    from coorp.runtime import transparent_ruleset

    assert cfg.transparent is not None
    return transparent_ruleset(
        robot,
        cfg.transparent,
        team_hosts=cfg.team_hosts(besides=robot),
        coorp_ports=_coorp_ports(cfg, leader_addr, listen),
    )


def _remove_rules(ruleset: Ruleset) -> None:
    from coorp.runtime import NftTable

    async def go() -> bool:
        table = NftTable(ruleset)
        try:
            return await table.remove()
        finally:
            table.close()

    removed = asyncio.run(go())
    print(
        f"coorp agent: {'removed' if removed else 'no'} table ip {ruleset.table}"
        + ("" if removed else " (nothing to remove)")
    )


def _print_send_reply(reply: dict[str, object]) -> None:
    if not reply.get("ok"):
        raise UsageError(f"the agent could not send: {reply.get('error')}")
    print(
        f"coorp send: sent {reply['nbytes']} bytes in {float(str(reply['seconds'])):.2f} s "
        f"(waited {float(str(reply['permit_wait_s'])):.2f} s for permits)",
        flush=True,
    )


def send_cmd(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="The file to send as one bulk message.")
    ],
    to: Annotated[str, typer.Option("--to", metavar="HOST:PORT", help="The inbox to send to.")],
    config: ConfigOption,
    robot: RobotOption,
    control: ControlOption = None,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Give up after this long.")
    ] = 3600.0,
) -> None:
    """Send a file through this robot's running agent.

    The running `coorp agent` sends it as a coordinated bulk message, as itself: no
    second process joins under the robot's name."""
    from coorp.cli._runtime._agent_tools import control_socket_path, send_via_agent
    from coorp.runtime import load_team_config, parse_address

    cfg = load_team_config(config)
    if robot not in cfg.team.robots:
        raise UsageError(f"--robot {robot!r} is not in team.robots of {config}")
    parse_address(to, what="--to")
    if not file.is_file():
        raise UsageError(f"{file}: no such file")
    path = control or control_socket_path(cfg.team.name, robot)
    _print_send_reply(send_via_agent(path, file, to, timeout))


def keys(
    config: ConfigOption,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing team key.")] = False,
) -> None:
    """Write the team key and one key per robot.

    The team key goes to team.key_file (if missing), each robot's to
    team.key_dir/<robot>.key, all owner-only (mode 600). The leader keeps the team key;
    copy each robot only its own file."""
    from coorp.runtime import load_team_config, write_team_keys

    cfg = load_team_config(config)
    team_path, paths = write_team_keys(cfg, config, force=force)
    print(f"coorp keys: team key {team_path} (leader only)")
    for p in paths:
        print(f"coorp keys: {p.stem}: {p}")


def register(app: typer.Typer) -> None:
    app.command("leader")(leader)
    app.command("agent")(agent)
    app.command("keys")(keys)
    app.command("send")(send_cmd)
