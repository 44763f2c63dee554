"""What the leader's and a worker's process share: the config, the key, the team, the
inbox, and sending sync messages on the mode's transport with a record of each."""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from coorp._errors import ConfigurationError
from coorp.learn._runtime.config import KEY_ENV, RoleConfig, read_config
from coorp.learn._runtime.results import Receipt, Record
from coorp.learn._runtime.wire import Frame, SyncMessage, decode, digest, kind_of

__all__ = ["Role"]


class Role:
    """What server and worker share: config, key, team, inbox."""

    def __init__(self, args: argparse.Namespace) -> None:
        from coorp.runtime import TeamKey, TeamSettings, join

        self.cfg: RoleConfig = read_config(Path(args.config).read_bytes())
        self.args = args
        self.coordinated = self.cfg.coordinated
        if getattr(args, "team", None):  # a robot of a real team: its own key, the daemon's permits
            from coorp.learn._runtime.team import join_team

            self.team, self.keys, self.permits = join_team(
                args.team, args.robot, coordinated=self.coordinated
            )
        else:
            self.keys = TeamKey.from_hex(os.environ[KEY_ENV])
            self.permits = self.cfg.permits if self.coordinated else None
            settings = TeamSettings(join_timeout_s=5.0)
            self.team = join(self.permits, args.robot, self.keys, settings=settings)
        if self.coordinated and not self.team.wait_mode("coordinated", 10):
            raise ConfigurationError(
                f"{args.robot}: the permit service at {self.permits} is not reachable"
            )
        self.inbox = self.team.listen(f"{args.host}:{getattr(args, 'port', 0) or 0}")
        self.stop = threading.Event()
        # One send at a time per peer, in order; peers concurrently (each worker its
        # own stream or connection). On coordinated streams the runtime still puts one
        # message at a time on the air (``BulkSettings.one_message_at_a_time``), but
        # the next one connects and opens while the previous goes out and takes the
        # turn at its last byte written, not once the previous send has returned (a
        # confirmation, a thread hand-off and a fresh connection later: 10-20 ms
        # between the leader's model messages, measured; docs/learn.md).
        self.pools: dict[str, ThreadPoolExecutor] = {}
        self.futures: list[Future[None]] = []
        self.sent: list[Record] = []
        self.received: list[Record] = []
        self.receipts: list[Receipt] = []
        self.timeout = float(self.cfg.timeout_s)
        self.streams: dict[str, Any] = {}  # peer -> its BulkStream (one per peer)
        self.streams_lock = threading.Lock()
        self.n_streams = 0
        #: Told what happens, one line at a time (the team mode's CLI shows it).
        self.progress: Callable[[str], None] = lambda _line: None

    def bulk_send(self, peer: str, dest: str, payload: bytearray, msg: SyncMessage) -> None:
        """Send one sync message to ``peer`` (its inbox address ``dest``) on the mode's
        transport; records the digest and the receipt."""
        kind = kind_of(msg)
        version = getattr(msg, "version", 0)
        self.sent.append(Record(peer, kind, version, digest(payload), len(payload)))
        t0 = time.monotonic_ns()
        if self.coordinated:
            with self.streams_lock:
                if self.cfg.reuse_streams:
                    if peer not in self.streams:
                        self.streams[peer] = self.team.bulk(f"sync-{peer}", dest)
                    stream = self.streams[peer]
                else:  # a fresh stream per message: see RuntimeSpec.reuse_streams
                    self.n_streams += 1
                    stream = self.team.bulk(f"sync-{peer}-{self.n_streams}", dest)
            try:
                r = stream.send(payload, timeout_s=self.timeout)
            finally:
                if not self.cfg.reuse_streams:
                    # One message per fresh stream: close its connection, or the
                    # peer's inbox fills its bound of open connections after a few
                    # hundred messages and refuses the next (small models: ~60
                    # versions in, the team stalled; docs/learn.md).
                    stream.close()
            receipt = Receipt(
                kind=kind, nbytes=len(payload), ns=r.finished_ns - r.started_ns,
                permit_wait_ns=r.permit_wait_ns, preempted_ns=r.preempted_ns,
                preemptions=r.preemptions, start_ns=r.started_ns,
                first_write_ns=r.first_write_ns, last_write_ns=r.last_write_ns,
                end_ns=r.finished_ns,
            )  # fmt: skip
        else:
            self.tcp_send(peer, payload)
            t1 = time.monotonic_ns()
            receipt = Receipt(kind=kind, nbytes=len(payload), ns=t1 - t0, start_ns=t0, end_ns=t1)
        self.receipts.append(receipt)

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        raise NotImplementedError

    def submit(self, peer: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` (a send to ``peer``) after the earlier sends to ``peer``."""
        pool = self.pools.get(peer)
        if pool is None:
            pool = self.pools[peer] = ThreadPoolExecutor(max_workers=1)
        self.futures.append(pool.submit(fn))

    def settle(self) -> None:
        """Wait for every send handed to the pool; raise the first failure."""
        for f in self.futures:
            f.result(timeout=self.timeout)
        self.futures.clear()

    def record_in(self, peer: str, payload: bytes | bytearray | memoryview) -> Frame:
        frame = decode(payload)
        version = getattr(frame.msg, "version", 0)
        self.received.append(
            Record(peer, kind_of(frame.msg), version, digest(payload), len(payload))
        )
        return frame

    def run(self) -> None:
        raise NotImplementedError

    def close_pools(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self.stop.set()
        self.close_pools()
        self.team.close()

    def messages(self) -> Iterator[Any]:
        """The inbox's messages until this process stops or the inbox closes."""
        from coorp.runtime import RuntimeUsageError

        while not self.stop.is_set():
            try:
                yield self.inbox.recv(timeout=0.2)
            except TimeoutError:
                continue
            except RuntimeUsageError:  # the inbox closed: this process is stopping
                return


def jsonable(x: Any) -> Any:
    """``x`` as JSON would give it back (unknown types as their ``str``)."""
    import json

    return json.loads(json.dumps(x, default=str))
