"""The threaded face of a robot's runtime: :class:`Team`, :func:`join`.

A :class:`Team` runs an :class:`~._team.AsyncTeam` on a private event-loop thread
(:class:`_LoopThread`) and offers the same operations as blocking calls; LS channels
are the same objects in both APIs (their ``send`` never blocks and is thread-safe).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from .._config import TeamConfig, load_team_config, resolve_team_key
from .._errors import RuntimeUsageError
from ..inbox import Inbox, bind_endpoints
from ..wire import Keyring, Marking, TeamKey, parse_address
from ._bulk import AsyncBulkStream, BulkReceipt
from ._latency import LatencySensitiveChannel
from ._settings import TeamSettings, team_settings
from ._team import AsyncTeam, ajoin

__all__ = ["BulkStream", "Team", "join", "join_config"]


class _LoopThread:
    """A private event loop on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper(), timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class BulkStream:
    """Threaded face of a BH stream; ``send`` blocks until the receiver has it all."""

    def __init__(self, stream: AsyncBulkStream, runner: _LoopThread) -> None:
        self._stream = stream
        self._runner = runner
        self.name = stream.name

    @property
    def counters(self) -> dict[str, int]:
        return dict(self._stream.counters)

    @property
    def marking(self) -> Marking | None:
        return self._stream.marking

    def send(
        self, data: bytes | bytearray | memoryview, *, timeout_s: float | None = None
    ) -> BulkReceipt:
        """Acquire a permit, send ``data`` in chunks under local preemption, resume
        after preemption or reconnects, release; returns a :class:`BulkReceipt`."""
        result: BulkReceipt = self._runner.run(self._stream.send(data, timeout_s=timeout_s))
        return result

    def close(self) -> None:
        """Close the stream's connection; a later ``send`` raises. A stream used for one
        message should be closed after it: the receiver's inbox holds each open
        connection against its bound (``ReceiverLimits``)."""
        self._runner.run(self._stream.close())


class Team:
    """This robot's runtime for threaded code. Create with :func:`join`."""

    def __init__(self, runner: _LoopThread, team: AsyncTeam) -> None:
        self._runner = runner
        self._team = team
        self._inboxes: list[Inbox] = []
        self._closed = False

    @property
    def robot(self) -> str:
        return self._team.robot

    @property
    def mode(self) -> str:
        return self._team.mode

    @property
    def marking(self) -> dict[str, Marking]:
        return dict(self._team.marking)

    @property
    def asyncio_team(self) -> AsyncTeam:
        return self._team

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._runner.call(self._team.stats)
        return result

    def wait_mode(self, mode: str, timeout_s: float) -> bool:
        """Block until :attr:`mode` is ``mode`` (at most ``timeout_s``); True if it is."""
        ok: bool = self._runner.run(self._team.wait_mode(mode, timeout_s), timeout_s + 5)
        return ok

    def sync_leader(self, timeout_s: float = 5.0) -> bool:
        """Block until the leader has handled every permit message this robot sent so
        far (see :meth:`AsyncTeam.sync_leader`)."""
        ok: bool = self._runner.run(self._team.sync_leader(timeout_s), timeout_s + 5)
        return ok

    def latency_sensitive(
        self, name: str, dest: str, *, deadline_ms: float, period_ms: float | None = None
    ) -> LatencySensitiveChannel:
        ch: LatencySensitiveChannel = self._runner.call(
            lambda: self._team.latency_sensitive(
                name, dest, deadline_ms=deadline_ms, period_ms=period_ms
            )
        )
        # Bounded: if the receiver is not up yet, messages park until it is.
        ch.ready.wait(self._team.settings.ls_session_wait_s)
        return ch

    def bulk(self, name: str, dest: str, *, chunk_bytes: int | None = None) -> BulkStream:
        stream: AsyncBulkStream = self._runner.call(
            lambda: self._team.bulk(name, dest, chunk_bytes=chunk_bytes)
        )
        return BulkStream(stream, self._runner)

    def listen(self, address: str = "0.0.0.0:0", *, maxsize: int = 1024) -> Inbox:
        listener, udp, bound = bind_endpoints(parse_address(address, what="listen"))
        inbox = Inbox(
            listener,
            udp,
            bound,
            self._team._key,
            self._runner.loop,
            robot=self._team.robot,
            clock=self._team._clock,
            maxsize=maxsize,
            limits=self._team.settings.receiver,
        )
        self._inboxes.append(inbox)
        self._team._latency_books.append(inbox.latency)
        return inbox

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for inbox in self._inboxes:
            inbox.close()
        try:
            self._runner.run(self._team.close(), timeout=10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def join(
    leader: str | None,
    robot: str,
    key: Keyring | bytes | str,
    *,
    settings: TeamSettings | None = None,
    clock: Callable[[], int] = time.monotonic_ns,
) -> Team:
    """Join the team whose leader listens at ``leader`` ("host:port") as ``robot``.

    Waits up to ``settings.join_timeout_s`` for the leader; if it cannot be reached
    the team runs uncoordinated (logged) and joins when the leader appears. Raises
    :class:`RefusedError` if the leader refuses (unknown robot, wrong key).
    ``leader=None`` runs without permits (marking and local preemption only).
    """
    runner = _LoopThread(f"coorp-{robot}")
    try:
        team: AsyncTeam = runner.run(ajoin(leader, robot, key, settings=settings, clock=clock))
    except BaseException:
        runner.stop()
        raise
    return Team(runner, team)


def join_config(
    config: TeamConfig | str | Path, robot: str, *, key: Keyring | bytes | str | None = None
) -> Team:
    """:func:`join` with the leader address and timings from a team file."""
    source: str | Path | None = None
    if not isinstance(config, TeamConfig):
        source = config
        config = load_team_config(config)
    if robot not in config.team.robots:
        raise RuntimeUsageError(f"robot {robot!r} is not in team.robots of the team file")
    k = TeamKey.coerce(key) if key is not None else resolve_team_key(config, source, robot=robot)
    return join(config.agent.leader, robot, k, settings=team_settings(config))
