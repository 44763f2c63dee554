"""The robot's agent: membership, the leader link, permits, pacing, LS channels.

Owns a robot's :class:`AsyncTeam`/:class:`Team` (join, inboxes, channels, streams), its
link to the leader (:mod:`._link`: heartbeat, reconnect, fallback), the robot side of
global preemption (:class:`Coordinator`), local preemption in user space
(:class:`SharedPlanner` over :mod:`coorp.control`), the bulk engine (:class:`Pacer`)
and the streams built on it, LS channels, the report sent to the leader every second,
and the robot's tuning (:class:`TeamSettings`).

Built on the wire, the team file and the inbox wing; transparent mode sits above it.
"""

from ._bulk import AsyncBulkStream, BulkReceipt
from ._coordination import Coordinator
from ._latency import ChannelStats, LatencySensitiveChannel
from ._pacing import BulkSettings, Pacer, Progress, new_counters
from ._preempt import SharedPlanner
from ._report import ReportPart
from ._roam import (
    CellFollower,
    Roaming,
    RoamingCell,
    bssid_reader,
    default_gateway,
    route_changes,
)
from ._settings import TeamSettings, team_settings
from ._team import AsyncTeam, ajoin
from ._threaded import (
    BulkStream,
    Team,
    join,
    join_config,
)

__all__ = [
    "AsyncBulkStream",
    "AsyncTeam",
    "BulkReceipt",
    "BulkSettings",
    "BulkStream",
    "CellFollower",
    "ChannelStats",
    "Coordinator",
    "LatencySensitiveChannel",
    "Pacer",
    "Progress",
    "ReportPart",
    "Roaming",
    "RoamingCell",
    "SharedPlanner",
    "Team",
    "TeamSettings",
    "ajoin",
    "bssid_reader",
    "default_gateway",
    "join",
    "join_config",
    "new_counters",
    "route_changes",
    "team_settings",
]
