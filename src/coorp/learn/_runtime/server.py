"""The leader's role: the parameter server and the MPC loop's controls.

It collects every worker's hello (refusing one started with other settings), broadcasts
model ``v``, merges the updates (BSP: in worker order once all are in; ASP: each as it
arrives) and answers every loop whose perceptions are all in with one control per
worker. Without a shared clock it first hands out the loop grid (``CLOCK_ROUNDS``
datagrams) and waits for ``WARM_LOOPS`` complete loops.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import threading
import time
from typing import Any

import numpy as np

from coorp._errors import ConfigurationError, InvariantError
from coorp.learn._ppo import Layout
from coorp.learn._runtime import tcp
from coorp.learn._runtime.results import PerceptionIn, ServerResult, write_result
from coorp.learn._runtime.role import Role, jsonable
from coorp.learn._runtime.wire import (
    CLOCK_GAP_S,
    CLOCK_ROUNDS,
    WARM_LOOPS,
    Hello,
    Model,
    Stop,
    SyncMessage,
    Update,
    clock_datagram,
    decode,
    encode,
    kind_of,
    loop_of,
    set_loop,
)
from coorp.learn._sync import merge_async, merge_mean_delta
from coorp.scenario import SyncMode

__all__ = ["Server"]


class Server(Role):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.workers: list[str] = list(self.cfg.workers)
        self.bulkq: queue.Queue[tcp.Delivery] = queue.Queue()
        self.perceptions: list[PerceptionIn] = []
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
        ctrl = bytearray(int(self.cfg.control_bytes))
        for msg in self.messages():
            if msg.kind == "bulk":
                self.bulkq.put((msg.robot, msg.payload, msg.received_ns))
                continue
            k = loop_of(msg.payload)
            self.perceptions.append(PerceptionIn(msg.robot, k, msg.sent_ns, msg.received_ns))
            got = self.loops.setdefault(k, set())
            got.add(msg.robot)
            if len(got) == n and len(self.controls) == n:
                self.completed_loops += 1
                if self.completed_loops >= WARM_LOOPS:
                    self.warm.set()
                set_loop(ctrl, k)
                for w in self.workers:  # the inference itself is not modelled (0 ms)
                    self.controls[w].send(bytes(ctrl))
                for old in [j for j in self.loops if j < k - 64]:
                    del self.loops[old]

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        sock, lock = self.tcp_conns[peer]
        tcp.send_frame(sock, lock, payload)

    def _check_hello(self, robot: str, hello: Hello) -> None:
        """A worker started with other settings would merge tensors of another shape or
        learn something else: refuse it, naming what differs."""
        diff = [
            f"{k} {theirs!r} (the leader: {mine!r})"
            for k, mine, theirs in self.cfg.shared().differences(hello.settings)
        ]
        if diff:
            why = (
                f"{robot} runs with other settings than the leader: {'; '.join(diff)}. Start "
                "every robot with the same scenario, --seeds, --modes and learning flags"
            )
            # Tell the worker too (a stop before any model, with the reason), so it does
            # not wait for a model that will never come.
            with contextlib.suppress(Exception):
                stop = encode(Stop(0, reason=why))
                if self.coordinated:
                    stream = self.team.bulk(f"sync-{robot}-refused", hello.inbox)
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
                body = tcp.read_frame(conn)
                if body is None:
                    raise ConfigurationError("a worker closed its connection before its hello")
                hello = _hello(decode(body).msg, "a worker")
                self.record_in(hello.robot, body)
                self.tcp_conns[hello.robot] = (conn, threading.Lock())
                self._check_hello(hello.robot, hello)
                inboxes[hello.robot] = hello.inbox
                threading.Thread(
                    target=tcp.reader, args=(conn, hello.robot, self.bulkq), daemon=True
                ).start()
        else:
            for _ in self.workers:
                robot, payload, _ns = self.bulkq.get(timeout=self.timeout)
                hello = _hello(self.record_in(robot, payload).msg, robot)
                self._check_hello(robot, hello)
                inboxes[robot] = hello.inbox

    def run(self) -> None:
        cfg = self.cfg
        layout = Layout(cfg.ppo.hidden, cfg.ppo.layers)
        pad = int(cfg.air_bytes)
        asp = cfg.sync is SyncMode.ASP
        n = len(self.workers)
        inboxes = self._hellos()
        period_ms = cfg.period_ns / 1e6
        for w in self.workers:
            self.controls[w] = self.team.latency_sensitive(
                f"control-{w}",
                inboxes[w],
                deadline_ms=cfg.deadline_ns / 1e6,
                period_ms=period_ms,
            )
        grid = cfg.grid_ns
        if grid is None:
            grid = self._announce_grid()
        versions = [layout.init(int(cfg.init_seed))]
        times = [0.0]
        stale: list[int] = []
        train: list[float] = []
        samples = 0

        def send(w: str, msg: Model | Stop) -> None:
            if isinstance(msg, Model):
                data = encode(msg, versions[msg.version], pad_to=pad)
            else:
                data = encode(msg)
            self.submit(w, lambda: self.bulk_send(w, inboxes[w], data, msg))

        t0 = time.monotonic_ns()
        for w in self.workers:
            send(w, Model(0))
        pending: dict[str, np.ndarray] = {}
        rets: dict[str, float] = {}
        stopped: set[str] = set()
        done = False
        t_end = t0
        limit_v = int(cfg.max_versions or 0)
        while len(stopped) < n:
            try:
                robot, payload, _ns = self.bulkq.get(timeout=self.timeout)
            except queue.Empty:
                raise ConfigurationError(
                    f"no update from any worker for {self.timeout:g} s"
                ) from None
            m, params = self.record_in(robot, payload)
            if not isinstance(m, Update) or params is None:
                raise InvariantError(f"unexpected message kind {kind_of(m)} from {robot}")
            samples += m.samples
            if done:  # ASP: an update in flight when the run ended
                send(robot, Stop(len(versions) - 1))
                stopped.add(robot)
                continue
            if asp:
                nxt = merge_async(versions[-1], versions[m.version], params, n)
                stale.append(len(versions) - 1 - m.version)
                train.append(m.ret)
            else:
                if m.version != len(versions) - 1:
                    raise InvariantError(f"BSP update of version {m.version} from {robot}")
                pending[robot], rets[robot] = params, m.ret
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
            done = (now - t0) / 1e9 >= cfg.duration_s or (
                limit_v > 0 and len(versions) - 1 >= limit_v
            )
            if done:
                t_end = now
            targets = [robot] if asp else self.workers
            for w in targets:
                if done:
                    send(w, Stop(len(versions) - 1))
                    stopped.add(w)
                else:
                    send(w, Model(len(versions) - 1))
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
        write_result(
            self.args.result,
            ServerResult(
                robot=self.args.robot, grid_ns=grid, t0_ns=t0, t_end_ns=t_end, times_s=times,
                staleness=stale, train_returns=train, samples=samples,
                perceptions=self.perceptions, sent=self.sent, received=self.received,
                receipts=self.receipts, leader=leader_stats, team=jsonable(self.team.stats()),
            ),
        )  # fmt: skip

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
        for r in range(CLOCK_ROUNDS):
            msg = clock_datagram(int(self.cfg.control_bytes), grid, r)
            for ch in self.controls.values():
                ch.send(msg)
            self.stop.wait(CLOCK_GAP_S)  # rounds apart: one delayed datagram spoils one
        if not self.warm.wait(self.timeout):
            raise ConfigurationError(
                f"{WARM_LOOPS} loops with every worker's perception did not complete in "
                f"{self.timeout:g} s (perceptions from: "
                f"{sorted({p.robot for p in self.perceptions})})"
            )
        return grid

    def close(self) -> None:
        super().close()
        if self.listener is not None:
            self.listener.close()
        for sock, _lock in self.tcp_conns.values():
            with contextlib.suppress(OSError):
                sock.close()


def _hello(msg: SyncMessage, sender: str) -> Hello:
    if not isinstance(msg, Hello):
        raise InvariantError(f"expected a hello from {sender}, got a {kind_of(msg)} message")
    return msg
