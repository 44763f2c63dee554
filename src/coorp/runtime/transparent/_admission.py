"""Which connections the relay takes, and how each one starts: the gatekeeper.

The relay listens on ``127.0.0.1:relay_port``, where any local process can connect.
What makes a connection one to relay is not that it arrived there but that the kernel
sent it there: the gate chain (:mod:`._nft`) queues the SYN of every new bulk
connection to the agent (:mod:`._nfqueue`), and :class:`Gatekeeper` decides before
the program's handshake completes:

1. **a destination the relay may reach** — never loopback, never an address of this
   host (the relay itself, its own ports, any local service: the kernel rules return
   such connections before the queue, this is the second lock);
2. **room** — relayed connections (open, connecting, approved) stay within the flow cap
   of :mod:`._budget`; beyond it the SYN is refused at once (the program's
   ``connect()`` gets ``ECONNREFUSED``), counted and logged a few lines a second at most;
3. **as the program** — its identity (:mod:`._identity`): the uid and gid the kernel
   reported with the SYN, the ``sk_uid`` and cgroup of its socket;
4. **the destination answers** — the relay's own connection, created with that
   identity, must be established; if it is refused or unreachable, the program's SYN
   is answered with the kernel's own refusal (:mod:`._endings`).

Only then is the SYN let through (to the redirect, then the relay's listener), with a
:class:`Ticket` holding the connected socket under its four-tuple. The relay takes a
connection it accepts only with its ticket (:meth:`Gatekeeper.claim`): one made to the
relay port directly, or one whose SYN nobody approved, has none and is reset — no
connection is ever made for it. A retransmitted SYN of a connection being decided is
dropped (the held one answers for it); a connection still being decided whose program
gave up (its socket is gone) is abandoned, and tickets not claimed within
``claim_ttl_s`` are reset: a program cannot keep slots of the cap busy longer than its
own connection attempt lasts.

:class:`LocalServer` is the inbound relay's admission (server-side selectors): the
connection comes from another host, so there is no program here whose SYN to hold or
whose identity to carry; the relay connects to the local server as the agent. It
takes a connection only if the kernel redirected it (an original destination that is
not the relay's own port), only to a server of this host (a forwarded connection is
never relayed on: it is reset), and only within the same flow cap as the outbound
relay's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._counters import LogLimiter
from ._endings import OVER_LIMIT, REJECTS, Refusal, hold_reset, refusal_for, reset
from ._identity import Identity, IdentityError, IdentityFactory, socket_owner
from ._nfqueue import ACCEPT, DROP, REPEAT, QueuedSyn, SynQueue

__all__ = ["Gatekeeper", "LocalServer", "Ticket", "is_local_destination"]

log = logging.getLogger("coorp.runtime.transparent")

Key = tuple[str, int, str, int]  # program address, port; original destination, port


@dataclass(slots=True, eq=False)
class Ticket:
    """An approved connection: the relay's connected socket to the destination."""

    key: Key
    up: socket.socket
    identity: Identity
    approved_ns: int
    claimed: bool = False
    connected: bool = True
    """False for :class:`LocalServer`'s tickets: the relay connects ``up`` itself."""

    @property
    def dest(self) -> tuple[str, int]:
        return (self.key[2], self.key[3])


def is_local_destination(addr: str) -> bool:
    """Whether a connection to ``addr`` stays on this host: loopback, unspecified, or
    an address of this host (the route to it goes to itself — a UDP connect only looks
    the route up, no packet is sent)."""
    if addr.startswith("127.") or addr == "0.0.0.0":
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((addr, 9))
        except OSError:
            return False
        return bool(probe.getsockname()[0] == addr)


@dataclass(slots=True)
class _Counters:
    values: dict[str, int] = field(
        default_factory=lambda: {
            "syns": 0,
            "approved": 0,
            "claimed": 0,
            "refused_destination": 0,
            "over_limit": 0,
            "identity_failed": 0,
            "upstream_refused": 0,
            "upstream_unreachable": 0,
            "upstream_timeouts": 0,
            "retransmits_dropped": 0,
            "unclaimed_expired": 0,
            "abandoned": 0,
            "not_redirected": 0,
            "unapproved": 0,
        }
    )


class Gatekeeper:
    """Decides each queued SYN (see the module docstring)."""

    def __init__(
        self,
        *,
        queue_num: int,
        relay_mark: int,
        identities: IdentityFactory,
        prepare: Callable[[socket.socket], None],
        max_flows: Callable[[], int],
        open_flows: Callable[[], int],
        limiter: LogLimiter,
        connect_timeout_s: float = 130.0,
        claim_ttl_s: float = 10.0,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.relay_mark = relay_mark
        self.identities = identities
        self._prepare = prepare
        self._max_flows = max_flows
        self._open_flows = open_flows
        self.limiter = limiter
        self.connect_timeout_s = connect_timeout_s
        self.claim_ttl_s = claim_ttl_s
        self._clock = clock
        self.queue = SynQueue(queue_num, self._on_syn, maxlen=4096)
        self._pending: dict[Key, asyncio.Task[None]] = {}
        self._started: dict[Key, int] = {}
        self._tickets: dict[Key, Ticket] = {}
        self._unclaimed = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self.counters = _Counters().values

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Bind the SYN queue (OSError if the kernel or the rights are missing)."""
        self.queue.open()
        loop = asyncio.get_running_loop()
        self.queue.start(loop)
        self._sweeper = loop.call_later(1.0, self._sweep)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        self.queue.close(loop)
        if self._sweeper is not None:
            self._sweeper.cancel()
        tasks = list(self._pending.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ticket in list(self._tickets.values()):
            if not ticket.claimed:
                reset(ticket.up)
        self._tickets.clear()
        self._unclaimed = 0
        self.identities.close()

    @property
    def deciding(self) -> int:
        """Connections being decided or approved and not yet taken by the relay."""
        return len(self._pending) + self._unclaimed

    # -- the relay's side ------------------------------------------------------------------
    def claim(self, peer: tuple[str, int], dest: tuple[str, int] | None) -> Ticket | None:
        """The ticket of a connection the relay accepted from ``peer``, which the
        kernel says was going to ``dest`` (None: not approved; the caller resets it)."""
        if dest is None:
            self.counters["not_redirected"] += 1
            return None
        ticket = self._tickets.get((peer[0], peer[1], dest[0], dest[1]))
        if ticket is None or ticket.claimed:
            self.counters["unapproved"] += 1
            return None
        ticket.claimed = True
        self._unclaimed -= 1
        self.counters["claimed"] += 1
        return ticket

    def release(self, ticket: Ticket) -> None:
        """The relayed connection ended (its sockets are the relay's to close)."""
        if self._tickets.get(ticket.key) is ticket:
            del self._tickets[ticket.key]

    # -- deciding a SYN --------------------------------------------------------------------
    def _on_syn(self, syn: QueuedSyn) -> None:
        self.counters["syns"] += 1
        key = syn.key
        if key in self._tickets:
            self.queue.verdict(syn.packet_id, ACCEPT)  # a retransmit of an approved one
            return
        if key in self._pending:
            self.counters["retransmits_dropped"] += 1
            self.queue.verdict(syn.packet_id, DROP)  # the held SYN answers for it
            return
        if is_local_destination(syn.dst):
            self.counters["refused_destination"] += 1
            self.limiter.warning(
                "relay-destination",
                "relay: %s:%d -> %s:%d: a destination on this host is never relayed; refused",
                *key,
            )
            self._refuse(syn, refusal_for(errno.EACCES))
            return
        if self._open_flows() + self.deciding >= self._max_flows():
            self.counters["over_limit"] += 1
            self.limiter.warning(
                "relay-full",
                "relay: %d connections open or starting (the cap the fd limit allows): "
                "refusing new ones (over_limit %d)",
                self._open_flows() + self.deciding,
                self.counters["over_limit"],
            )
            self._refuse(syn, OVER_LIMIT)
            return
        task = asyncio.get_running_loop().create_task(self._decide(syn))
        self._pending[key] = task
        self._started[key] = self._clock()
        task.add_done_callback(lambda _t: self._forget_pending(key))

    def _forget_pending(self, key: Key) -> None:
        self._pending.pop(key, None)
        self._started.pop(key, None)

    async def _decide(self, syn: QueuedSyn) -> None:
        up: socket.socket | None = None
        try:
            ident = self._identity(syn)
            up = await self.identities.new_socket(ident)
            hold_reset(up)
            self._prepare(up)
            up.setblocking(False)
            async with asyncio.timeout(self.connect_timeout_s):
                await asyncio.get_running_loop().sock_connect(up, (syn.dst, syn.dport))
        except IdentityError as exc:
            reset(up)
            self.counters["identity_failed"] += 1
            self.limiter.warning(
                "relay-identity",
                "relay: %s:%d -> %s:%d: %s; refused rather than sent as the agent",
                *syn.key,
                exc.strerror or exc,
            )
            self._refuse(syn, refusal_for(None))
            return
        except (OSError, TimeoutError) as exc:
            reset(up)
            code = errno.ETIMEDOUT if isinstance(exc, TimeoutError) else exc.errno
            refusal = refusal_for(code)
            kind = {
                errno.ECONNREFUSED: "upstream_refused",
                errno.ECONNRESET: "upstream_refused",
                errno.ETIMEDOUT: "upstream_timeouts",
            }.get(code or 0, "upstream_unreachable")
            self.counters[kind] += 1
            log.info("relay: %s:%d -> %s:%d: %s", *syn.key, exc)
            self._refuse(syn, refusal)
            return
        except BaseException:
            reset(up)
            self.queue.verdict(syn.packet_id, DROP)
            raise
        self._tickets[syn.key] = Ticket(syn.key, up, ident, self._clock())
        self._unclaimed += 1
        self.counters["approved"] += 1
        self.queue.verdict(syn.packet_id, ACCEPT)

    def _identity(self, syn: QueuedSyn) -> Identity:
        try:
            owner = socket_owner(*syn.key)
        except OSError as exc:
            raise IdentityError(exc.errno or errno.EIO, f"sock_diag: {exc}") from None
        if owner is None or syn.gid is None:
            # No local socket (a forwarded packet?) or no socket file: not a program
            # of this host whose identity we could carry.
            raise IdentityError(errno.ESRCH, "no local socket owns this connection")
        uid, cgroup = owner
        return Identity(uid, syn.gid, cgroup)

    def _refuse(self, syn: QueuedSyn, refusal: Refusal) -> None:
        if refusal.reject is None:
            self.queue.verdict(syn.packet_id, DROP)
            return
        offset = REJECTS[refusal.reject][0]
        self.queue.verdict(syn.packet_id, REPEAT, mark=self.relay_mark + offset)

    def _sweep(self) -> None:
        now = self._clock()
        for key, since in list(self._started.items()):
            # Still connecting after a second: is the program still waiting for it?
            if now - since > 1_000_000_000 and _gone(key):
                self.counters["abandoned"] += 1
                task = self._pending.get(key)
                if task is not None:
                    task.cancel()
        self.identities.expire()
        cutoff = now - round(self.claim_ttl_s * 1e9)
        for key, t in list(self._tickets.items()):
            if not t.claimed and t.approved_ns < cutoff:
                del self._tickets[key]
                self._unclaimed -= 1
                self.counters["unclaimed_expired"] += 1
                reset(t.up)
        with contextlib.suppress(RuntimeError):
            self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)


def _gone(key: Key) -> bool:
    """Whether the program's socket of ``key`` no longer exists."""
    try:
        return socket_owner(*key) is None
    except OSError:
        return False


class LocalServer:
    """Admission of the inbound relay (see the module docstring): claims are decided
    at accept, and the ticket's socket is connected by the relay."""

    def __init__(
        self,
        *,
        prepare: Callable[[socket.socket], None],
        max_flows: Callable[[], int],
        open_flows: Callable[[], int],
        limiter: LogLimiter,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._prepare = prepare
        self._max_flows = max_flows
        self._open_flows = open_flows
        self.limiter = limiter
        self._clock = clock
        self._identity = Identity(os.getuid(), os.getgid(), None)
        self.counters = {
            "claimed": 0,
            "not_redirected": 0,
            "refused_destination": 0,
            "over_limit": 0,
            "fd_errors": 0,
        }

    def claim(self, peer: tuple[str, int], dest: tuple[str, int] | None) -> Ticket | None:
        if dest is None:
            self.counters["not_redirected"] += 1
            return None
        if not is_local_destination(dest[0]):
            self.counters["refused_destination"] += 1
            self.limiter.warning(
                "inbound-destination",
                "inbound relay: %s:%d -> %s:%d: not a server of this host; reset",
                *peer,
                *dest,
            )
            return None
        if self._open_flows() >= self._max_flows():
            self.counters["over_limit"] += 1
            self.limiter.warning(
                "relay-full",
                "relay: %d connections open or starting (the cap the fd limit allows): "
                "resetting new inbound ones (over_limit %d)",
                self._open_flows(),
                self.counters["over_limit"],
            )
            return None
        up: socket.socket | None = None
        try:
            up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            hold_reset(up)
            self._prepare(up)
            up.setblocking(False)
        except OSError as exc:
            reset(up)
            self.counters["fd_errors"] += 1
            self.limiter.warning(
                "inbound-socket", "inbound relay: no socket for the server (%s); reset", exc
            )
            return None
        self.counters["claimed"] += 1
        key = (peer[0], peer[1], dest[0], dest[1])
        return Ticket(key, up, self._identity, self._clock(), claimed=True, connected=False)

    def release(self, ticket: Ticket) -> None:
        """Nothing kept per connection."""
