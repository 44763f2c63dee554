"""The leader's board of its robots' reports: the rows ``coorp top`` shows.

Each robot's :class:`~coorp.runtime.robot.Reporter` sends a cumulative
:class:`~._wire.AgentReport` every second; :class:`TeamBoard` keeps the last two per
robot and turns them into rates, paged into :class:`~._wire.TeamReply` frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire import (
    AgentReport,
    LatencySummary,
    RobotRow,
    TeamReply,
)

__all__ = ["ROWS_PER_PAGE", "TeamBoard"]

#: Rows per :class:`~._wire.TeamReply` page (a control frame is at most 16 KiB).
ROWS_PER_PAGE = 32
#: A report older than this describes nothing current (robots report every second).
STALE_NS = 3_000_000_000


@dataclass(slots=True)
class _Seen:
    at_ns: int
    report: AgentReport
    previous: tuple[int, AgentReport] | None = None


class TeamBoard:
    """The leader's view of its robots' reports: rows for ``coorp top``."""

    def __init__(self, robots: list[str]) -> None:
        self.robots = list(robots)
        self._seen: dict[str, _Seen] = {}

    def record(self, robot: str, now_ns: int, report: AgentReport) -> None:
        old = self._seen.get(robot)
        self._seen[robot] = _Seen(now_ns, report, None if old is None else (old.at_ns, old.report))

    def forget(self, robot: str) -> None:
        self._seen.pop(robot, None)

    def rows(self, now_ns: int, connected: set[str]) -> list[RobotRow]:
        # Each sender's LS latency as the inboxes that received it measured.
        by_sender: dict[str, list[LatencySummary]] = {}
        for seen in self._seen.values():
            for s in seen.report.latency:
                by_sender.setdefault(s.sender, []).append(s)
        return [self._row(r, now_ns, r in connected, by_sender.get(r, [])) for r in self.robots]

    def _row(self, robot: str, now_ns: int, connected: bool, lat: list[LatencySummary]) -> RobotRow:
        seen = self._seen.get(robot)
        received = sum(s.received for s in lat)
        late = sum(s.late for s in lat)
        # Percentiles of different inboxes do not merge exactly: the busiest one's p50,
        # the worst p99.
        p50 = max(lat, key=lambda s: s.received).p50_us / 1e3 if lat else None
        p99 = max(s.p99_us for s in lat) / 1e3 if lat else None
        if seen is None:
            return RobotRow(robot, connected, 0, "-", 0.0, 0, p50, p99, received, late, 0.0, 0.0,
                            0, [])  # fmt: skip
        r = seen.report
        ls_rate = mbps = paused = 0.0
        if not connected or now_ns - seen.at_ns > STALE_NS:
            # Gone, or silent for a while: its last rates and connections are history,
            # not what it does now.
            mode = r.mode if connected else "gone"
            return RobotRow(robot, connected, (now_ns - seen.at_ns) // 1_000_000, mode, 0.0,
                            0, p50, p99, received, late, 0.0, 0.0, r.relayed, [])  # fmt: skip
        if seen.previous is not None:
            t0, r0 = seen.previous
            dt = (seen.at_ns - t0) / 1e9
            if dt > 0:
                ls_rate = (r.ls_sends - r0.ls_sends) / dt
                mbps = (r.bulk_bytes - r0.bulk_bytes) * 8 / dt / 1e6
                paused = min(max((r.gate_pause_ns - r0.gate_pause_ns) / 1e9 / dt, 0.0), 1.0)
        return RobotRow(
            robot, connected, (now_ns - seen.at_ns) // 1_000_000, r.mode, ls_rate, r.ls_flows,
            p50, p99, received, late, mbps, paused, r.relayed, list(r.intercepted),
        )  # fmt: skip

    def page(
        self, offset: int, now_ns: int, connected: set[str], holders: list[str], waiting: list[str]
    ) -> TeamReply:
        rows = self.rows(now_ns, connected)
        return TeamReply(holders, waiting, rows[offset : offset + ROWS_PER_PAGE], len(rows))
