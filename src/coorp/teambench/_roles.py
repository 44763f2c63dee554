"""The programs ``coorp bench team`` runs inside its namespaces.

``python -m coorp.teambench._roles leader|robot --carrier NAME ...``: the leader echoes
every ping back to its robot; a robot sends pings when told and measures round trips on
its own clock. Commands arrive as JSON lines on stdin, answers go out as ``READY``/
``RESULT {json}`` lines on stdout. A process ends when stdin closes (its runner is gone),
on ``{"cmd": "quit"}``, or after ``--timeout`` seconds, whatever happens first.

The carriers are :mod:`coorp.teambench._transports`. A ping is ``u64 seq`` + padding
to S bytes; the echo is the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import struct
import sys
import threading
import time
from typing import Any

from coorp.teambench._transports import TRANSPORTS, Ctx

__all__ = ["main"]

BULK_PORT = 7700
_SEQ = struct.Struct("!Q")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


# -- bulk -----------------------------------------------------------------------------------
class _BulkSink:
    """The leader's plain-TCP bulk sink: counts and discards."""

    def __init__(self, addr: str) -> None:
        self.bytes = 0
        self.lsock = socket.create_server((addr, BULK_PORT), backlog=64)
        self.lsock.settimeout(0.2)
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.lsock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        buf = bytearray(1 << 16)
        conn.settimeout(0.5)
        with conn:
            while not self.stop.is_set():
                try:
                    n = conn.recv_into(buf)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if n == 0:
                    return
                self.bytes += n


class _BulkSender:
    """A robot's bulk load while a cell runs: plain TCP (uncoordinated) or a coordinated
    coorp.runtime bulk stream, in messages of ``message_bytes``."""

    def __init__(self, transport: Any, ctx: Ctx) -> None:
        self.transport, self.ctx = transport, ctx
        self.on = threading.Event()
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []

    def start(self, mode: str, message_bytes: int, timeout_s: float) -> None:
        self.on.set()
        self.thread = threading.Thread(target=self._run, args=(mode, message_bytes, timeout_s),
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def _run(self, mode: str, message_bytes: int, timeout_s: float) -> None:
        try:
            if mode == "tcp":
                if self.sock is None:
                    self.sock = socket.create_connection((self.ctx.leader, BULK_PORT), timeout=5)
                    self.sock.settimeout(0.5)
                chunk = b"\0" * 65536
                for _ in range(10**7):
                    if not self.on.is_set():
                        return
                    with contextlib.suppress(TimeoutError):
                        self.sock.sendall(chunk)
            elif mode == "coorp":
                stream = self.transport.bulk_stream()
                data = os.urandom(message_bytes)
                for _ in range(10**6):
                    if not self.on.is_set():
                        return
                    stream.send(data, timeout_s=timeout_s)
        except Exception as exc:  # reported in RESULT, the cell goes on
            self.errors.append(f"bulk {mode}: {type(exc).__name__}: {exc}")

    def stop(self, timeout_s: float) -> None:
        self.on.clear()
        if self.thread is not None:
            self.thread.join(timeout_s)
            if self.thread.is_alive():
                self.errors.append(f"bulk sender still busy {timeout_s:g} s after the cell")
            self.thread = None


# -- roles ----------------------------------------------------------------------------------
def _counters(t: Any) -> dict[str, int]:
    """The carrier's own loss counters (``_Coorp.counters``); {} for the others."""
    fn = getattr(t, "counters", None)
    return fn() if fn is not None else {}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()}


def _out(kind: str, data: Any = None) -> None:
    sys.stdout.write(kind + ("" if data is None else " " + json.dumps(data)) + "\n")
    sys.stdout.flush()


def _commands(timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    for line in sys.stdin:
        if time.monotonic() > deadline:
            return
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            return
        yield cmd


def leader(args: argparse.Namespace) -> None:
    ctx = Ctx(args)
    t = TRANSPORTS[args.carrier](ctx)
    t.serve()
    sink = _BulkSink(ctx.addr)

    def bulk_bytes() -> int:
        """Bulk bytes received so far, as they arrive (not per finished message)."""
        progress = getattr(t, "bulk_progress", None)
        return sink.bytes + (progress() if progress is not None else getattr(t, "bulk_bytes", 0))

    window: dict[str, Any] = {"bytes": None}

    def measure_window(t0_ns: int, t1_ns: int) -> None:
        # Bytes that arrived while the robots' pings ran: every carrier and bulk mode
        # timed over the same instants (not over the cell's start and stop phases).
        try:
            time.sleep(max(t0_ns - time.monotonic_ns(), 0) / 1e9)
            b0 = bulk_bytes()
            time.sleep(max(t1_ns - time.monotonic_ns(), 0) / 1e9)
            window["bytes"] = bulk_bytes() - b0
        except Exception as exc:
            window["error"] = f"{type(exc).__name__}: {exc}"

    _out("READY")
    for cmd in _commands(args.timeout):
        if cmd["cmd"] == "stats":
            measuring = window.get("thread")
            if measuring is not None:
                # The robots may report before the window's last instant: wait for it.
                measuring.join(timeout=10)
            _out("RESULT", {"cpu_s": _cpu(), "bulk_bytes": bulk_bytes(),
                            "window_bytes": window["bytes"], "window_error": window.get("error"),
                            "counters": _counters(t)})  # fmt: skip
        elif cmd["cmd"] == "window":
            window.update(bytes=None, error=None)
            window["thread"] = threading.Thread(
                target=measure_window, args=(int(cmd["t0_ns"]), int(cmd["t1_ns"])), daemon=True
            )
            window["thread"].start()
    sink.stop.set()
    t.close()


class _Pinger:
    def __init__(self, t: Any) -> None:
        self.t = t
        self.seq = 0
        self.sent: dict[int, int] = {}
        self.rtt: list[int] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.expect = -1

    def on_echo(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if len(data) < _SEQ.size:
            return
        (seq,) = _SEQ.unpack_from(data)
        with self.lock:
            t0 = self.sent.pop(seq, None)
            if t0 is not None:
                self.rtt.append(now - t0)
                if len(self.rtt) == self.expect:
                    self.done.set()

    def ping(self, size: int, rate_hz: float) -> None:
        self.seq += 1
        payload = _SEQ.pack(self.seq) + bytes(size - _SEQ.size)
        with self.lock:
            self.sent[self.seq] = time.monotonic_ns()
        self.t.send(payload, rate_hz)


def robot(args: argparse.Namespace) -> None:
    ctx = Ctx(args)
    t = TRANSPORTS[args.carrier](ctx)
    p = _Pinger(t)
    t.connect(p.on_echo)
    bulk = _BulkSender(t, ctx)
    rng = random.Random(f"{args.seed}:{ctx.name}")
    for cmd in _commands(args.timeout):
        if cmd["cmd"] == "hello":
            # Until one echo is back (discovery, connections): every 50 ms, bounded.
            ok = False
            for _ in range(int(cmd["timeout_s"] / 0.05)):
                p.ping(64, 20.0)
                time.sleep(0.05)
                with p.lock:
                    ok, p.rtt, p.sent = bool(p.rtt), [], {}
                if ok:
                    break
            _out("RESULT", {"ok": ok})
        elif cmd["cmd"] == "run":
            _out("RESULT", _run_cell(p, bulk, rng, cmd))


def _run_cell(p: _Pinger, bulk: _BulkSender, rng: random.Random, cmd: dict[str, Any]) -> Any:
    rate, size = float(cmd["rate_hz"]), int(cmd["size"])
    period = round(1e9 / rate)
    n = max(1, round(cmd["duration_s"] * rate))
    with p.lock:
        p.sent, p.rtt, p.expect = {}, [], n
        p.done.clear()
    c0, w0, k0 = _cpu(), time.monotonic(), _counters(p.t)
    bulk.errors = []
    if cmd["bulk"] != "none":
        bulk.start(cmd["bulk"], int(cmd["bulk_message_bytes"]), float(cmd["bulk_timeout_s"]))
    start = int(cmd["start_ns"]) + rng.randrange(period)
    for k in range(n):
        delay = (start + k * period - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        p.ping(size, rate)
    p.done.wait(float(cmd["drain_s"]))
    if cmd["bulk"] != "none":
        bulk.stop(float(cmd["bulk_timeout_s"]))
    with p.lock:
        rtt, p.expect = list(p.rtt), -1
    return {"sent": n, "rtt_ns": rtt, "cpu_s": _cpu() - c0, "wall_s": time.monotonic() - w0,
            "errors": bulk.errors, "counters": _delta(_counters(p.t), k0)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="coorp.teambench._roles")
    ap.add_argument("role", choices=["leader", "robot"])
    ap.add_argument("--carrier", required=True, choices=sorted(TRANSPORTS))
    ap.add_argument("--name", required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--leader", required=True)
    ap.add_argument("--robots", default="")
    ap.add_argument("--key-hex", required=True)
    ap.add_argument("--bound-ms", type=float, default=33.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)

    # Bounded whatever happens: a watchdog ends the process after --timeout.
    def watchdog() -> None:
        time.sleep(args.timeout)
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    (leader if args.role == "leader" else robot)(args)
    sys.stdout.flush()
    os._exit(0)  # middleware threads (DDS, Zenoh) must not keep the process alive


if __name__ == "__main__":
    main()
