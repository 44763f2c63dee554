"""Joining a real team from its team file, as one robot of a learning run.

Used by a role started with ``--team`` (:mod:`coorp.learn._robots`, ``coorp learn
--team``): the robot's own key, the team file's ``[agent]`` settings and, with
``--modes coorp``, the team's permit service.
"""

from __future__ import annotations

from pathlib import Path

from coorp._errors import UsageError
from coorp.runtime import Keyring, Team

__all__ = ["join_team"]


def join_team(
    path: str | Path, robot: str, *, coordinated: bool
) -> tuple[Team, Keyring, str | None]:
    """Join as ``robot`` with its keys and the team file's settings: (team, keys, the
    permit service's address or None)."""
    from coorp.runtime import join, load_team_config, resolve_team_key, team_settings

    config = load_team_config(path)
    if robot not in config.team.robots:
        raise UsageError(
            f"--robot {robot!r} is not in team.robots of {path} ({', '.join(config.team.robots)})"
        )
    keys = resolve_team_key(config, path, robot=robot)
    permits = config.agent.leader if coordinated else None
    if coordinated and permits is None:
        raise UsageError(
            f"--modes coorp needs the permit service: set agent.leader in {path} (where "
            "`coorp leader` listens), or use --modes tcp"
        )
    return join(permits, robot, keys, settings=team_settings(config)), keys, permits
