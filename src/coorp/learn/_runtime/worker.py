"""A worker's role: the periodic perception, the controls coming back, and PPO on every
model the leader sends (an update back for each, until a stop).

Without a shared clock the worker first maps the leader's loop grid to its own clock
with the smallest (arrival − sent) of the leader's clock datagrams.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import queue
import socket
import threading
import time

from coorp._errors import ConfigurationError, InvariantError
from coorp.learn._ppo import PPO
from coorp.learn._runtime import tcp
from coorp.learn._runtime.results import ControlIn, PerceptionOut, WorkerResult, write_result
from coorp.learn._runtime.role import Role, jsonable
from coorp.learn._runtime.wire import (
    CLOCK_GAP_S,
    CLOCK_K,
    CLOCK_ROUNDS,
    Hello,
    Model,
    Stop,
    Update,
    clock_grid,
    encode,
    kind_of,
    loop_of,
    set_loop,
)

__all__ = ["Worker"]


class _WakingQueue(queue.Queue[tcp.Delivery]):
    """A queue that also sets ``wake`` on every put (a waiter for something else hears
    that the leader spoke first)."""

    def __init__(self, wake: threading.Event) -> None:
        super().__init__()
        self.wake = wake

    def put(self, item: tcp.Delivery, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self.wake.set()


class Worker(Role):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        # The leader's clock datagrams: (sent_ns on its clock, received_ns, grid_ns).
        self.clock_in: list[tuple[int, int, int]] = []
        self.clock_first, self.clock_all = threading.Event(), threading.Event()
        # A message from the leader before its clock (a refusal) wakes the clock waiter.
        self.modelq: queue.Queue[tcp.Delivery] = _WakingQueue(self.clock_first)
        self.control_in: list[ControlIn] = []
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()
        threading.Thread(target=self._dispatch, daemon=True).start()

    def _dispatch(self) -> None:
        for msg in self.messages():
            if msg.kind == "bulk":
                self.modelq.put((msg.robot, msg.payload, msg.received_ns))
            else:
                k = loop_of(msg.payload)
                if k == CLOCK_K:
                    self.clock_in.append((msg.sent_ns, msg.received_ns, clock_grid(msg.payload)))
                    self.clock_first.set()
                    if len(self.clock_in) >= CLOCK_ROUNDS:
                        self.clock_all.set()
                    continue
                self.control_in.append(ControlIn(k, msg.sent_ns, msg.received_ns))

    def tcp_send(self, peer: str, payload: bytearray) -> None:
        assert self.sock is not None
        tcp.send_frame(self.sock, self.lock, payload)

    def run(self) -> None:
        cfg, args = self.cfg, self.args
        period = int(cfg.period_ns)
        ls = self.team.latency_sensitive(
            "perception", args.server, deadline_ms=cfg.deadline_ns / 1e6,
            period_ms=period / 1e6,
        )  # fmt: skip
        warm = threading.Event()
        sent = [0]
        sent_at: list[PerceptionOut] = []
        payload = bytearray(int(cfg.perception_bytes))

        def periodic(grid: int) -> None:
            k = max(0, -(-(time.monotonic_ns() - grid) // period))
            while not self.stop.is_set():
                self.stop.wait(max(grid + k * period - time.monotonic_ns(), 0) / 1e9)
                if self.stop.is_set():
                    return
                set_loop(payload, k)
                sent_at.append(PerceptionOut(k, time.monotonic_ns()))
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
        if cfg.grid_ns is not None:  # one clock: the orchestrator's grid
            lt = start_loop(int(cfg.grid_ns))
            if not warm.wait(timeout=self.timeout):
                raise ConfigurationError("the perception flow did not start")
        hello = Hello(
            robot=args.robot, inbox=f"{args.host}:{self.inbox.address[1]}", settings=cfg.shared()
        )
        if not self.coordinated:
            host, port = args.server_tcp.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=self.timeout)
            self.sock.settimeout(None)
            threading.Thread(
                target=tcp.reader, args=(self.sock, "server", self.modelq), daemon=True
            ).start()
        self.bulk_send("server", args.server, encode(hello), hello)
        if cfg.grid_ns is None:  # no shared clock: the leader's grid, mapped to ours
            if not self.clock_first.wait(self.timeout):
                raise ConfigurationError(
                    f"no clock datagram from the leader in {self.timeout:g} s (is its LS "
                    f"control channel reaching {self.inbox.address}?)"
                )
            if not self.clock_in:  # the leader spoke first: a refusal, or out of protocol
                _peer, data, _ns = self.modelq.get_nowait()
                m = self.record_in("server", data).msg
                if isinstance(m, Stop) and m.reason:
                    raise ConfigurationError(f"the leader refused {args.robot}: {m.reason}")
                raise InvariantError(f"a {kind_of(m)} message from the leader before its clock")
            self.clock_all.wait(CLOCK_ROUNDS * CLOCK_GAP_S + 1.0)  # the rest, if they come
            offset = min(recv - sent_ns for sent_ns, recv, _g in self.clock_in)
            self.progress(f"loop grid from the leader (clock offset {offset / 1e6:.3f} ms)")
            lt = start_loop(self.clock_in[-1][2] + offset)
        ppo = PPO(cfg.ppo, cfg.task, int(cfg.seed))
        pad = int(cfg.air_bytes)
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
            m, params = self.record_in("server", data)
            if isinstance(m, Stop):
                if first_model_ns is None and m.reason:
                    raise ConfigurationError(f"the leader refused {args.robot}: {m.reason}")
                break
            if not isinstance(m, Model) or params is None:
                raise InvariantError(f"unexpected message kind {kind_of(m)} from the leader")
            if first_model_ns is None:
                first_model_ns = got_ns
            c0 = time.monotonic_ns()
            new, ro = ppo.local_update(params)
            compute_ns += time.monotonic_ns() - c0
            up = Update(m.version, ret=ro.episode_return, samples=ro.samples)
            self.bulk_send("server", args.server, encode(up, new, pad_to=pad), up)
            updates += 1
            self.progress(f"update {updates} sent (trained on model version {m.version})")
        stop_ns = time.monotonic_ns()
        self.stop.set()
        lt.join(timeout=5)
        if self.coordinated:
            self.team.sync_leader(timeout_s=5)
        write_result(
            args.result,
            WorkerResult(
                robot=args.robot, perceptions_sent=sent[0], controls=self.control_in,
                perceptions=sent_at, clock_offset_ns=offset, clock_samples=len(self.clock_in),
                learning_ns=(first_model_ns, stop_ns), sent=self.sent, received=self.received,
                receipts=self.receipts, updates=updates, compute_s=compute_ns / 1e9,
                ls=dataclasses.asdict(ls.stats), team=jsonable(self.team.stats()),
            ),
        )  # fmt: skip

    def close(self) -> None:
        super().close()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
