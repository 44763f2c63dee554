"""Learning over real sockets: ``coorp learn SCENARIO --runtime``.

Each robot of the scenario's workload is a process: the leader runs the parameter
server, every worker runs PPO (the same :class:`~coorp.learn.PPO`, seeds and merge rules
as the simulated path, :mod:`coorp.learn._sync`). Parameter syncs carry the real
``float32`` tensor (padded to ``4 × air_params`` bytes when a scale is asked for) and
travel, per mode:

* ``coorp`` — :mod:`coorp.runtime` bulk streams: a permit from the team's permit service
  (a separate process, :class:`~coorp.runtime.PermitService`) and local preemption
  (the gate) around the robot's own LS sends;
* ``tcp`` — plain TCP, one connection per worker, no permits, no pacing, no marking
  (what a team would run without Coorp).

In both modes the MPC loop runs alongside on :mod:`coorp.runtime` LS channels: every
worker sends a perception at ``grid + k·period`` (the same instants on every robot);
once the leader has all perceptions of loop ``k`` it sends each worker a control; the
loop's reaction time is the last control's arrival − the loop's start (one clock: the
processes share the host's ``CLOCK_MONOTONIC``), a miss when above the deadline or
never completed.

Syncs (BSP, ASP; SSP is simulated only): BSP — the leader broadcasts model ``v``, every
worker trains on it and sends its parameters back, the leader merges in worker order and
broadcasts ``v + 1``. ASP — the leader merges each update as it arrives and sends the
current model back to that worker. A run stops creating versions after ``duration_s``
(or ``max_versions``) and sends every worker a stop message.

Every message's SHA-256 is recorded by its sender and its receiver; a run checks they
agree (every parameter byte arrived, none changed). Model versions are scored after the
run (the same greedy, fixed-start-state score as the simulated path), so scoring never
takes CPU from the run.

The roles run as ``python -m coorp.learn._runtime permits|server|worker`` (the team key
in the environment variable ``COORP_LEARN_KEY_HEX``, never on the command line); on
loopback (``net="loopback"``) or in network namespaces (``net="netns"``, root, see
:mod:`coorp.learn._netns`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from coorp._errors import ConfigurationError, InvariantError, UsageError
from coorp.learn._env import FormationSpec
from coorp.learn._network import LearnCurve, LearnSpec
from coorp.learn._ppo import PPO, Layout, PPOConfig
from coorp.learn._sync import merge_async, merge_mean_delta
from coorp.scenario import Scenario, SyncMode

__all__ = ["MODES", "NETS", "RuntimeRun", "RuntimeSpec", "learn_on_runtime"]

MODES = ("coorp", "tcp")
NETS = ("netns", "loopback")
KEY_ENV = "COORP_LEARN_KEY_HEX"

# -- sync messages ------------------------------------------------------------------------
_HDR = struct.Struct("<4sBIIdII")  # magic, kind, version, n_params, return, samples, extra
_MAGIC = b"CLRN"
HELLO, MODEL, UPDATE, STOP = 0, 1, 2, 3

# Robots without a shared clock (a team file, see coorp.learn._robots): the leader sends
# every worker CLOCK_ROUNDS datagrams on its control channel, marked with loop number
# CLOCK_K and carrying the loop grid on the leader's clock; a worker maps the grid to its
# own clock with the smallest (arrival − sent) it saw (exact up to the smallest one-way
# delay). The leader broadcasts the first model once WARM_LOOPS loops were complete.
CLOCK_K = 2**64 - 1
CLOCK_ROUNDS = 8
CLOCK_GAP_S = 0.02
WARM_LOOPS = 8
_U64 = struct.Struct("<Q")


class SyncMessage(NamedTuple):
    kind: int
    version: int
    params: np.ndarray | None
    ret: float
    samples: int
    extra: bytes


def encode(
    kind: int,
    version: int,
    params: np.ndarray | None = None,
    *,
    ret: float = 0.0,
    samples: int = 0,
    extra: bytes = b"",
    pad_to: int = 0,
) -> bytearray:
    """Header + the ``float32`` parameters + ``extra``, zero-padded to ``pad_to`` bytes."""
    body = b"" if params is None else np.ascontiguousarray(params, np.float32).tobytes()
    n = 0 if params is None else len(params)
    head = _HDR.pack(_MAGIC, kind, version, n, ret, samples, len(extra))
    size = len(head) + len(body) + len(extra)
    buf = bytearray(max(size, pad_to))
    buf[:size] = head + body + extra
    return buf


def decode(payload: bytes | bytearray | memoryview) -> SyncMessage:
    mv = memoryview(payload)
    if len(mv) < _HDR.size:
        raise InvariantError(f"sync message of {len(mv)} B is shorter than its header")
    magic, kind, version, n, ret, samples, n_extra = _HDR.unpack_from(mv)
    if magic != _MAGIC or len(mv) < _HDR.size + 4 * n + n_extra:
        raise InvariantError("not a coorp learn sync message")
    params = None
    if n:
        params = np.frombuffer(mv, np.float32, count=n, offset=_HDR.size).copy()
    extra = bytes(mv[_HDR.size + 4 * n : _HDR.size + 4 * n + n_extra])
    return SyncMessage(kind, version, params, ret, samples, extra)


def digest(payload: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(payload).hexdigest()


# -- plain TCP (the uncoordinated baseline) ------------------------------------------------
_LEN = struct.Struct("<Q")
Delivery = tuple[str, bytes | bytearray | memoryview, int]  # robot, payload, received_ns


def _read_exact(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def _tcp_reader(sock: socket.socket, robot: str, out: queue.Queue[Delivery]) -> None:
    with contextlib.suppress(OSError):
        while True:
            head = _read_exact(sock, _LEN.size)
            if head is None:
                return
            payload = _read_exact(sock, _LEN.unpack(head)[0])
            if payload is None:
                return
            out.put((robot, payload, time.monotonic_ns()))


def _tcp_send(sock: socket.socket, lock: threading.Lock, payload: bytes | bytearray) -> None:
    with lock:
        sock.sendall(_LEN.pack(len(payload)))
        sock.sendall(payload)


# -- the roles ------------------------------------------------------------------------------
def _role_permits(args: argparse.Namespace) -> None:
    from coorp.runtime import LeaderSettings, PermitService, TeamKey

    key = TeamKey.from_hex(os.environ[KEY_ENV])
    settings = LeaderSettings(limit=args.limit, timeslice_ns=round(args.timeslice_s * 1e9))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        service = PermitService(args.robots.split(","), key, settings)
        _host, port = await service.start((args.host, 0))
        print(f"READY {port}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.timeout)
        await service.close()

    asyncio.run(main())


class _Common:
    """What server and worker share: config, key, team, inbox."""

    def __init__(self, args: argparse.Namespace) -> None:
        from coorp.runtime import TeamKey, TeamSettings, join

        self.cfg: dict[str, Any] = json.loads(Path(args.config).read_text())
        self.args = args
        self.coordinated = self.cfg["mode"] == "coorp"
        if getattr(args, "team", None):  # a robot of a real team: its own key, the daemon's permits
            from coorp.learn._robots import join_team

            self.team, self.keys, self.permits = join_team(
                args.team, args.robot, coordinated=self.coordinated
            )
        else:
            self.keys = TeamKey.from_hex(os.environ[KEY_ENV])
            self.permits = self.cfg["permits"] if self.coordinated else None
            settings = TeamSettings(join_timeout_s=5.0)
            self.team = join(self.permits, args.robot, self.keys, settings=settings)
        if self.coordinated and not self.team.wait_mode("coordinated", 10):
            raise ConfigurationError(
                f"{args.robot}: the permit service at {self.permits} is not reachable"
            )
        self.inbox = self.team.listen(f"{args.host}:{getattr(args, 'port', 0) or 0}")
        self.stop = threading.Event()
        # One send at a time, in order (each worker its own stream or connection).
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.futures: list[Future[None]] = []
        self.sent: list[list[Any]] = []  # [peer, kind, version, sha256, nbytes]
        self.received: list[list[Any]] = []
        self.receipts: list[dict[str, int]] = []
        self.timeout = float(self.cfg["timeout_s"])
        self.streams: dict[str, Any] = {}  # peer -> its BulkStream (one per peer)
        self.streams_lock = threading.Lock()
        self.n_streams = 0
        #: Told what happens, one line at a time (the team mode's CLI shows it).
        self.progress: Callable[[str], None] = lambda _line: None

    def bulk_send(self, peer: str, dest: str, payload: bytearray, kind: int, version: int) -> None:
        """Send one sync message to ``peer`` (its inbox address ``dest``) on the mode's
        transport; records the digest and the receipt."""
        self.sent.append([peer, kind, version, digest(payload), len(payload)])
        t0 = time.monotonic_ns()
        if self.coordinated:
            with self.streams_lock:
                if self.cfg["reuse_streams"]:
                    if peer not in self.streams:
                        self.streams[peer] = self.team.bulk(f"sync-{peer}", dest)
                    stream = self.streams[peer]
                else:  # a fresh stream per message: see RuntimeSpec.reuse_streams
                    self.n_streams += 1
                    stream = self.team.bulk(f"sync-{peer}-{self.n_streams}", dest)
            r = stream.send(payload, timeout_s=self.timeout)
            rec = {"ns": r.finished_ns - r.started_ns, "permit_wait_ns": r.permit_wait_ns,
                   "preempted_ns": r.preempted_ns, "preemptions": r.preemptions}  # fmt: skip
        else:
            self.tcp_send(peer, payload)
            rec = {"ns": time.monotonic_ns() - t0}
        self.receipts.append({"kind": kind, "nbytes": len(payload), **rec})

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        raise NotImplementedError

    def submit(self, fn: Callable[[], None]) -> None:
        self.futures.append(self.pool.submit(fn))

    def settle(self) -> None:
        """Wait for every send handed to the pool; raise the first failure."""
        for f in self.futures:
            f.result(timeout=self.timeout)
        self.futures.clear()

    def record_in(self, peer: str, payload: bytes | bytearray | memoryview) -> SyncMessage:
        m = decode(payload)
        self.received.append([peer, m.kind, m.version, digest(payload), len(payload)])
        return m

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.team.close()

    def _messages(self) -> Iterator[Any]:
        """The inbox's messages until this process stops or the inbox closes."""
        from coorp.runtime import RuntimeUsageError

        while not self.stop.is_set():
            try:
                yield self.inbox.recv(timeout=0.2)
            except TimeoutError:
                continue
            except RuntimeUsageError:  # the inbox closed: this process is stopping
                return


class _Server(_Common):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.workers: list[str] = list(self.cfg["workers"])
        self.bulkq: queue.Queue[Delivery] = queue.Queue()
        self.perceptions: list[list[int | str]] = []  # robot, k, sent_ns, received_ns
        self.controls: dict[str, Any] = {}
        self.loops: dict[int, set[str]] = {}
        self.tcp_conns: dict[str, tuple[socket.socket, threading.Lock]] = {}
        self.listener: socket.socket | None = None
        # Loops complete (every worker's perception in): the team mode's warm-up.
        self.completed_loops = 0
        self.warm = threading.Event()
        if not self.coordinated:  # next to a fixed inbox port, the port after it
            port = getattr(args, "port", 0) or 0
            self.listener = socket.create_server((args.host, port + 1 if port else 0))
            self.listener.settimeout(self.timeout)
        tcp_port = 0 if self.listener is None else self.listener.getsockname()[1]
        if getattr(args, "team", None):  # a person started this robot: say where it listens
            print(f"leader: learning inbox at {args.host}:{self.inbox.address[1]}", flush=True)
        else:  # the orchestrator reads the ports from this line
            print(f"READY {self.inbox.address[1]} {tcp_port}", flush=True)
        self.dispatcher = threading.Thread(target=self._dispatch, daemon=True)
        self.dispatcher.start()

    def _dispatch(self) -> None:
        n = len(self.workers)
        ctrl = bytearray(int(self.cfg["control_bytes"]))
        for msg in self._messages():
            if msg.kind == "bulk":
                self.bulkq.put((msg.robot, msg.payload, msg.received_ns))
                continue
            k = int.from_bytes(bytes(msg.payload[:8]), "little")
            self.perceptions.append([msg.robot, k, msg.sent_ns, msg.received_ns])
            got = self.loops.setdefault(k, set())
            got.add(msg.robot)
            if len(got) == n and len(self.controls) == n:
                self.completed_loops += 1
                if self.completed_loops >= WARM_LOOPS:
                    self.warm.set()
                ctrl[:8] = k.to_bytes(8, "little")
                for w in self.workers:  # the inference itself is not modelled (0 ms)
                    self.controls[w].send(bytes(ctrl))
                for old in [j for j in self.loops if j < k - 64]:
                    del self.loops[old]

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        sock, lock = self.tcp_conns[peer]
        _tcp_send(sock, lock, payload)

    def _check_hello(self, robot: str, extra: dict[str, Any]) -> None:
        """A worker started with other settings would merge tensors of another shape or
        learn something else: refuse it, naming what differs."""
        mine = shared_settings(self.cfg)
        theirs = extra.get("settings", {})
        diff = [f"{k} {theirs.get(k)!r} (the leader: {v!r})" for k, v in mine.items()
                if theirs.get(k) != v]  # fmt: skip
        if diff:
            why = (
                f"{robot} runs with other settings than the leader: {'; '.join(diff)}. Start "
                "every robot with the same scenario, --seeds, --modes and learning flags"
            )
            # Tell the worker too (a stop before any model, with the reason), so it does
            # not wait for a model that will never come.
            with contextlib.suppress(Exception):
                stop = encode(STOP, 0, extra=why.encode())
                if self.coordinated:
                    stream = self.team.bulk(f"sync-{robot}-refused", str(extra["inbox"]))
                    stream.send(stop, timeout_s=10)
                else:
                    self.tcp_send(robot, stop)
            raise ConfigurationError(why)

    def _hellos(self) -> dict[str, str]:
        """Every worker's hello: its inbox address (and, on TCP, its connection)."""
        inboxes: dict[str, str] = {}
        try:
            self._collect_hellos(inboxes)
        except (queue.Empty, TimeoutError):
            missing = sorted(set(self.workers) - set(inboxes))
            raise ConfigurationError(
                f"no hello from {', '.join(missing)} within {self.timeout:g} s (is "
                f"`coorp learn` running there, pointed at this leader?)"
            ) from None
        if sorted(inboxes) != sorted(self.workers):
            raise ConfigurationError(f"hellos from {sorted(inboxes)}, expected {self.workers}")
        return inboxes

    def _collect_hellos(self, inboxes: dict[str, str]) -> None:
        if self.listener is not None:
            for _ in self.workers:
                conn, _addr = self.listener.accept()
                conn.settimeout(None)
                head = _read_exact(conn, _LEN.size)
                body = None if head is None else _read_exact(conn, _LEN.unpack(head)[0])
                if body is None:
                    raise ConfigurationError("a worker closed its connection before its hello")
                m = decode(body)
                extra = json.loads(m.extra)
                robot = extra["robot"]
                self.record_in(robot, body)
                self.tcp_conns[robot] = (conn, threading.Lock())
                self._check_hello(robot, extra)
                inboxes[robot] = extra["inbox"]
                threading.Thread(
                    target=_tcp_reader, args=(conn, robot, self.bulkq), daemon=True
                ).start()
        else:
            for _ in self.workers:
                robot, payload, _ns = self.bulkq.get(timeout=self.timeout)
                m = self.record_in(robot, payload)
                if m.kind != HELLO:
                    raise InvariantError(f"expected a hello from {robot}, got kind {m.kind}")
                extra = json.loads(m.extra)
                self._check_hello(robot, extra)
                inboxes[robot] = extra["inbox"]

    def run(self) -> None:
        cfg = self.cfg
        ppo = PPOConfig(**cfg["ppo"])
        layout = Layout(ppo.hidden, ppo.layers)
        pad = int(cfg["air_bytes"])
        asp = cfg["sync"] == "asp"
        n = len(self.workers)
        inboxes = self._hellos()
        period_ms = cfg["period_ns"] / 1e6
        for w in self.workers:
            self.controls[w] = self.team.latency_sensitive(
                f"control-{w}",
                inboxes[w],
                deadline_ms=cfg["deadline_ns"] / 1e6,
                period_ms=period_ms,
            )
        grid = cfg["grid_ns"]
        if grid is None:
            grid = self._announce_grid()
        versions = [layout.init(int(cfg["init_seed"]))]
        times = [0.0]
        stale: list[int] = []
        train: list[float] = []
        samples = 0

        def send(w: str, kind: int, version: int) -> None:
            params = versions[version] if kind == MODEL else None
            msg = encode(kind, version, params, pad_to=pad if kind == MODEL else 0)
            self.submit(lambda: self.bulk_send(w, inboxes[w], msg, kind, version))

        t0 = time.monotonic_ns()
        for w in self.workers:
            send(w, MODEL, 0)
        pending: dict[str, np.ndarray] = {}
        rets: dict[str, float] = {}
        stopped: set[str] = set()
        done = False
        t_end = t0
        limit_v = int(cfg["max_versions"] or 0)
        while len(stopped) < n:
            try:
                robot, payload, _ns = self.bulkq.get(timeout=self.timeout)
            except queue.Empty:
                raise ConfigurationError(
                    f"no update from any worker for {self.timeout:g} s"
                ) from None
            m = self.record_in(robot, payload)
            if m.kind != UPDATE or m.params is None:
                raise InvariantError(f"unexpected message kind {m.kind} from {robot}")
            samples += m.samples
            if done:  # ASP: an update in flight when the run ended
                send(robot, STOP, len(versions) - 1)
                stopped.add(robot)
                continue
            if asp:
                nxt = merge_async(versions[-1], versions[m.version], m.params, n)
                stale.append(len(versions) - 1 - m.version)
                train.append(m.ret)
            else:
                if m.version != len(versions) - 1:
                    raise InvariantError(f"BSP update of version {m.version} from {robot}")
                pending[robot], rets[robot] = m.params, m.ret
                if len(pending) < n:
                    continue
                nxt = merge_mean_delta(
                    versions[-1], versions[-1], [pending[w] for w in self.workers]
                )
                stale.append(0)
                train.append(float(np.mean([rets[w] for w in self.workers])))
                pending.clear()
            versions.append(nxt)
            now = time.monotonic_ns()
            times.append((now - t0) / 1e9)
            self.progress(f"model version {len(versions) - 1} at {times[-1]:.1f} s")
            done = (now - t0) / 1e9 >= cfg["duration_s"] or (
                limit_v > 0 and len(versions) - 1 >= limit_v
            )
            if done:
                t_end = now
            targets = [robot] if asp else self.workers
            for w in targets:
                if done:
                    send(w, STOP, len(versions) - 1)
                    stopped.add(w)
                else:
                    send(w, MODEL, len(versions) - 1)
        self.settle()
        leader_stats: dict[str, Any] = {}
        if self.coordinated and self.permits is not None:
            from coorp.runtime import query_leader_stats

            with contextlib.suppress(Exception):
                self.team.sync_leader(timeout_s=5)
                st = query_leader_stats(self.permits, self.keys, timeout_s=3)
                leader_stats = dict(st.counters)
        self.stop.set()
        self.dispatcher.join(timeout=5)
        np.save(self.args.result + ".npy", np.stack(versions))
        out = {
            "robot": self.args.robot,
            "grid_ns": grid,
            "t0_ns": t0,
            "t_end_ns": t_end,
            "times_s": times,
            "staleness": stale,
            "train_returns": train,
            "samples": samples,
            "perceptions": self.perceptions,
            "sent": self.sent,
            "received": self.received,
            "receipts": self.receipts,
            "leader": leader_stats,
            "team": _jsonable(self.team.stats()),
        }
        Path(self.args.result).write_text(json.dumps(out))

    def _announce_grid(self) -> int:
        """No shared clock: tell every worker the loop grid on this clock, then wait
        until ``WARM_LOOPS`` loops were complete (its time model has seen the flows)."""
        for w, ch in self.controls.items():
            if not ch.ready.wait(self.timeout):
                raise ConfigurationError(f"{w}'s inbox opened no LS session in {self.timeout:g} s")
        self.progress(
            f"every worker said hello; handing out the loop grid, then {WARM_LOOPS} loops"
        )
        grid = time.monotonic_ns() + round((CLOCK_ROUNDS * CLOCK_GAP_S + 0.2) * 1e9)
        msg = bytearray(max(24, int(self.cfg["control_bytes"])))
        msg[:8], msg[8:16] = _U64.pack(CLOCK_K), _U64.pack(grid)
        for r in range(CLOCK_ROUNDS):
            msg[16:24] = _U64.pack(r)
            for ch in self.controls.values():
                ch.send(bytes(msg))
            self.stop.wait(CLOCK_GAP_S)  # rounds apart: one delayed datagram spoils one
        if not self.warm.wait(self.timeout):
            raise ConfigurationError(
                f"{WARM_LOOPS} loops with every worker's perception did not complete in "
                f"{self.timeout:g} s (perceptions from: "
                f"{sorted({str(p[0]) for p in self.perceptions})})"
            )
        return grid

    def close(self) -> None:
        super().close()
        if self.listener is not None:
            self.listener.close()
        for sock, _lock in self.tcp_conns.values():
            with contextlib.suppress(OSError):
                sock.close()


class _WakingQueue(queue.Queue[Delivery]):
    """A queue that also sets ``wake`` on every put (a waiter for something else hears
    that the leader spoke first)."""

    def __init__(self, wake: threading.Event) -> None:
        super().__init__()
        self.wake = wake

    def put(self, item: Delivery, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self.wake.set()


class _Worker(_Common):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        # The leader's clock datagrams: (sent_ns on its clock, received_ns, grid_ns).
        self.clock_in: list[tuple[int, int, int]] = []
        self.clock_first, self.clock_all = threading.Event(), threading.Event()
        # A message from the leader before its clock (a refusal) wakes the clock waiter.
        self.modelq: queue.Queue[Delivery] = _WakingQueue(self.clock_first)
        self.control_in: list[list[int]] = []  # k, sent_ns, received_ns
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()
        threading.Thread(target=self._dispatch, daemon=True).start()

    def _dispatch(self) -> None:
        for msg in self._messages():
            if msg.kind == "bulk":
                self.modelq.put((msg.robot, msg.payload, msg.received_ns))
            else:
                k = int.from_bytes(bytes(msg.payload[:8]), "little")
                if k == CLOCK_K:
                    grid = _U64.unpack_from(msg.payload, 8)[0]
                    self.clock_in.append((msg.sent_ns, msg.received_ns, grid))
                    self.clock_first.set()
                    if len(self.clock_in) >= CLOCK_ROUNDS:
                        self.clock_all.set()
                    continue
                self.control_in.append([k, msg.sent_ns, msg.received_ns])

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        assert self.sock is not None
        _tcp_send(self.sock, self.lock, payload)

    def run(self) -> None:
        cfg, args = self.cfg, self.args
        period = int(cfg["period_ns"])
        ls = self.team.latency_sensitive(
            "perception", args.server, deadline_ms=cfg["deadline_ns"] / 1e6,
            period_ms=period / 1e6,
        )  # fmt: skip
        warm = threading.Event()
        sent = [0]
        sent_at: list[list[int]] = []  # k, sent_ns
        payload = bytearray(int(cfg["perception_bytes"]))

        def periodic(grid: int) -> None:
            k = max(0, -(-(time.monotonic_ns() - grid) // period))
            while not self.stop.is_set():
                self.stop.wait(max(grid + k * period - time.monotonic_ns(), 0) / 1e9)
                if self.stop.is_set():
                    return
                payload[:8] = k.to_bytes(8, "little")
                sent_at.append([k, time.monotonic_ns()])
                ls.send(bytes(payload))
                sent[0] += 1
                if sent[0] == 8:
                    warm.set()
                k += 1

        def start_loop(grid: int) -> threading.Thread:
            t = threading.Thread(target=periodic, args=(grid,), daemon=True)
            t.start()
            return t

        offset: int | None = None
        if cfg["grid_ns"] is not None:  # one clock: the orchestrator's grid
            lt = start_loop(int(cfg["grid_ns"]))
            if not warm.wait(timeout=self.timeout):
                raise ConfigurationError("the perception flow did not start")
        me = {"robot": args.robot, "inbox": f"{args.host}:{self.inbox.address[1]}",
              "settings": shared_settings(cfg)}  # fmt: skip
        hello = encode(HELLO, 0, extra=json.dumps(me).encode())
        if not self.coordinated:
            host, port = args.server_tcp.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=self.timeout)
            self.sock.settimeout(None)
            threading.Thread(
                target=_tcp_reader, args=(self.sock, "server", self.modelq), daemon=True
            ).start()
        self.bulk_send("server", args.server, hello, HELLO, 0)
        if cfg["grid_ns"] is None:  # no shared clock: the leader's grid, mapped to ours
            if not self.clock_first.wait(self.timeout):
                raise ConfigurationError(
                    f"no clock datagram from the leader in {self.timeout:g} s (is its LS "
                    f"control channel reaching {self.inbox.address}?)"
                )
            if not self.clock_in:  # the leader spoke first: a refusal, or out of protocol
                _peer, data, _ns = self.modelq.get_nowait()
                m = self.record_in("server", data)
                if m.kind == STOP and m.extra:
                    raise ConfigurationError(f"the leader refused {args.robot}: {m.extra.decode()}")
                raise InvariantError(f"message kind {m.kind} from the leader before its clock")
            self.clock_all.wait(CLOCK_ROUNDS * CLOCK_GAP_S + 1.0)  # the rest, if they come
            offset = min(recv - sent_ns for sent_ns, recv, _g in self.clock_in)
            self.progress(f"loop grid from the leader (clock offset {offset / 1e6:.3f} ms)")
            lt = start_loop(self.clock_in[-1][2] + offset)
        ppo = PPO(PPOConfig(**cfg["ppo"]), FormationSpec(**cfg["task"]), int(cfg["seed"]))
        pad = int(cfg["air_bytes"])
        compute_ns = 0
        updates = 0
        first_model_ns: int | None = None
        for _ in range(1_000_000):
            try:
                _peer, data, got_ns = self.modelq.get(timeout=self.timeout)
            except queue.Empty:
                raise ConfigurationError(
                    f"no model from the leader for {self.timeout:g} s"
                ) from None
            m = self.record_in("server", data)
            if m.kind == STOP:
                if first_model_ns is None and m.extra:
                    raise ConfigurationError(f"the leader refused {args.robot}: {m.extra.decode()}")
                break
            if m.kind != MODEL or m.params is None:
                raise InvariantError(f"unexpected message kind {m.kind} from the leader")
            if first_model_ns is None:
                first_model_ns = got_ns
            c0 = time.monotonic_ns()
            new, ro = ppo.local_update(m.params)
            compute_ns += time.monotonic_ns() - c0
            up = encode(UPDATE, m.version, new, ret=ro.episode_return, samples=ro.samples,
                        pad_to=pad)  # fmt: skip
            self.bulk_send("server", args.server, up, UPDATE, m.version)
            updates += 1
            self.progress(f"update {updates} sent (trained on model version {m.version})")
        stop_ns = time.monotonic_ns()
        self.stop.set()
        lt.join(timeout=5)
        if self.coordinated:
            self.team.sync_leader(timeout_s=5)
        out = {
            "robot": args.robot,
            "perceptions_sent": sent[0],
            "controls": self.control_in,
            "perceptions": sent_at,
            "clock_offset_ns": offset,
            "clock_samples": len(self.clock_in),
            "learning_ns": [first_model_ns, stop_ns],
            "sent": self.sent,
            "received": self.received,
            "receipts": self.receipts,
            "updates": updates,
            "compute_s": compute_ns / 1e9,
            "ls": dataclasses.asdict(ls.stats),
            "team": _jsonable(self.team.stats()),
        }
        Path(args.result).write_text(json.dumps(out))

    def close(self) -> None:
        super().close()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _role_main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m coorp.learn._runtime")
    sub = p.add_subparsers(dest="role", required=True)
    pm = sub.add_parser("permits")
    pm.add_argument("--host", required=True)
    pm.add_argument("--robots", required=True)
    pm.add_argument("--limit", type=int, default=1)
    pm.add_argument("--timeslice-s", type=float, default=5.0)
    pm.add_argument("--timeout", type=float, default=3600)
    for name in ("server", "worker"):
        q = sub.add_parser(name)
        q.add_argument("--robot", required=True)
        q.add_argument("--host", required=True)
        q.add_argument("--config", required=True)
        q.add_argument("--result", required=True)
        q.add_argument("--team", default="", help="a team file: this robot's key and permits")
        q.add_argument("--port", type=int, default=0, help="the inbox port (0: any)")
        if name == "worker":
            q.add_argument("--server", required=True, help="the leader's inbox host:port")
            q.add_argument("--server-tcp", default="", help="the leader's TCP host:port")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.role == "permits":
        _role_permits(args)
        return
    role: _Common = _Server(args) if args.role == "server" else _Worker(args)
    try:
        role.run()  # type: ignore[attr-defined]
    finally:
        role.close()


# -- the orchestrator -----------------------------------------------------------------------
@dataclass(frozen=True)
class RuntimeSpec:
    net: str = "netns"
    rate_mbit: float = 50.0
    queue_ms: float = 100.0
    #: Shape the leader's downlink too (its own interface), not only the uplink to it.
    downlink: bool = True
    #: ``split`` (uplink and downlink shaped apart) or ``shared`` (one queue for both,
    #: like one WiFi channel); see :mod:`coorp.learn._netns`.
    medium: str = "split"
    #: Stop creating model versions after this many (None: only the duration bounds it).
    max_versions: int | None = None
    #: One bulk stream per peer for every message (True, ``--streams reuse``), or a fresh
    #: stream per message (False, the default). Reusing once stalled on a coorp.runtime
    #: bug (a message's last chunks still pending in the drain tracker when the
    #: confirmation came, so the next message's first poll recorded the idle gap as
    #: their completion time: 1 model version in 30 s); ``DrainTracker.settle`` fixed
    #: it. Measured since (docs/learn.md): both make 8 versions in 30 s; fresh streams
    #: keep the perception p99 lower (6.5 vs 9.9 ms) and stay the default. Idle
    #: connections of old streams are closed by the receiver
    #: (``ReceiverLimits.idle_timeout_s``).
    reuse_streams: bool = False
    #: Bound on any single wait inside a run (a message, a start-up line).
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.net not in NETS:
            raise UsageError(f"--net must be one of {', '.join(NETS)}, got {self.net!r}")
        if not self.rate_mbit > 0:
            raise UsageError(f"--rate-mbit must be positive, got {self.rate_mbit!r}")
        if self.medium not in ("split", "shared"):
            raise UsageError(f"--medium must be split or shared, got {self.medium!r}")
        if self.max_versions is not None and self.max_versions < 1:
            raise UsageError(f"--max-versions must be >= 1, got {self.max_versions!r}")


@dataclass
class RuntimeRun:
    """One run: the learning curve against wall time, the MPC loop's latencies, the
    transfers, and whether every sync arrived intact."""

    curve: LearnCurve
    mode: str
    wall_s: float
    ls: dict[str, Any]
    transfers: dict[str, Any]
    syncs_intact: bool
    syncs_checked: int
    leader: dict[str, Any]
    final_changed: bool


def _ready(p: subprocess.Popen[bytes], timeout: float, log: Path) -> list[str]:
    """The fields of the process's ``READY ...`` line (bounded wait)."""
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    line = buf.split(b"\n", 1)[0].decode(errors="replace")
    if not line.startswith("READY"):
        raise ConfigurationError(
            f"a coorp learn process did not start (exit {p.poll()}): {_tail(log)}"
        )
    return line.split()[1:]


def _tail(log: Path, n: int = 1500) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-n:].strip() or "(no output)"
    return "(no log)"


def _percentiles(vals: Sequence[float]) -> dict[str, float | None]:
    if not vals:
        return {"p50": None, "p99": None, "max": None}
    a = np.asarray(vals, dtype=float)
    return {
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


def _ls_metrics(
    server: dict[str, Any], workers: dict[str, dict[str, Any]], cfg: dict[str, Any]
) -> dict[str, Any]:
    """Loops that started in [t0, t_end]: reaction = last control's arrival − loop
    start; a miss when above the deadline or never completed; perception one-way
    latencies of the same window."""
    period, grid, deadline = int(cfg["period_ns"]), int(cfg["grid_ns"]), int(cfg["deadline_ns"])
    t0, t1 = int(server["t0_ns"]), int(server["t_end_ns"])
    k0 = max(0, -(-(t0 - grid) // period))
    k1 = (t1 - grid) // period
    loops = range(k0, k1 + 1) if k1 >= k0 else range(0)
    arrivals: dict[int, list[int]] = {}
    for res in workers.values():
        seen: dict[int, int] = {}
        for k, _sent, recv in res["controls"]:
            seen.setdefault(int(k), int(recv))
        for k, recv in seen.items():
            arrivals.setdefault(k, []).append(recv)
    n = len(workers)
    reactions: list[float] = []
    missed = 0
    for k in loops:
        got = arrivals.get(k, [])
        if len(got) < n:
            missed += 1
            continue
        r = max(got) - (grid + k * period)
        reactions.append(r / 1e6)
        missed += r > deadline
    lat = [
        (int(recv) - int(sent)) / 1e6
        for _robot, k, sent, recv in server["perceptions"]
        if k0 <= int(k) <= k1
    ]
    return {
        "loops": len(loops),
        "missed": missed,
        "miss_rate": missed / len(loops) if len(loops) else 0.0,
        "reaction_ms": _percentiles(reactions),
        "perception_ms": _percentiles(lat),
        "perceptions": len(lat),
    }


def _check_syncs(server: dict[str, Any], workers: dict[str, dict[str, Any]]) -> tuple[bool, int]:
    """Every message's digest at its sender equals the one at its receiver."""
    ok, count = True, 0
    out_s = {(p, k, v): (d, b) for p, k, v, d, b in server["sent"]}
    in_s = {(p, k, v): (d, b) for p, k, v, d, b in server["received"]}
    for robot, res in workers.items():
        got = {(k, v): (d, b) for _p, k, v, d, b in res["received"]}
        mine = {(k, v): (d, b) for _p, k, v, d, b in res["sent"]}
        for (p, k, v), db in out_s.items():
            if p == robot:
                count += 1
                ok &= got.get((k, v)) == db
        for (k, v), db in mine.items():
            count += 1
            ok &= in_s.get((robot, k, v)) == db
        ok &= len(got) == sum(1 for p, _k, _v in out_s if p == robot)
    return ok, count


def _role_argv() -> list[str]:
    return [sys.executable, "-m", "coorp.learn._runtime"]


#: What every role of one run must agree on (a worker's hello carries them).
_SHARED = (
    "mode",
    "sync",
    "workers",
    "ppo",
    "task",
    "init_seed",
    "air_bytes",
    "duration_s",
    "max_versions",
    "period_ns",
    "deadline_ns",
    "perception_bytes",
    "control_bytes",
)


def shared_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The settings of ``cfg`` every role must share, and the run's seed."""
    return {**{k: cfg[k] for k in _SHARED}, "seed": int(cfg["seed"]) // 1000}


def _runtime_workload(scenario: Scenario, spec: LearnSpec) -> tuple[Any, SyncMode]:
    """The scenario's workload and the sync mode, checked for a run on real sockets."""
    wl = scenario.workload
    if wl is None or not wl.drlc.enabled or not wl.mpc.enabled:
        raise UsageError("the scenario needs [workload.mpc] and [workload.drlc] for --runtime")
    sync = spec.sync or wl.drlc.sync
    if sync is SyncMode.SSP:
        raise UsageError("--sync ssp is simulated only; --runtime supports bsp and asp")
    return wl, sync


def role_config(scenario: Scenario, mode: str, spec: LearnSpec, rt: RuntimeSpec) -> dict[str, Any]:
    """What every role reads (``--config``): the learning, the MPC loop, the limits.
    ``permits`` and ``grid_ns`` stay None unless an orchestrator on one host sets them
    (None: the team file's permit service, and the leader's grid handshake)."""
    wl, sync = _runtime_workload(scenario, spec)
    return {
        "mode": mode,
        "sync": sync.value,
        "workers": list(scenario.workers),
        "ppo": dataclasses.asdict(spec.ppo),
        "task": dataclasses.asdict(spec.task),
        "init_seed": spec.init_seed,
        "air_bytes": spec.air_bytes(),
        "duration_s": spec.duration_s if spec.duration_s is not None else scenario.duration_s,
        "max_versions": rt.max_versions,
        "period_ns": round(wl.mpc.period_us * 1e3),
        "deadline_ns": round(wl.mpc.deadline_us * 1e3),
        "perception_bytes": wl.mpc.perception_bytes,
        "control_bytes": wl.mpc.control_bytes,
        "timeout_s": rt.timeout_s,
        "reuse_streams": rt.reuse_streams,
        "permits": None,
        "grid_ns": None,
    }


def score_versions(
    server: dict[str, Any],
    versions: np.ndarray,
    spec: LearnSpec,
    *,
    mode: str,
    seed: int,
    sync: str,
    duration_s: float,
    violation_rate: float,
) -> LearnCurve:
    """The leader's model versions within ``duration_s``, each scored after the run (the
    simulated path's greedy score from fixed start states)."""
    judge = PPO(spec.ppo, spec.task, seed * 1000 + 1)
    times = [float(t) for t in server["times_s"]]
    keep = [i for i in range(1, len(times)) if times[i] <= duration_s]
    return LearnCurve(
        policy=mode,
        seed=seed,
        sync=sync,
        times_s=[times[i] for i in keep],
        returns=[judge.evaluate(versions[i], spec.eval_episodes) for i in keep],
        staleness=[int(server["staleness"][i - 1]) for i in keep],
        train_returns=[float(server["train_returns"][i - 1]) for i in keep],
        violation_rate=violation_rate,
        epochs=len(keep),
        initial_return=judge.evaluate(versions[0], spec.eval_episodes),
        air_bytes=spec.air_bytes(),
        params=int(versions.shape[1]),
    )


def learn_on_runtime(
    scenario: Scenario,
    mode: str,
    seed: int,
    spec: LearnSpec,
    rt: RuntimeSpec,
    *,
    workdir: Path,
    on_progress: Callable[[str], None] | None = None,
) -> RuntimeRun:
    """Run the scenario's team as processes on real sockets and learn for
    ``spec.duration_s`` wall seconds; score every model version afterwards."""
    from coorp.learn._netns import Topology, netns_unavailable

    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    wl, sync = _runtime_workload(scenario, spec)
    if rt.net == "netns":
        why = netns_unavailable()
        if why is not None:
            raise ConfigurationError(f"--net netns: {why}; use --net loopback instead")
    names = list(scenario.workers)
    duration = spec.duration_s if spec.duration_s is not None else scenario.duration_s
    topo = Topology(len(names), medium=rt.medium)
    hosts = {wl.leader: "ld", **{w: f"w{i + 1}" for i, w in enumerate(names)}}
    netns = rt.net == "netns"

    def host(robot: str) -> str | None:
        return hosts[robot] if netns else None

    def addr(robot: str) -> str:
        return topo.addr(hosts[robot]) if netns else "127.0.0.1"

    run_dir = workdir / f"{mode}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, KEY_ENV: os.urandom(32).hex()}
    opts = scenario.policy.coorp if scenario.policy is not None else None
    cfg = role_config(scenario, mode, spec, rt)
    say = on_progress or (lambda _m: None)
    t_start = time.monotonic()
    try:
        if netns:
            topo.create(rate_mbit=rt.rate_mbit, queue_ms=rt.queue_ms, downlink=rt.downlink)
        permits = None
        if mode == "coorp":
            limit = opts.limit if opts is not None else 1
            timeslice = opts.timeslice_s if opts is not None else 5.0
            log = run_dir / "permits.log"
            permits = topo.popen(host(wl.leader), [*_role_argv(), "permits", "--host",
                                 addr(wl.leader), "--robots", ",".join([wl.leader, *names]),
                                 "--limit", str(limit), "--timeslice-s", str(timeslice)],
                                 env, log)  # fmt: skip
            cfg["permits"] = f"{addr(wl.leader)}:{_ready(permits, rt.timeout_s, log)[0]}"
        cfg["grid_ns"] = time.monotonic_ns()
        procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        for i, robot in enumerate([wl.leader, *names]):
            conf = dict(cfg, seed=seed * 1000 + i)  # worker i (1-based) = the simulated seeds
            (run_dir / f"{robot}.json.in").write_text(json.dumps(conf))
            role = "server" if robot == wl.leader else "worker"
            argv = [*_role_argv(), role, "--robot", robot, "--host", addr(robot),
                    "--config", str(run_dir / f"{robot}.json.in"),
                    "--result", str(run_dir / f"{robot}.json")]  # fmt: skip
            if role == "worker":
                argv += ["--server", cfg["server"], "--server-tcp", cfg["server_tcp"]]
            log = run_dir / f"{robot}.log"
            p = topo.popen(host(robot), argv, env, log)
            procs[robot] = (p, log)
            if role == "server":
                inbox_port, tcp_port = _ready(p, rt.timeout_s, log)
                cfg["server"] = f"{addr(robot)}:{inbox_port}"
                cfg["server_tcp"] = f"{addr(robot)}:{tcp_port}"
        say(f"{mode}, seed {seed}: {len(names)} workers learning for {duration:g} s")
        bound = time.monotonic() + duration + 4 * rt.timeout_s
        for robot, (p, log) in procs.items():
            try:
                code = p.wait(timeout=max(bound - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise ConfigurationError(f"{robot} did not finish: {_tail(log)}") from None
            if code != 0:
                raise ConfigurationError(f"{robot} exited with {code}: {_tail(log)}")
        if permits is not None:
            permits.terminate()
            permits.wait(timeout=10)
        server = json.loads((run_dir / f"{wl.leader}.json").read_text())
        versions = np.load(run_dir / f"{wl.leader}.json.npy")
        workers = {w: json.loads((run_dir / f"{w}.json").read_text()) for w in names}
    finally:
        topo.destroy()
    wall = time.monotonic() - t_start
    intact, checked = _check_syncs(server, workers)
    ls = _ls_metrics(server, workers, cfg)
    # Score the versions in place within the duration (after the run: no CPU taken from it).
    curve = score_versions(
        server, versions, spec, mode=mode, seed=seed, sync=sync.value, duration_s=duration,
        violation_rate=ls["miss_rate"],
    )  # fmt: skip
    recs = [r for res in [server, *workers.values()] for r in res["receipts"]]
    syncs = [r for r in recs if r["kind"] in (MODEL, UPDATE)]
    transfers = {
        "messages": len(syncs),
        "bytes": int(sum(r["nbytes"] for r in syncs)),
        "mean_s": float(np.mean([r["ns"] for r in syncs]) / 1e9) if syncs else 0.0,
        "permit_wait_s": float(sum(r.get("permit_wait_ns", 0) for r in syncs) / 1e9),
        "preemptions": int(sum(r.get("preemptions", 0) for r in syncs)),
        "worker_compute_s": {w: res["compute_s"] for w, res in workers.items()},
    }
    return RuntimeRun(
        curve=curve,
        mode=mode,
        wall_s=wall,
        ls=ls,
        transfers=transfers,
        syncs_intact=intact,
        syncs_checked=checked,
        leader=server["leader"],
        final_changed=bool(len(versions) > 1 and not np.array_equal(versions[-1], versions[0])),
    )


if __name__ == "__main__":
    _role_main()
