"""The leader: the permit service, its board of robots, and how to ask it.

Owns :class:`PermitService` (``coorp leader``: :class:`~coorp.control.GlobalController`
on sockets, with its accept loop and quotas from :mod:`coorp.runtime.wire`), a fleet
cell's leader peering with the other cells of its channel (:class:`CellService`:
:class:`~coorp.control.CellLeader` on sockets), the board of what robots report
(:class:`TeamBoard`, for ``coorp top``) and the observer client that asks a leader
for its counters or its team (:func:`query_leader_stats`, :func:`aquery_team`).

Built on the wire and the team file; it imports no robot code.
"""

from ._cell import CellService
from ._observer import TeamStatus, aquery_team, query_leader_stats
from ._service import LeaderSettings, PermitService, leader_settings

__all__ = [
    "CellService",
    "LeaderSettings",
    "PermitService",
    "TeamStatus",
    "aquery_team",
    "leader_settings",
    "query_leader_stats",
]
