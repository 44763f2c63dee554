"""What a robot tells its leader every second, for ``coorp top``.

:class:`Reporter` runs on a joined robot's event loop and sends an
:class:`~._wire.AgentReport` over the control link once per ``interval_s``: its mode,
how many LS sends it made (its API channels', and those transparent mode observed),
the bulk bytes it sent and where their time went, what its inboxes measured of every
sender's LS latency, and the connections transparent mode intercepted. Counters are
cumulative; the leader (:class:`TeamBoard`) turns two reports into rates.

``sources`` are callables the reporter asks each time (a :class:`TransparentAgent`
adds its relay and observer); a failing source never stops the reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._latency_book import LatencyBook
from ._wire import AgentReport, FlowSummary, LatencySummary, RobotRow, TeamReply

__all__ = ["ReportPart", "Reporter", "TeamBoard"]

log = logging.getLogger("coorp.runtime.agent")

#: Rows per :class:`~._wire.TeamReply` page (a control frame is at most 16 KiB).
ROWS_PER_PAGE = 32


@dataclass(slots=True)
class ReportPart:
    """What one source adds to a report (all cumulative)."""

    ls_sends: int = 0
    bulk_bytes: int = 0
    gate_pause_ns: int = 0
    permit_wait_ns: int = 0
    relayed: int = 0
    intercepted: list[FlowSummary] = field(default_factory=list)


class Reporter:
    def __init__(
        self,
        *,
        mode: Callable[[], str],
        ls_flows: Callable[[], int],
        books: list[LatencyBook],
        sources: list[Callable[[], ReportPart]],
        send: Callable[[AgentReport], Any],
        interval_s: float = 1.0,
    ) -> None:
        self._mode = mode
        self._ls_flows = ls_flows
        self.books = books
        self.sources = sources
        self._send = send
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def report(self) -> AgentReport:
        total = ReportPart()
        for source in list(self.sources):
            try:
                part = source()
            except Exception as exc:  # a report must never take the agent down
                log.debug("report source failed: %s", exc)
                continue
            total.ls_sends += part.ls_sends
            total.bulk_bytes += part.bulk_bytes
            total.gate_pause_ns += part.gate_pause_ns
            total.permit_wait_ns += part.permit_wait_ns
            total.relayed += part.relayed
            total.intercepted += part.intercepted
        latency: dict[str, LatencySummary] = {}
        for book in self.books:
            for s in book.summaries():
                old = latency.get(s.sender)
                if old is None or s.received > old.received:
                    latency[s.sender] = s
        return AgentReport(
            self._mode()[:16],
            total.ls_sends,
            self._ls_flows(),
            total.bulk_bytes,
            total.gate_pause_ns,
            total.permit_wait_ns,
            list(latency.values())[:32],
            total.intercepted[:16],
            total.relayed,
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="coorp-report")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            with contextlib.suppress(Exception):
                if await self._send(self.report()):
                    self.sent += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None


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
