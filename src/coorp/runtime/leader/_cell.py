"""A fleet cell's leader: the permit service of one cell, peering with the leaders of
the other cells on its channel (:class:`~coorp.control.CellLeader` on sockets).

The channel's coordination is :class:`~coorp.control.CellLeader`'s, unchanged: the
leader with the smallest cell name among those alive coordinates the channel (Algorithm
1 for every robot of every cell on it); the others relay their robots' requests and
releases to it and its grants and revocations back; a leader that hears no peer
coordinates its own cell alone (per-team protection, never none). This module is its
transport and its clock:

* **The peer link.** A leader dials every other leader of its channel at the address
  of that cell in ``[fleet]`` and joins its permit service with role ``leader`` under
  its *cell's* name, authenticated like a robot (the key of the pair (cell, leader),
  derived from the team secret, which only leaders hold; no robot may be named like a
  cell). One connection per direction: a leader sends on the one it dialled and reads
  on the one it accepted. No new listener: peers come in through the permit service's
  own accept loop, quotas and handshake.
* **Loss.** Messages to a peer that is not connected are dropped (the algorithm
  tolerates loss: requests are repeated with each heartbeat, a new coordinator gets
  every cell's state). A frame carries ``hears``: whether its sender heard from the
  receiver within the peer timeout. Frames of a peer that does not hear us are not
  taken as a sign of life, so a link that carries only one way is down on both ends
  (each side coordinates its own cell) instead of one side relaying into the void.
* **Bad peers.** A peer that is not a cell of this channel is refused at the handshake;
  a frame that names another sender or receiver, a robot outside the team, or is not a
  :class:`~coorp.runtime.wire.PeerFrame` is dropped, counted and logged with its
  address (``dropped_malformed``), and the link stays up.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable

from coorp._errors import PeerError
from coorp.control import (
    CellActions,
    CellLeader,
    Grant,
    PeerKind,
    PeerMessage,
    PermitUpdate,
    UnknownRobotError,
)

from .._errors import MalformedFrameError, RefusedError
from ..wire import (
    AcceptLoop,
    Address,
    FramedConnection,
    PeerClosed,
    PeerFrame,
    Ping,
    Pong,
    Refused,
    TeamKey,
    Welcome,
    client_handshake,
    format_address,
    recv_first_reply,
    resolve,
    tune_tcp,
)
from ._service import LeaderSettings, PermitService

__all__ = ["CellService"]

log = logging.getLogger("coorp.runtime.leader")

_OUTBOX = 1024  # frames queued for one peer at most (the oldest go first)


class CellService(PermitService):
    """The permit service of cell ``cell`` in a fleet; ``peers``: the other cells of its
    channel and where their leaders listen."""

    def __init__(
        self,
        robots: Iterable[str],
        key: TeamKey,
        settings: LeaderSettings = LeaderSettings(),
        *,
        cell: str,
        peers: dict[str, Address],
        peer_heartbeat_ns: int = 100_000_000,
        peer_timeout_ns: int = 1_000_000_000,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        super().__init__(robots, key, settings, clock=clock)
        self.cell = cell
        self.peer_addresses = {p: a for p, a in peers.items() if p != cell}
        self.peer_timeout_ns = peer_timeout_ns
        self.cell_leader = CellLeader(
            cell,
            [cell, *self.peer_addresses],
            limit=settings.limit,
            timeslice_ns=settings.timeslice_ns,
            heartbeat_ns=peer_heartbeat_ns,
            timeout_ns=peer_timeout_ns,
            now_ns=clock(),
        )
        #: When each peer's last frame arrived (any frame: the ``hears`` we send).
        self._frame_from: dict[str, int] = {}
        self._outbox: dict[str, deque[tuple[int, PeerFrame]]] = {
            p: deque(maxlen=_OUTBOX) for p in self.peer_addresses
        }
        self._wake: dict[str, asyncio.Event] = {}
        self._peer_counts = {
            "peer_frames_in": 0,
            "peer_frames_out": 0,
            "peer_frames_lost": 0,
            "peer_connects": 0,
            "peer_unheard": 0,
            "max_channel_holders": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, listen: Address) -> Address:
        bound = await super().start(listen)
        for peer in self.peer_addresses:
            self._wake[peer] = asyncio.Event()
            self._spawn(self._dial(peer), f"coorp-peer-{peer}")
        self._apply_cell(self.cell_leader.tick(self._clock()))
        return bound

    def stats(self) -> dict[str, int]:
        out = super().stats()
        cl = self.cell_leader
        now = self._clock()
        out.update(self._peer_counts)
        out.update(
            holders=len(cl.holders),
            waiting=len(cl.waiting),
            is_coordinator=int(cl.is_coordinator),
            isolated=int(bool(cl.peers) and not cl.alive_peers(now)),
            alive_peers=len(cl.alive_peers(now)),
            channel_holders=len(cl.channel_holders),
            relayed=cl.stats.relayed,
            coordinator_changes=cl.stats.coordinator_changes,
            adopted=cl.stats.adopted,
            cell_grants=cl.stats.grants,
        )
        return out

    # -- the permit authority: CellLeader ----------------------------------------------------
    def _permit_join(self, robot: str) -> None:
        self._apply_cell(self.cell_leader.join(robot, self._clock()), apply=False)

    def _permit_forget(self, robot: str, now: int) -> PermitUpdate:
        return self._split(self.cell_leader.leave(robot, now))

    def _permit_request(self, robot: str, flows: int, now: int) -> PermitUpdate:
        try:
            return self._split(self.cell_leader.request(robot, now))
        except UnknownRobotError:  # cannot happen for a joined robot; never fatal
            return PermitUpdate()

    def _permit_release(self, robot: str, grant_id: int, now: int) -> PermitUpdate:
        return self._split(self.cell_leader.release(robot, grant_id, now))

    def _permit_tick(self, now: int) -> PermitUpdate:
        return self._split(self.cell_leader.tick(now))

    def _permit_deadline(self) -> int | None:
        return self.cell_leader.next_deadline_ns()

    def _holder_grants(self) -> tuple[Grant, ...]:
        return self.cell_leader.holders

    def _waiting_robots(self) -> list[str]:
        return list(self.cell_leader.waiting)

    def _queue_key(self, robot: str) -> object:
        return None  # one permit for the channel, whichever cell a robot is in

    def _split(self, actions: CellActions) -> PermitUpdate:
        """Send the messages for peers; the grants and revocations go to the caller."""
        for msg in actions.to_peers:
            self._to_peer(msg)
        n = len(self.cell_leader.channel_holders)
        c = self._peer_counts
        c["max_channel_holders"] = max(c["max_channel_holders"], n)
        return PermitUpdate(actions.granted, actions.revoked)

    def _apply_cell(self, actions: CellActions, *, apply: bool = True) -> None:
        update = self._split(actions)
        if apply or update:
            self._apply(update)

    # -- outgoing: one dialled connection per peer ---------------------------------------------
    def _to_peer(self, msg: PeerMessage) -> None:
        box = self._outbox.get(msg.dst)
        if box is None:
            return
        heard = self._frame_from.get(msg.dst)
        now = self._clock()
        frame = PeerFrame(
            kind=msg.kind.value,
            src=msg.src,
            dst=msg.dst,
            robot=msg.robot,
            grant_id=msg.grant_id,
            remaining_ns=msg.remaining_ns,
            holders=[(r, t) for r, t in msg.holders][:64],
            waiting=list(msg.waiting)[:128],
            hears=heard is not None and now - heard < self.peer_timeout_ns,
        )
        if len(box) == box.maxlen:
            self._peer_counts["peer_frames_lost"] += 1
        box.append((now, frame))
        wake = self._wake.get(msg.dst)
        if wake is not None:
            wake.set()

    async def _dial(self, peer: str) -> None:
        """Keep a connection to ``peer``'s leader and send its outbox on it (reconnect
        with a back-off of 50 ms doubling to 0.5 s)."""
        backoff = 0.05
        address = self.peer_addresses[peer]
        box, wake = self._outbox[peer], self._wake[peer]
        while True:
            conn: FramedConnection | None = None
            try:
                conn = await self._connect(address)
                self._peer_counts["peer_connects"] += 1
                log.info("cell %s: peer link to %s (%s) up", self.cell, peer,
                         format_address(address))  # fmt: skip
                backoff = 0.05
                while True:
                    while box:
                        sent_ns, frame = box.popleft()
                        if self._clock() - sent_ns > self.peer_timeout_ns:
                            self._peer_counts["peer_frames_lost"] += 1  # stale: drop
                            continue
                        await conn.send(frame)
                        self._peer_counts["peer_frames_out"] += 1
                    wake.clear()
                    await wake.wait()
            except (PeerError, PeerClosed, OSError, TimeoutError) as exc:
                log.debug("cell %s: peer link to %s: %s", self.cell, peer, exc)
            finally:
                if conn is not None:
                    conn.close()
            # Frames queued while the link is down would be stale when it is back.
            self._peer_counts["peer_frames_lost"] += len(box)
            box.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    async def _connect(self, address: Address) -> FramedConnection:
        loop = asyncio.get_running_loop()
        family, sockaddr = resolve(address, socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(0.5):
                await loop.sock_connect(sock, sockaddr)
        except BaseException:
            sock.close()
            raise
        tune_tcp(sock)
        conn = FramedConnection(sock, peer=format_address(address), read_timeout_s=2.0,
                                write_timeout_s=2.0)  # fmt: skip
        try:
            await client_handshake(conn, self._key, robot=self.cell, role="leader",
                                   service="leader")  # fmt: skip
            reply = await recv_first_reply(conn)
            if not isinstance(reply, Welcome):
                raise MalformedFrameError(f"expected Welcome, got {type(reply).__name__}")
        except BaseException:
            conn.close()
            raise
        return conn

    # -- incoming: the connections peers dialled ------------------------------------------------
    async def _peer_loop(self, conn: FramedConnection, name: str, slot: AcceptLoop) -> None:
        if name not in self.peer_addresses:
            why = (
                f"{name!r} is not a cell on the channel of cell {self.cell!r} "
                f"(its peers: {', '.join(sorted(self.peer_addresses)) or 'none'})"
            )
            await conn.send(Refused(why))
            raise RefusedError(why)
        s = self.settings
        await conn.send(Welcome(self.epoch, s.limit, s.timeslice_ns, s.heartbeat_ns))
        conn.read_timeout_s = max(3 * self.peer_timeout_ns / 1e9, 1.0)
        while True:
            msg = await conn.recv()
            await slot.pace(name)
            if isinstance(msg, Ping):
                await conn.send(Pong(msg.token))
                continue
            try:
                frame = self._check_frame(msg, name)
            except MalformedFrameError as exc:
                self.drops.drop(conn.peer, exc)
                continue
            now = self._clock()
            self._peer_counts["peer_frames_in"] += 1
            self._frame_from[name] = now
            if not frame.hears:
                self._peer_counts["peer_unheard"] += 1
                continue
            self._apply_cell(self.cell_leader.on_peer(_peer_message(frame), now))

    def _check_frame(self, msg: object, name: str) -> PeerFrame:
        if not isinstance(msg, PeerFrame):
            raise MalformedFrameError(f"unexpected {type(msg).__name__} from peer cell {name}")
        if msg.src != name or msg.dst != self.cell:
            raise MalformedFrameError(
                f"peer cell {name}: frame from {msg.src!r} to {msg.dst!r}, expected from "
                f"{name!r} to {self.cell!r}"
            )
        named = [msg.robot] if msg.robot else []
        named += [r for r, _ in msg.holders] + list(msg.waiting)
        unknown = sorted({r for r in named if r not in self.team})
        if unknown:
            raise MalformedFrameError(
                f"peer cell {name}: {msg.kind} names robots not in the team: "
                + ", ".join(unknown[:5])
            )
        return msg


def _peer_message(f: PeerFrame) -> PeerMessage:
    return PeerMessage(
        PeerKind(f.kind), f.src, f.dst, f.robot, f.grant_id, f.remaining_ns,
        tuple((r, t) for r, t in f.holders), tuple(f.waiting),
    )  # fmt: skip
