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

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coorp._errors import ScenarioError, ScenarioProblem
from coorp.scenario import load_scenario

from ._auth import KEY_ENV, TeamKey
from ._errors import RuntimeUsageError
from ._sockets import parse_address

__all__ = ["AgentSection", "LeaderSection", "TeamConfig", "TeamSection", "load_team_config"]

RobotName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_address(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_address(value)
        except RuntimeUsageError as exc:
            raise ValueError(str(exc)) from None
    return value


class TeamSection(_Model):
    name: RobotName = "team"
    robots: list[RobotName] = Field(min_length=1, max_length=256)
    key_file: str | None = Field(
        None, description="file holding the team key as hex, relative to this file"
    )

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
    chunk_bytes: int = Field(16 * 1024, ge=1024, le=16 * 1024 * 1024)

    _addresses = field_validator("leader", "listen")(_check_address)


class TeamConfig(_Model):
    team: TeamSection
    leader: LeaderSection = LeaderSection()
    agent: AgentSection = AgentSection()

    @model_validator(mode="after")
    def _limit_fits(self) -> TeamConfig:
        if self.leader.limit > len(self.team.robots):
            raise ValueError(
                f"leader.limit={self.leader.limit} exceeds the {len(self.team.robots)} "
                "robots in team.robots"
            )
        return self


def load_team_config(path: str | Path) -> TeamConfig:
    """Read and validate a team file (raises :class:`~coorp.ScenarioError`)."""
    return load_scenario(path, model=TeamConfig)


def resolve_team_key(config: TeamConfig, source: str | Path | None = None) -> TeamKey:
    """The key named by ``team.key_file`` (relative to the team file), else the
    ``COORP_TEAM_KEY`` environment variable (hex)."""
    where = str(source) if source is not None else "<team config>"
    if config.team.key_file is not None:
        base = Path(source).parent if source is not None else Path.cwd()
        try:
            return TeamKey.from_file(base / config.team.key_file)
        except RuntimeUsageError as exc:
            raise ScenarioError(
                where, [ScenarioProblem("team.key_file", config.team.key_file, str(exc))]
            ) from None
    text = os.environ.get(KEY_ENV)
    if text:
        try:
            return TeamKey.from_hex(text)
        except RuntimeUsageError as exc:
            raise RuntimeUsageError(f"{KEY_ENV}: {exc}") from None
    raise ScenarioError(
        where,
        [
            ScenarioProblem(
                "team.key_file",
                ScenarioProblem.NO_VALUE,
                f"no team key: set team.key_file or the {KEY_ENV} environment variable",
            )
        ],
    )
