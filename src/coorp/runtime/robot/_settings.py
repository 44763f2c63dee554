"""A robot's runtime tuning (:class:`TeamSettings`), and how the team file sets it.

The defaults suit a WiFi team; :func:`team_settings` reads the ``[agent]`` section of a
team file into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._config import TeamConfig
from ..inbox import ReceiverLimits
from ..wire import LsCategory, parse_address
from ._pacing import BulkSettings
from ._roam import Roaming, RoamingCell, bssid_reader, route_changes

__all__ = ["TeamSettings", "team_settings"]


@dataclass(frozen=True, slots=True)
class TeamSettings:
    """Tuning of a robot's runtime; the defaults suit a WiFi team."""

    local_preemption: bool = True
    """Pause BH ahead of this robot's predicted LS sends (the gate)."""
    protection_margin_ns: int = 2_000_000
    fallback_ns: int = 900_000_000
    """Leader silent this long: BH goes uncoordinated (must stay under 1 s)."""
    release_linger_ns: int = 20_000_000
    """A robot whose last bulk message finished keeps its permit this long, so that
    back-to-back messages go out under one permit instead of handing it over (and
    asking for it again) between every two of them. 0: release at once (the paper)."""
    report_interval_s: float = 1.0
    """How often a joined robot reports to its leader (``coorp top``); 0: never."""
    join_timeout_s: float = 2.0
    """How long :func:`join` waits for the leader before going on uncoordinated."""
    ls_keepalive_s: float = 1.0
    """Keep-alive period of an LS channel's session with its receiver (also how often
    the receiver re-measures the clock offset for its freshness check)."""
    ls_session_wait_s: float = 1.0
    """How long the threaded ``Team.latency_sensitive`` waits for the receiver to open
    the channel's session (sends before that are parked, keep-last)."""
    kernel_lease_mark: int | None = None
    """Enforce permits in the kernel too (:meth:`AsyncTeam.enable_kernel_lease`): the
    fwmark of this robot's bulk sockets; None: the lease is kept in user space only
    (a process frozen between its check and its write may still send once)."""
    ls_category: LsCategory = "AC_VO"
    """The access category of this robot's LS channels: AC_VO (DSCP CS6, the paper's)
    or AC_VI (CS5), which drivers aggregate (``[agent] ls_category``)."""
    bulk: BulkSettings = field(default_factory=BulkSettings)
    receiver: ReceiverLimits = field(default_factory=ReceiverLimits)
    roaming: Roaming | None = None
    """A fleet's cells: with no fixed leader, the robot joins the leader of the cell it
    is in and follows it from cell to cell (:mod:`._roam`)."""


def team_settings(config: TeamConfig) -> TeamSettings:
    """An agent's :class:`TeamSettings` from the team file's ``[agent]`` section."""
    a = config.agent
    budget = a.inflight_budget_ms
    return TeamSettings(
        local_preemption=a.local_preemption,
        protection_margin_ns=round(a.protection_margin_ms * 1e6),
        fallback_ns=round(a.fallback_ms * 1e6),
        release_linger_ns=round(a.release_linger_ms * 1e6),
        ls_category=a.ls_category,
        bulk=BulkSettings(
            chunk_bytes=a.chunk_bytes,
            protection_tolerance_ns=round(a.protection_tolerance_ms * 1e6),
            inflight_budget_ns=round(budget * 1e6) if budget > 0 else None,
            gate_departure=a.gate_completion == "departure",
            one_message_at_a_time=a.bulk_one_message_at_a_time,
        ),
        roaming=_roaming(config),
        receiver=ReceiverLimits(
            connections_per_member=a.inbox_connections_per_member,
            ls_sessions_per_member=a.inbox_ls_sessions_per_member,
            frames_per_s_per_member=a.inbox_frames_per_s_per_member,
            preauth_budget=a.inbox_preauth_budget,
            acks_in_video=a.inbox_ack_category == "AC_VI",
        ),
    )


def _roaming(config: TeamConfig) -> Roaming | None:
    fleet = config.fleet
    if fleet is None:
        return None
    cells = tuple(
        RoamingCell(
            c.name,
            c.gateway,
            parse_address(c.leader, what=f"fleet cell {c.name}"),
            tuple(c.bssids),
        )
        for c in fleet.cells
    )
    every_s = fleet.locate_every_ms / 1e3
    if fleet.locate == "bssid":
        assert fleet.bssid_file is not None  # validated with the team file
        return Roaming(cells, every_s, locate=bssid_reader(fleet.bssid_file), by="bssid")
    return Roaming(cells, every_s, watch=route_changes)
