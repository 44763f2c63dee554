"""What a robot tells its leader every second, for ``coorp top``.

:class:`Reporter` runs on a joined robot's event loop and sends an
:class:`~._wire.AgentReport` over the control link once per ``interval_s``: its mode,
how many LS sends it made (its API channels', and those transparent mode observed),
the bulk bytes it sent and where their time went, what its inboxes measured of every
sender's LS latency, and the connections transparent mode intercepted. Counters are
cumulative; the leader (:class:`~coorp.runtime.leader.TeamBoard`) turns two reports into
rates.

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

from ..inbox import LatencyBook
from ..wire import AgentReport, FlowSummary, LatencySummary

__all__ = ["ReportPart", "Reporter"]

log = logging.getLogger("coorp.runtime.agent")


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
