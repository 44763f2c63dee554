"""Transparent mode: protect a robot's programs that know nothing of Coorp.

:class:`TransparentAgent` puts together, for one robot of a joined
:class:`~._team.AsyncTeam`:

* the kernel rules of the team file's ``[transparent]`` selectors (:mod:`._nft`): LS
  packets marked for AC_VO, bulk TCP connections redirected to the relay;
* the LS observer (:mod:`._observe`): every LS send, with its kernel timestamp, goes
  to the robot's :class:`~coorp.control.ProtectionPlanner` — the same one the API's LS
  channels feed;
* the gatekeeper (:mod:`._admission`): each bulk connection's SYN held until the
  relay has connected to the destination as the program (:mod:`._identity`), within
  the relay's budgets (:mod:`._budget`);
* the relay (:mod:`._relay`): intercepted bulk connections sent under the robot's
  permit, local preemption and in-flight budget, with the same
  :class:`~._pacing.Pacer` as the API's bulk streams; and, with server-side bulk
  selectors, the inbound relay (admitted by :class:`~._admission.LocalServer`): the
  replies this robot sends on connections it accepted, under the same permit. Both
  relays share one flow cap and one buffer pool.

Order matters: the relay listens and the SYN queue is bound before a connection can be
queued or redirected, and on :meth:`close` the rules go first (new connections go
direct again), then the queue (SYNs still held are dropped: their programs retransmit
them, directly), then the relay gives open connections ``drain_s`` to finish before
resetting them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from .._counters import LogLimiter
from .._selectors import TransparentSection
from ..robot import ReportPart
from ..wire import FlowSummary, KernelLeaseUnavailableError, mark_socket, tune_tcp
from ._admission import Gatekeeper, LocalServer
from ._budget import BufferPool, FdPlan, fd_plan
from ._identity import IdentityFactory, socket_owner
from ._nft import NftTable, TransparentUnavailableError, cgroup2_root
from ._observe import PacketObserver, SendGrouper
from ._relay import Relay, RelayFlow
from ._ruleset import Ruleset, build_ruleset

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
        acks_in_video=section.ack_category == "AC_VI",
        ls_category=section.ls_category,
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
            dscp=self.ruleset.ls_marking.dscp,
        )
        self.relay: Relay | None = None
        self.inbound: Relay | None = None
        self.gate: Gatekeeper | None = None
        self.local: LocalServer | None = None
        self.plan: FdPlan | None = None
        limiter = LogLimiter(log, time.monotonic_ns)
        chunk = team.settings.bulk
        # One flow cap and one buffer pool for both relays: the fd limit and the memory
        # budget are the agent's, whichever side opened the connection.
        pool = BufferPool(
            budget_bytes=round(section.relay_memory_mb * (1 << 20)),
            buffer_bytes=max(chunk.chunk_bytes, min(chunk.unpaced_chunk_bytes, 256 << 10)),
        )
        common: dict[str, Any] = {
            "coordinator": team.coordinator,
            "planner": planner,
            "settings": chunk,
            "idle_release_ns": section.idle_release_ns,
            "pool": pool,
            "limiter": limiter,
        }
        if self.ruleset.bh_redirect:
            self.gate = Gatekeeper(
                queue_num=self.ruleset.queue_num,
                relay_mark=section.relay_mark,
                identities=IdentityFactory(cgroup_root=cgroup2_root(), own_cgroup=None),
                prepare=self._prepare,
                max_flows=self._max_flows,
                open_flows=self._open_flows,
                limiter=limiter,
            )
            self.relay = Relay(port=section.relay_port, admission=self.gate, **common)
        if self.ruleset.bh_inbound:
            self.local = LocalServer(
                prepare=self._prepare_local,
                max_flows=self._max_flows,
                open_flows=lambda: self._open_flows() + (self.gate.deciding if self.gate else 0),
                limiter=limiter,
            )
            # Redirected in prerouting, to an address of the interface the connection
            # came in on: listen on all of them (a connection made to this port
            # directly, not redirected, is reset).
            self.inbound = Relay(
                port=section.inbound_relay_port,
                host="0.0.0.0",
                inbound=True,
                admission=self.local,
                **common,
            )
        self._started = False

    @property
    def relays(self) -> list[Relay]:
        return [r for r in (self.relay, self.inbound) if r is not None]

    def _max_flows(self) -> int:
        return self.plan.max_flows if self.plan is not None else 0

    def _open_flows(self) -> int:
        return sum(len(r.flows) for r in self.relays)

    def _prepare_local(self, sock: socket.socket) -> None:
        """Options of the inbound relay's connection to the local server: its fwmark (the
        rules let it pass), and a receive buffer that bounds what the relay holds of the
        server's replies like an application's socket buffer towards the outbound relay."""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.section.relay_mark)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        sock.setsockopt(
            socket.IPPROTO_TCP,
            socket.TCP_USER_TIMEOUT,
            int(self.team.settings.bulk.io_timeout_s * 1000),
        )

    def _prepare(self, sock: socket.socket) -> None:
        """Options of the relay's own connections (the socket already carries the
        program's identity): its fwmark (so the rules let it pass), AC_BE marking, and
        a bound on how long unacknowledged bytes may wait."""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.section.relay_mark)
        mark_socket(sock, "bh")
        tune_tcp(sock)
        sock.setsockopt(
            socket.IPPROTO_TCP,
            socket.TCP_USER_TIMEOUT,
            int(self.team.settings.bulk.io_timeout_s * 1000),
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.section.ls:
                self.observer.start(loop)
            if self.relays:
                self.plan = fd_plan(
                    configured=self.section.relay_max_flows,
                    inbox_connections=self.team.settings.receiver.max_connections,
                    raise_soft=True,
                )
                log.info("%s: relay budget: %s", self.team.robot, self.plan.describe())
            if self.inbound is not None:
                await self.inbound.start()
            if self.relay is not None and self.gate is not None:
                await self.relay.start()
                # The agent's own cgroup: its listener's, as the kernel reports it.
                try:
                    owner = socket_owner(self.relay.host, self.relay.port, "0.0.0.0", 0)
                except OSError:
                    owner = None  # no sock_diag: every program's socket is made here
                self.gate.identities.own_cgroup = owner[1] if owner is not None else None
                try:
                    self.gate.start()
                except OSError as exc:
                    raise _queue_unavailable(exc, self.ruleset.queue_num) from None
            await self.table.install()
            if self.relays and self.team.coordinator.guard is None:
                try:
                    await self.team.enable_kernel_lease(self.section.relay_mark)
                except KernelLeaseUnavailableError as exc:
                    log.warning("%s: %s; permits enforced in user space only",
                                self.team.robot, exc)  # fmt: skip
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
            if self.gate is not None:
                await self.gate.close()
            if self.relays:
                await self._drain_relays()
                for relay in self.relays:
                    await relay.close()

    async def _drain_relays(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        while self._open_flows() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self._open_flows():
            log.warning(
                "%s: resetting %d relayed connection(s) still open at exit",
                self.team.robot,
                self._open_flows(),
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
        if self.local is not None:
            out["inbound_admission"] = dict(self.local.counters)
        if self.gate is not None:
            out["gate"] = dict(self.gate.counters)
            out["gate"]["identities"] = dict(self.gate.identities.counters)
        if self.plan is not None:
            out["budget"] = {"nofile": self.plan.nofile, "reserve": self.plan.reserve,
                             "max_flows": self.plan.max_flows}  # fmt: skip
        return out


def _queue_unavailable(exc: OSError, num: int) -> TransparentUnavailableError:
    why = {
        errno.EPERM: "permission denied: the agent needs CAP_NET_ADMIN",
        errno.EBUSY: f"another process holds queue {num} (another agent with the same relay_port?)",
    }.get(exc.errno or 0, f"{exc.strerror or exc}")
    return TransparentUnavailableError(
        f"cannot bind the SYN queue {num} (nfnetlink_queue): {why}; the kernel needs "
        "CONFIG_NETFILTER_NETLINK_QUEUE"
    )
