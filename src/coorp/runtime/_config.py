"""The team file (``team.toml``): who is in the team, where the leader listens, timings.

One file serves the leader and every agent, so a team is configured in one place.
Units are in the field names. The secret key is *not* in the file: ``key_file``
names a file next to it (hex), or the ``COORP_TEAM_KEY`` environment variable holds
it. Loading goes through :func:`coorp.scenario.load_scenario`, which turns every
validation problem into a :class:`~coorp.ScenarioError` naming file, field and value.

Example::

    [team]
    name = "alpha"
    key_file = "alpha.key"
    robots = ["leader", "r1", "r2", "r3"]

    [leader]
    listen = "0.0.0.0:7400"
    limit = 1
    timeslice_ms = 5000

    [agent]
    leader = "192.168.1.10:7400"
    listen = "0.0.0.0:7401"
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coorp._errors import ScenarioError, ScenarioProblem
from coorp.scenario import load_scenario

from ._errors import RuntimeUsageError
from ._fleet import FleetSection
from ._fleet import check_address as _check_address
from ._priority import parse_scheduling
from ._selectors import TransparentSection, dds_binds, dds_port_range
from .wire import (
    KEY_ENV,
    Keyring,
    TeamKey,
    check_key_dir_mode,
    load_key_file,
    parse_address,
)

__all__ = [
    "AgentSection",
    "LeaderSection",
    "TeamConfig",
    "TeamFileError",
    "TeamSection",
    "load_team_config",
    "resolve_team_key",
    "write_team_keys",
]

RobotName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TeamSection(_Model):
    name: RobotName = "team"
    robots: list[RobotName] = Field(min_length=1, max_length=256)
    key_file: str | None = Field(
        None, description="file holding the team key as hex, relative to this file"
    )
    key_dir: str = Field(
        "keys", description="directory of per-robot keys (<robot>.key), relative to this file"
    )
    hosts: dict[RobotName, str] = Field(
        default_factory=dict,
        description="robot -> IPv4 address (transparent mode's 'to_team' bulk selector)",
    )
    team_key_fallback: bool = Field(
        False,
        description="a robot without its key file (key_dir/<robot>.key) uses the team key "
        "instead; off: a missing robot key is an error",
    )

    @field_validator("hosts")
    @classmethod
    def _ipv4_hosts(cls, hosts: dict[str, str]) -> dict[str, str]:
        for robot, host in hosts.items():
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ValueError(f"{robot} = {host!r}: expected an IPv4 address") from None
        return hosts

    @field_validator("robots")
    @classmethod
    def _unique(cls, robots: list[str]) -> list[str]:
        dupes = sorted({r for r in robots if robots.count(r) > 1})
        if dupes:
            raise ValueError(f"robot names must be unique; repeated: {', '.join(dupes)}")
        return robots


class LeaderSection(_Model):
    listen: str = "0.0.0.0:7400"
    limit: int = Field(1, ge=1, le=1024, description="robots sending BH at once")
    timeslice_ms: float = Field(5000.0, gt=0, le=3_600_000)
    heartbeat_ms: float = Field(200.0, ge=10, le=10_000)
    connections_per_member: int = Field(
        8, ge=1, le=4096, description="authenticated connections one robot may hold"
    )
    frames_per_s_per_member: float = Field(
        200.0, ge=1, le=1_000_000, description="frames one robot may have handled per second"
    )
    preauth_budget: int = Field(
        256, ge=2, le=65_536, description="handshakes under way from unknown hosts, in all"
    )
    member_reserve: int = Field(
        64, ge=0, le=65_536, description="connections kept for hosts members joined from"
    )
    max_weight: int = Field(
        8,
        ge=1,
        le=64,
        description="timeslices per grant at most for a robot sending for several flows",
    )
    downlink: list[str] = Field(
        default_factory=list,
        description="robots whose bulk leaves through a queue of its own (a wired leader's "
        "downlink): a second permit, held among them alongside the team's",
    )

    _listen = field_validator("listen")(_check_address)

    @property
    def timeslice_ns(self) -> int:
        return round(self.timeslice_ms * 1e6)

    @property
    def heartbeat_ns(self) -> int:
        return round(self.heartbeat_ms * 1e6)


class AgentSection(_Model):
    leader: str | None = Field(None, description="host:port of the leader; none = no permits")
    listen: str = "0.0.0.0:7401"
    fallback_ms: float = Field(900.0, ge=50, le=60_000)
    local_preemption: bool = True
    protection_margin_ms: float = Field(2.0, ge=0, le=1000)
    protection_tolerance_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="how long this robot's LS may wait behind its own bulk bytes "
        "(0 = none: the paper's gate)",
    )
    chunk_bytes: int = Field(16 * 1024, ge=1024, le=16 * 1024 * 1024)
    release_linger_ms: float = Field(
        20.0,
        ge=0,
        le=10_000,
        description="a robot keeps its permit this long after its last bulk message, for "
        "the next one (0 = release at once)",
    )
    inflight_budget_ms: float = Field(
        6.0,
        ge=0,
        le=1000,
        description="while LS is protected, bulk bytes in flight stay within this drain "
        "time (docs/runtime.md, 'Bytes in flight'); 0 = no bound",
    )
    gate_completion: Literal["departure", "ack"] = Field(
        "departure",
        description="what the gate's completion times measure: until a bulk chunk left "
        "this host (its TCP ack less the path's measured return latency; default) or "
        "until its ack (docs/runtime.md, 'Local preemption in user space')",
    )
    bulk_one_message_at_a_time: bool = Field(
        True,
        description="a robot's bulk streams send one message at a time, in the order "
        "asked, so one receiver at a time sends TCP acks (false = all at once)",
    )
    inbox_connections_per_member: int = Field(
        64, ge=1, le=4096, description="authenticated connections one robot may hold at an inbox"
    )
    inbox_ls_sessions_per_member: int = Field(
        64, ge=1, le=4096, description="LS sessions one robot may hold at an inbox"
    )
    inbox_frames_per_s_per_member: float = Field(
        200.0, ge=1, le=1_000_000, description="non-payload frames per second per robot"
    )
    inbox_preauth_budget: int = Field(
        64, ge=2, le=65_536, description="handshakes under way from unknown hosts, in all"
    )
    inbox_ack_category: Literal["AC_VI", "AC_BE"] = Field(
        "AC_VI",
        description="the access category of the TCP acks an inbox sends for the team's "
        "bulk data: AC_VI (DSCP CS4, SO_PRIORITY 260), as the simulator's coorp sends "
        "them, or AC_BE like the data (docs/runtime.md, 'Marking')",
    )
    ls_category: Literal["AC_VO", "AC_VI"] = Field(
        "AC_VO",
        description="the access category of the LS channels this robot opens: AC_VO "
        "(DSCP CS6, SO_PRIORITY 262; the paper's) or AC_VI (CS5, 261), which drivers "
        "aggregate: an LS message of several frames then takes one channel access "
        "(docs/runtime.md, 'Marking')",
    )
    scheduling: str = Field(
        "nice:-10",
        description="the agent's CPU share: none, nice:N (-20..19), rr:P or fifo:P (1..99) "
        "(docs/runtime.md, 'Busy CPUs')",
    )

    _addresses = field_validator("leader", "listen")(_check_address)

    @field_validator("scheduling")
    @classmethod
    def _scheduling(cls, v: str) -> str:
        parse_scheduling(v)
        return v


class TeamConfig(_Model):
    team: TeamSection
    leader: LeaderSection = LeaderSection()
    agent: AgentSection = AgentSection()
    transparent: TransparentSection | None = None
    """Protect programs that know nothing of Coorp (``coorp agent --transparent``)."""
    fleet: FleetSection | None = None
    """Several cells, a leader each (docs/runtime.md, "A fleet")."""

    @model_validator(mode="after")
    def _limit_fits(self) -> TeamConfig:
        if self.leader.limit > len(self.team.robots):
            raise ValueError(
                f"leader.limit={self.leader.limit} exceeds the {len(self.team.robots)} "
                "robots in team.robots"
            )
        unknown = sorted(set(self.team.hosts) - set(self.team.robots))
        if unknown:
            raise ValueError(f"team.hosts names robots not in team.robots: {', '.join(unknown)}")
        unknown = sorted(set(self.leader.downlink) - set(self.team.robots))
        if unknown:
            raise ValueError(
                f"leader.downlink names robots not in team.robots: {', '.join(unknown)}"
            )
        if self.fleet is not None:
            robots = set(self.team.robots)
            clash = sorted(c.name for c in self.fleet.cells if c.name in robots)
            if clash:
                raise ValueError(
                    f"fleet.cells: {', '.join(clash)} also named in team.robots: a cell's "
                    "leader authenticates under its cell's name, which no robot may share"
                )
            if self.leader.limit > 64:
                raise ValueError(
                    f"leader.limit={self.leader.limit}: a fleet's channels allow at most 64 "
                    "BH senders at once (a new coordinator learns a cell's holders in one frame)"
                )
            if self.leader.downlink:
                raise ValueError(
                    "leader.downlink: a fleet's cells share one permit per channel; a "
                    "downlink queue of its own is for a single team (remove leader.downlink "
                    "or the [fleet] section)"
                )
        t = self.transparent
        if t is not None:
            self._ports_clear_of_dds(t)
        for flag in ("to_team", "from_team"):
            if t is not None and any(getattr(b, flag) for b in t.bulk) and not self.team.hosts:
                raise ValueError(
                    f"transparent.bulk selects {flag}, but team.hosts is empty: list each "
                    "robot's address under [team.hosts]"
                )
        return self

    def _ports_clear_of_dds(self, t: TransparentSection) -> None:
        """Coorp's own ports must not be ports a DDS participant of a domain the team
        file selects may bind (domain 0: 7400, 7401, 7410-7649; Coorp's default leader
        and inbox ports are 7400 and 7401)."""
        ports = {
            "agent.listen": parse_address(self.agent.listen)[1],
            "leader.listen": parse_address(self.leader.listen)[1],
            "transparent.relay_port": t.relay_port,
        }
        if any(b.server_side for b in t.bulk):
            ports["transparent.inbound_relay_port"] = t.inbound_relay_port
        for i, sel in enumerate(t.ls):
            if sel.preset != "dds":
                continue
            domain = sel.domain_id or 0
            lo, hi = dds_port_range(domain)
            for what, port in ports.items():
                if dds_binds(domain, port):
                    raise ValueError(
                        f"{what} = {port} is an RTPS port of DDS domain {domain} "
                        f"(transparent.ls[{i}]; the domain's ports are {lo}-{hi}): DDS "
                        "binds it; give Coorp ports outside that range (e.g. 7300, 7301)"
                    )

    def team_hosts(self, *, besides: str | None = None) -> list[str]:
        """The team's addresses (``team.hosts``), without robot ``besides``."""
        return [h for r, h in self.team.hosts.items() if r != besides]


class TeamFileError(ScenarioError):
    """A team file is invalid: like :class:`~coorp.ScenarioError`, called what it is."""

    def __init__(self, source: str, problems: list[ScenarioProblem] | tuple[ScenarioProblem, ...]):
        super().__init__(source, problems)
        lines = [f"invalid team file {source}:"]
        lines += [f"  - {p.render()}" for p in self.problems]
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])


def load_team_config(path: str | Path) -> TeamConfig:
    """Read and validate a team file (raises :class:`TeamFileError`, a
    :class:`~coorp.ScenarioError`, naming the file, field and value)."""
    try:
        return load_scenario(path, model=TeamConfig)
    except ScenarioError as exc:
        raise TeamFileError(exc.source, exc.problems) from None


def robot_key_path(config: TeamConfig, source: str | Path | None, robot: str) -> Path:
    base = Path(source).parent if source is not None else Path.cwd()
    return base / config.team.key_dir / f"{robot}.key"


def team_key_path(config: TeamConfig, source: str | Path | None) -> Path | None:
    if config.team.key_file is None:
        return None
    base = Path(source).parent if source is not None else Path.cwd()
    return base / config.team.key_file


def resolve_team_key(
    config: TeamConfig, source: str | Path | None = None, *, robot: str | None = None
) -> Keyring:
    """The keys to use: for ``robot``, its own key file (``team.key_dir/<robot>.key``),
    in an owner-only directory (mode 700); without one, only if
    ``team.team_key_fallback`` is set, the team key. The team key (for the leader, or
    that fallback) is the file named by ``team.key_file`` (relative to the team file),
    else the ``COORP_TEAM_KEY`` environment variable (hex). Key files must be
    owner-only (mode 600)."""
    where = str(source) if source is not None else "<team config>"
    if robot is not None:
        path = robot_key_path(config, source, robot)
        try:
            if path.parent.exists():
                check_key_dir_mode(path.parent)
            if path.exists():
                keys = load_key_file(path)
                if keys.identity != robot:
                    raise RuntimeUsageError(
                        f"{path} holds the key of robot {keys.identity!r}, not {robot!r}"
                    )
                return keys
        except RuntimeUsageError as exc:
            raise TeamFileError(
                where, [ScenarioProblem("team.key_dir", config.team.key_dir, str(exc))]
            ) from None
        if not config.team.team_key_fallback:
            raise TeamFileError(
                where,
                [
                    ScenarioProblem(
                        "team.key_dir",
                        config.team.key_dir,
                        f"robot {robot!r} has no key file: {path} is missing (`coorp keys "
                        "--config FILE` writes one per robot; copy the robot its own); to "
                        "use the team key instead, set team.team_key_fallback = true",
                    )
                ],
            )
    team_path = team_key_path(config, source)
    if team_path is not None:
        try:
            return TeamKey.from_file(team_path)
        except RuntimeUsageError as exc:
            raise TeamFileError(
                where, [ScenarioProblem("team.key_file", config.team.key_file, str(exc))]
            ) from None
    text = os.environ.get(KEY_ENV)
    if text:
        try:
            return TeamKey.from_hex(text)
        except RuntimeUsageError as exc:
            raise RuntimeUsageError(f"{KEY_ENV}: {exc}") from None
    raise TeamFileError(
        where,
        [
            ScenarioProblem(
                "team.key_file",
                ScenarioProblem.NO_VALUE,
                f"no team key: set team.key_file or the {KEY_ENV} environment variable "
                "(coorp keys --config FILE writes the keys)",
            )
        ],
    )


def write_team_keys(
    config: TeamConfig, source: str | Path, *, force: bool = False
) -> tuple[Path, list[Path]]:
    """``coorp keys``: the team key (if missing) and one key file per robot, owner-only."""
    team_path = team_key_path(config, source)
    if team_path is None:
        raise TeamFileError(
            str(source),
            [ScenarioProblem("team.key_file", ScenarioProblem.NO_VALUE, "name the team key file")],
        )
    robots = list(config.team.robots)
    key_dir = robot_key_path(config, source, robots[0]).parent
    key_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:  # an existing directory others can read: refuse before writing a key into it
        check_key_dir_mode(key_dir)
    except RuntimeUsageError as exc:
        raise TeamFileError(
            str(source), [ScenarioProblem("team.key_dir", config.team.key_dir, str(exc))]
        ) from None
    if team_path.exists() and not force:
        team = TeamKey.from_file(team_path)
    else:
        team = TeamKey(os.urandom(32))
        _write_private(team_path, team.hex() + "\n")
    paths = []
    for robot in robots:
        path = robot_key_path(config, source, robot)
        _write_private(path, team.robot_key(robot, robots).to_text())
        paths.append(path)
    return team_path, paths


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` created with mode 600 (never readable by others, not
    even for a moment)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
