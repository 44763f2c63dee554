"""What the relay may hold: file descriptors and buffer memory, within budgets.

The relay runs as root on every robot and its load is the programs' to choose, so it
must never take what the agent's own work needs:

* **file descriptors** — :class:`FdPlan`: each relayed connection holds two (the
  program's side and the destination's). Under the soft ``RLIMIT_NOFILE`` (raised to
  the hard limit when that is higher, as far as the relay's configured bound needs),
  ``reserve`` descriptors are kept for everything else — the leader link and its
  reconnects, the inbox (its own bound of connections), LS sockets, netlink, the
  packet socket, connectors, logs — and the rest, halved, is the relay's **flow cap**.
  A connection beyond the cap is refused at its SYN with a TCP reset (the program's
  ``connect()`` fails at once: ``ECONNREFUSED``), counted and logged at most a few
  lines a second. ``coorp doctor`` prints the plan.
* **memory** — :class:`BufferPool`: a flow holds no buffer while it waits; a copy
  takes one (``buffer_bytes``) from the pool for as long as the bytes are on their way
  and gives it back. The pool never holds more than ``budget_bytes``: a copy that
  finds it spent waits its turn (first come, first served), so thousands of open
  connections cost their sockets and a few small objects each, not a buffer each.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections import deque
from dataclasses import dataclass

__all__ = ["FDS_PER_FLOW", "BufferPool", "FdPlan", "fd_plan"]

#: Descriptors a relayed connection holds: the program's side and the destination's.
FDS_PER_FLOW = 2
#: Kept besides the inbox's connections: the leader link and its reconnects (one at a
#: time), LS sockets, netlink sockets (nf_tables, the SYN queue, sock_diag), the packet
#: socket, connectors, the control socket, log files, a few files.
BASE_RESERVE = 64


@dataclass(frozen=True, slots=True)
class FdPlan:
    nofile: int
    """The soft limit in effect (after any raise)."""
    hard: int
    reserve: int
    """Descriptors kept for everything but the relay."""
    max_flows: int
    """Relayed connections at once."""
    configured: int
    """The configured bound (``transparent.relay_max_flows``)."""

    def describe(self) -> str:
        limited = "" if self.max_flows >= self.configured else " (the fd limit decides)"
        return (
            f"nofile {self.nofile} (hard {self.hard}): {self.reserve} fds kept for the "
            f"leader link, inbox and LS; up to {self.max_flows} relayed connections at "
            f"once{limited}"
        )


def _limit(value: int) -> int:
    return 1 << 30 if value == resource.RLIM_INFINITY else int(value)


def fd_plan(*, configured: int, inbox_connections: int, raise_soft: bool = False) -> FdPlan:
    """The relay's share of this process's descriptors. With ``raise_soft`` the soft
    limit is first raised towards the hard one, as far as the configured flows need."""
    soft, hard = (_limit(v) for v in resource.getrlimit(resource.RLIMIT_NOFILE))
    reserve = inbox_connections + BASE_RESERVE
    want = reserve + FDS_PER_FLOW * configured
    if raise_soft and soft < want and soft < hard:
        new = min(want, hard)
        try:
            _, raw_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, raw_hard))
            soft = new
        except (OSError, ValueError):
            pass  # keep the limit we have; the plan follows it
    flows = max(0, min(configured, (soft - reserve) // FDS_PER_FLOW))
    return FdPlan(soft, hard, reserve, flows, configured)


class BufferPool:
    """Copy buffers of ``buffer_bytes``, at most ``budget_bytes`` of them in all,
    allocated on first use and reused (see the module docstring)."""

    def __init__(self, *, budget_bytes: int, buffer_bytes: int) -> None:
        if buffer_bytes <= 0 or budget_bytes < buffer_bytes:
            raise ValueError("the budget must hold at least one buffer")
        self.buffer_bytes = buffer_bytes
        self.capacity = budget_bytes // buffer_bytes
        self._free: list[bytearray] = []
        self._allocated = 0
        self._in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.counters = {"waits": 0, "in_use_max": 0}

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def allocated_bytes(self) -> int:
        return self._allocated * self.buffer_bytes

    async def get(self) -> bytearray:
        if self._in_use < self.capacity and not self._waiters:
            self._in_use += 1
        else:
            self.counters["waits"] += 1
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut  # the slot is ours once this returns (taken in _release)
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._release()
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(fut)
                raise
        self.counters["in_use_max"] = max(self.counters["in_use_max"], self._in_use)
        if self._free:
            return self._free.pop()
        self._allocated += 1
        return bytearray(self.buffer_bytes)

    def put(self, buf: bytearray) -> None:
        self._free.append(buf)
        self._release()

    def _release(self) -> None:
        self._in_use -= 1
        while self._waiters and self._in_use < self.capacity:
            fut = self._waiters.popleft()
            if not fut.done():
                self._in_use += 1
                fut.set_result(None)
