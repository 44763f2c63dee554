"""Transparent mode: protect a robot's programs that know nothing of Coorp.

:class:`TransparentAgent` puts together, for one robot of a joined
:class:`~._team.AsyncTeam`:

* the kernel rules of the team file's ``[transparent]`` selectors (:mod:`._nft`): LS
  packets marked for AC_VO, bulk TCP connections redirected to the relay;
* the LS observer (:mod:`._observe`): every LS send, with its kernel timestamp, goes
  to the robot's :class:`~coorp.control.ProtectionPlanner` — the same one the API's LS
  channels feed;
* the relay (:mod:`._relay`): intercepted bulk connections sent under the robot's
  permit, local preemption and in-flight budget, with the same
  :class:`~._pacing.Pacer` as the API's bulk streams; and, with server-side bulk
  selectors, the inbound relay: the replies this robot sends on connections it
  accepted, under the same permit.

Order matters: the relay listens before a connection can be redirected to it, and on
:meth:`close` the rules go first (new connections go direct again), then the relay
gives open connections ``drain_s`` to finish before resetting them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .._selectors import TransparentSection
from ..robot import ReportPart
from ..wire import FlowSummary
from ._nft import NftTable, Ruleset, build_ruleset
from ._observe import PacketObserver, SendGrouper
from ._relay import Relay, RelayFlow

if TYPE_CHECKING:
    from ..robot import AsyncTeam

__all__ = ["TransparentAgent", "transparent_ruleset"]

log = logging.getLogger("coorp.runtime.transparent")


def transparent_ruleset(
    robot: str,
    section: TransparentSection,
    *,
    team_hosts: list[str],
    coorp_ports: tuple[int, ...],
) -> Ruleset:
    """The kernel rules of ``section`` for ``robot``."""
    return build_ruleset(
        robot,
        section.ls_matches(),
        section.bulk_matches(team_hosts),
        relay_port=section.relay_port,
        relay_mark=section.relay_mark,
        coorp_ports=(*coorp_ports, section.relay_port),
        serve=section.serve_matches(team_hosts),
        inbound_port=section.inbound_relay_port,
    )


class TransparentAgent:
    """Rules, observer and relay of one robot (start with :meth:`start`)."""

    def __init__(
        self,
        team: AsyncTeam,
        section: TransparentSection,
        *,
        team_hosts: list[str],
        coorp_ports: tuple[int, ...],
        drain_s: float = 2.0,
    ) -> None:
        self.team = team
        self.section = section
        self.ruleset = transparent_ruleset(
            team.robot, section, team_hosts=team_hosts, coorp_ports=coorp_ports
        )
        self.table = NftTable(self.ruleset)
        self.drain_s = drain_s
        planner = team.planner if team.settings.local_preemption else None
        self.observer = PacketObserver(
            team.planner.observe_at,
            SendGrouper(burst_gap_ns=section.burst_gap_ns, min_bytes=section.min_message_bytes),
        )
        self.relay: Relay | None = None
        self.inbound: Relay | None = None
        common: dict[str, Any] = {
            "mark": section.relay_mark,
            "coordinator": team.coordinator,
            "planner": planner,
            "settings": team.settings.bulk,
            "idle_release_ns": section.idle_release_ns,
        }
        if self.ruleset.bh_redirect:
            self.relay = Relay(port=section.relay_port, **common)
        if self.ruleset.bh_inbound:
            # Redirected in prerouting, to an address of the interface the connection
            # came in on: listen on all of them (a connection made to this port
            # directly, not redirected, is closed).
            self.inbound = Relay(
                port=section.inbound_relay_port, host="0.0.0.0", inbound=True, **common
            )
        self._started = False

    @property
    def relays(self) -> list[Relay]:
        return [r for r in (self.relay, self.inbound) if r is not None]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.section.ls:
                self.observer.start(loop)
            for relay in self.relays:
                await relay.start()
            await self.table.install()
        except BaseException:
            await self.close()
            raise
        self._started = True
        self.team.report_sources.append(self._report_part)
        if self.table.stale_removed:
            log.warning(
                "%s: removed kernel rules left by an earlier agent (table %s)",
                self.team.robot,
                self.ruleset.table,
            )
        log.info(
            "%s: transparent mode: %d LS rule(s), %d bulk rule(s), %d server-side bulk "
            "rule(s) in table ip %s%s",
            self.team.robot,
            len(self.ruleset.ls_mark),
            sum(1 for r in self.ruleset.bh_redirect if r.action == "redirect"),
            sum(1 for r in self.ruleset.bh_inbound if r.action == "redirect_in"),
            self.ruleset.table,
            "" if self.table.owned else " (kernel < 5.12: removed at exit or next start)",
        )

    def _report_part(self) -> ReportPart:
        """Transparent mode's share of the robot's report (``coorp top``)."""
        part = ReportPart(ls_sends=self.observer.counters["sends"])
        flows: list[tuple[str, RelayFlow]] = []
        for relay in self.relays:
            part.bulk_bytes += relay.counters["bytes_up"]
            part.relayed += relay.counters["accepted"]
            part.gate_pause_ns += relay.pacing["gate_pause_ns"]
            part.permit_wait_ns += relay.pacing["permit_wait_ns"]
            # An accepted connection is shown by its peer, marked with "<".
            flows += [(f"<{f.app}" if relay.inbound else f.dest, f) for f in relay.flows.values()]
        flows.sort(key=lambda p: (not p[1].active, -p[1].bytes_up))
        for _, f in flows:
            part.gate_pause_ns += f.counters["gate_pause_ns"]
            part.permit_wait_ns += f.counters["permit_wait_ns"]
        part.intercepted = [FlowSummary(name, f.bytes_up, f.active) for name, f in flows[:16]]
        return part

    async def close(self) -> None:
        if self._report_part in self.team.report_sources:
            self.team.report_sources.remove(self._report_part)
        loop = asyncio.get_running_loop()
        try:
            await self.table.remove()
        finally:
            self.table.close()
            self.observer.stop(loop)
            if self.relays:
                await self._drain_relays()
                for relay in self.relays:
                    await relay.close()

    async def _drain_relays(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s

        def still_open() -> int:
            return sum(len(r.flows) for r in self.relays)

        while still_open() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if still_open():
            log.warning(
                "%s: resetting %d relayed connection(s) still open at exit",
                self.team.robot,
                still_open(),
            )

    async def stats(self) -> dict[str, Any]:
        """Rule counters, LS observation and relayed connections."""
        out: dict[str, Any] = {
            "table": self.ruleset.table,
            "owned": self.table.owned,
            "observer": dict(self.observer.counters),
            "ls_flows": self.observer.grouper.flows,
        }
        try:
            out["rules"] = {k: list(v) for k, v in (await self.table.counters()).items()}
        except Exception as exc:  # stats must never take the agent down
            out["rules_error"] = str(exc)
        if self.relay is not None:
            out["relay"] = self.relay.stats()
        if self.inbound is not None:
            out["inbound"] = self.inbound.stats()
        return out
