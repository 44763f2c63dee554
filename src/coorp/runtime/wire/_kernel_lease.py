"""The kernel's half of the lease: no BH packet of a robot leaves after its permit.

A process checks its permit (:meth:`Coordinator.permitted`) right before every
``sendmsg``, but a check and the syscall after it are two steps: a process stopped
(SIGSTOP, a suspended VM) or starved between them writes when it runs again, however
long after its permit ended. Nothing in user space can close that window; the kernel
can. :class:`KernelLease` keeps one nf_tables table of this robot
(``ip coorp-lease-<robot>``) whose one chain, on the output hook, drops a packet when

* it belongs to one of the robot's paced bulk sockets (``meta mark``: the socket's
  ``SO_MARK``, set by the pacer),
* it leaves through a real interface (not loopback: a relay's bytes to a local program
  are not on the air),
* it carries TCP payload (pure ACKs and window updates pass: a robot acknowledges the
  leader's downloads whoever holds the permit), and
* the kernel's wall clock (``meta time``, read when the packet is sent) is past the
  deadline the coordinator gave (the permit's end, or the earliest instant the leader
  could drop the robot for silence), converted from the monotonic clock at each
  update. The deadline is an absolute time, so an update that
  is itself delayed cannot stretch it.

A dropped segment is TCP's to send again: it stays queued on the socket and goes out
once the robot holds a permit again (the deadline moves then). The deadline is given
by :class:`~coorp.runtime.robot.Coordinator` (``guard``): set at each grant and
renewed lease, lifted (no deadline) once the robot released or lost a permit while
its lease still ran (the leader cannot have passed it on for silence; what drains
after is the usual in-flight budget), and kept when the lease ran out while it held
(a freeze: what it wrote after the deadline stays queued until its next permit, or a
timeslice at most).

The table is created with ``NFT_TABLE_F_OWNER`` (kernel 5.12+): it disappears with the
netlink socket, so a killed process leaves no rule. Needs CAP_NET_ADMIN and pyroute2
(``coorp[transparent]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["KernelLease", "KernelLeaseUnavailableError", "lease_rules", "lease_table_name"]

log = logging.getLogger("coorp.runtime.agent")

_NFPROTO_IPV4 = 2
_TABLE_F_OWNER = 2
_META_MARK, _META_OIF, _META_L4PROTO, _META_TIME_NS = 3, 5, 16, 30
_BASE_NETWORK, _BASE_TRANSPORT = 1, 2
_CMP_EQ, _CMP_NEQ, _CMP_LT = 0, 1, 2
_BYTEORDER_HTON = 1
_NF_DROP, _NFT_RETURN = 0, -5
_LOOPBACK_IFINDEX = 1  # lo is interface 1 in every network namespace
_CHAIN = "lease"
_PRIORITY = 100  # after the filter chains: transparent mode's redirects come first
#: "No deadline": the largest wall-clock time nft compares against.
_NEVER = (1 << 63) - 1


class KernelLeaseUnavailableError(RuntimeError):
    """The kernel lease cannot be installed here (no CAP_NET_ADMIN, no pyroute2, a
    kernel without nf_tables' ``meta time``)."""


def lease_table_name(robot: str) -> str:
    return f"coorp-lease-{robot}"


def _data(value: bytes) -> dict[str, Any]:
    return {"attrs": [("NFTA_DATA_VALUE", value)]}


def _expr(name: str, **attrs: Any) -> dict[str, Any]:
    data = [(f"NFTA_{name.upper()}_{k.upper()}", v) for k, v in attrs.items()]
    return {"attrs": [("NFTA_EXPR_NAME", name), ("NFTA_EXPR_DATA", {"attrs": data})]}


def _cmp(op: int, value: bytes) -> dict[str, Any]:
    return _expr("cmp", sreg=1, op=op, data=_data(value))


def _meta(key: int) -> dict[str, Any]:
    return _expr("meta", dreg=1, key=key)


def _payload(base: int, offset: int, length: int) -> dict[str, Any]:
    return _expr("payload", dreg=1, base=base, offset=offset, len=length)


def _verdict(code: int) -> dict[str, Any]:
    verdict = {"attrs": [("NFTA_DATA_VERDICT", {"attrs": [("NFTA_VERDICT_CODE", code)]})]}
    return _expr("immediate", dreg=0, data=verdict)


def _deadline_rule(deadline_real_ns: int) -> list[dict[str, Any]]:
    # meta time is a host-order u64; cmp compares bytes, so both sides big-endian
    # (what nft emits for ``meta time < ...``). Replaced at every update; the drop
    # rule after it keeps its counter.
    return [
        _meta(_META_TIME_NS),
        _expr("byteorder", sreg=1, dreg=1, op=_BYTEORDER_HTON, len=8, size=8),
        _cmp(_CMP_LT, struct.pack("!Q", max(0, deadline_real_ns))),
        _verdict(_NFT_RETURN),
    ]


def lease_rules(mark: int, deadline_real_ns: int) -> list[list[dict[str, Any]]]:
    """The chain's rules (netlink expressions), in order; the one before the last
    holds the deadline (wall-clock ns), the last drops and counts."""
    ret = _verdict(_NFT_RETURN)
    rules = [
        [_meta(_META_MARK), _cmp(_CMP_NEQ, struct.pack("=I", mark)), ret],
        [_meta(_META_OIF), _cmp(_CMP_EQ, struct.pack("=I", _LOOPBACK_IFINDEX)), ret],
        [_meta(_META_L4PROTO), _cmp(_CMP_NEQ, bytes([6])), ret],
    ]
    # No payload: the IP length is exactly the two headers (IHL 5; TCP doff 5..15).
    for doff in range(5, 16):
        rules.append(
            [
                _payload(_BASE_NETWORK, 0, 1),
                _cmp(_CMP_EQ, b"\x45"),
                _payload(_BASE_NETWORK, 2, 2),
                _cmp(_CMP_EQ, struct.pack("!H", 20 + 4 * doff)),
                _payload(_BASE_TRANSPORT, 12, 1),
                _expr("bitwise", sreg=1, dreg=1, len=1, mask=_data(b"\xf0"), xor=_data(b"\x00")),
                _cmp(_CMP_EQ, bytes([doff << 4])),
                ret,
            ]
        )
    rules.append(_deadline_rule(deadline_real_ns))
    rules.append([_expr("counter"), _verdict(_NF_DROP)])
    return rules


class KernelLease:
    """One robot's deadline in the kernel (asyncio; :meth:`request` from the loop)."""

    def __init__(
        self,
        robot: str,
        mark: int,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        realtime: Callable[[], int] = time.time_ns,
    ) -> None:
        self.robot = robot
        self.mark = mark
        self.table = lease_table_name(robot)
        self._clock = clock
        self._realtime = realtime
        self._nft: Any = None
        self._handle: int | None = None
        self._target: int | None = None
        self.applied: int | None = None
        """The deadline in force in the kernel (monotonic ns; None: none)."""
        self.on_applied: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.updates = 0
        self.failed = False

    # -- set-up ---------------------------------------------------------------------------------
    async def install(self) -> None:
        """Create the table (replacing one a crash left) with no deadline yet."""
        try:
            from pyroute2.nftables.main import AsyncNFTables
        except ImportError:
            raise KernelLeaseUnavailableError(
                "the kernel lease needs pyroute2: pip install 'coorp[transparent]'"
            ) from None
        nft = AsyncNFTables(1, 0, _NFPROTO_IPV4)
        try:
            await nft.setup_endpoint()
            tables = [t async for t in await nft.get_tables()]
            if any(t.get_attr("NFTA_TABLE_NAME") == self.table for t in tables):
                await nft.table("del", name=self.table)
            try:
                await nft.table("add", kwarg=OrderedDict(name=self.table, flags=_TABLE_F_OWNER))
            except Exception as exc:
                if getattr(exc, "code", None) not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                await nft.table("add", name=self.table)
            await nft.chain(
                "add", table=self.table, name=_CHAIN, hook="output", type="filter",
                priority=_PRIORITY, policy=1,
            )  # fmt: skip
            for exprs in lease_rules(self.mark, _NEVER):
                await nft.rule("add", table=self.table, chain=_CHAIN, expressions=[exprs])
            self._handle = await self._last_handle(nft)
        except Exception as exc:
            nft.close()
            code = getattr(exc, "code", None)
            why = "needs CAP_NET_ADMIN" if code == errno.EPERM else str(exc)
            raise KernelLeaseUnavailableError(f"kernel lease for {self.robot}: {why}") from None
        self._nft = nft

    async def _last_handle(self, nft: Any) -> int:
        """The deadline rule's handle (the one before the drop rule)."""
        handles = [
            r.get_attr("NFTA_RULE_HANDLE")
            for r in [r async for r in await nft.get_rules()]
            if r.get_attr("NFTA_RULE_TABLE") == self.table
        ]
        if len(handles) < 2:
            raise KernelLeaseUnavailableError(f"{self.table}: its rules are not listed")
        return int(handles[-2])

    def close(self) -> None:
        """Close the netlink socket (the owned table disappears with it)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._nft is not None:
            self._nft.close()
            self._nft = None

    # -- the deadline -----------------------------------------------------------------------
    def allows(self, now_ns: int) -> bool:
        """The kernel lets this robot's bulk out at ``now_ns`` (monotonic)."""
        return self.applied is None or now_ns < self.applied

    def request(self, deadline_ns: int | None) -> None:
        """Make ``deadline_ns`` (monotonic; None: none) the kernel's, as soon as it can."""
        self._target = deadline_ns
        if self._nft is None or self.failed or self._target == self.applied:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._apply())

    async def _apply(self) -> None:
        while self._nft is not None and self._target != self.applied:
            target = self._target
            real = _NEVER if target is None else target + self._offset()
            try:
                await self._nft.rule(
                    "replace", table=self.table, chain=_CHAIN, handle=self._handle,
                    expressions=[_deadline_rule(real)],
                )  # fmt: skip
            except Exception as exc:
                # Without updates the kernel would hold this robot's bulk forever: say
                # so once and lift the guard (the user-space lease still holds).
                log.error("%s: kernel lease update failed (%s); lease enforced in user space only",
                          self.robot, exc)  # fmt: skip
                self.failed = True
                with contextlib.suppress(Exception):
                    await self._nft.table("del", name=self.table)
                self.applied = None
            else:
                self.applied = target
                self.updates += 1
            if self.on_applied is not None:
                self.on_applied()
            if self.failed:
                return

    def _offset(self) -> int:
        """Wall clock minus monotonic clock, read back to back (retried if a read was
        interrupted: a wrong offset would move the deadline)."""
        best: tuple[int, int] | None = None
        for _ in range(3):
            r1 = self._realtime()
            m = self._clock()
            r2 = self._realtime()
            if best is None or r2 - r1 < best[0]:
                best = (r2 - r1, (r1 + r2) // 2 - m)
            if r2 - r1 < 100_000:
                break
        assert best is not None
        return best[1]

    async def dropped(self) -> int:
        """Packets the kernel dropped past a deadline so far."""
        if self._nft is None:
            return 0
        total = 0
        for r in [r async for r in await self._nft.get_rules()]:
            if r.get_attr("NFTA_RULE_TABLE") != self.table:
                continue
            for e in r.get_attr("NFTA_RULE_EXPRESSIONS") or ():
                if e.get_attr("NFTA_EXPR_NAME") == "counter":
                    total += e.get_attr("NFTA_EXPR_DATA").get_attr("NFTA_COUNTER_PACKETS") or 0
        return total
