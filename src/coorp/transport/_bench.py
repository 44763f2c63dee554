"""The broadcast and round-trip benchmark behind ``coorp bench broadcast``.

Broadcast: one publisher, N subscriber processes; latency is from just before the send
call until the *last* subscriber holds a usable numpy array, measured on
``CLOCK_MONOTONIC`` (one clock for all processes of a machine). The next message is sent
only after every subscriber acknowledged the previous one, so queues never build up.
Round trip: a ping to an echo process and back, per message size. Every implementation
runs in the same process tree, one after the other; ``memcpy`` (one copy of the payload,
two for a round trip) is the physical reference. An implementation that cannot be
imported or fails is reported as such and left out of the results, never estimated.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.transport._bench_impls import IMPLS, make_receiver, make_sender, unavailable

__all__ = ["PUBLISHED", "BenchConfig", "BenchResult", "parse_sizes", "run"]

#: Mean broadcast latency to 4 nodes published in the HPRM thesis (§2.5, Fig. 2.4), ms.
PUBLISHED = {
    "HPRM (published)": {10_000_000: 15.0, 50_000_000: 44.6},
    "ROS 2 Humble (published)": {10_000_000: 1161.0, 50_000_000: 7723.0},
}

_UNITS = {"": 1, "B": 1, "KB": 1000, "KIB": 1024, "MB": 1000**2, "MIB": 1024**2, "GB": 1000**3}


def parse_sizes(text: str) -> list[int]:
    """``"1MB,10MB,64B"`` -> byte counts (MB = 10^6 as in the thesis, MiB = 2^20)."""
    sizes = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", part)
        if not m or m.group(2).upper() not in _UNITS:
            raise UsageError(f"invalid size {part!r}: use e.g. 64B, 12KB, 10MB, 1MiB")
        sizes.append(int(float(m.group(1)) * _UNITS[m.group(2).upper()]))
    if any(s <= 0 for s in sizes):
        raise UsageError("sizes must be positive")
    return sizes


@dataclass
class BenchConfig:
    sizes: list[int]
    subscribers: int = 4
    rtt_sizes: list[int] = field(default_factory=lambda: [64, 12_000])
    impls: Sequence[str] = IMPLS
    iterations: int = 100
    rtt_iterations: int = 300
    max_seconds: float = 20.0
    min_iterations: int = 3


@dataclass
class BenchResult:
    broadcast: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # ms
    rtt: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # us
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        def stats(xs: list[float], unit: str) -> dict[str, float]:
            xs = sorted(xs)
            p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
            return {f"median_{unit}": round(statistics.median(xs), 4), f"p99_{unit}": round(p99, 4)}

        return {
            "broadcast": {
                impl: {str(n): stats(v, "ms") for n, v in by.items()}
                for impl, by in self.broadcast.items()
            },
            "rtt": {
                impl: {str(n): stats(v, "us") for n, v in by.items()}
                for impl, by in self.rtt.items()
            },
        }


def _receiver_main(
    impl: str, run_id: str, channel: str, max_bytes: int, echo: str | None, conn: Any
) -> None:
    tx = make_sender(impl, run_id, echo, 1, max_bytes) if echo else None
    rx = make_receiver(impl, run_id, channel, max_bytes)
    conn.send("ready")
    try:
        while not conn.poll():
            arr = rx.recv(0.2)
            if arr is None:
                continue
            t = time.monotonic_ns()
            if tx is not None:
                tx.send(arr)
            else:
                conn.send((int(arr.reshape(-1)[0]), int(arr.reshape(-1)[-1]), t))
            del arr
    finally:
        rx.close()
        if tx is not None:
            tx.close()


class _Procs:
    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.items: list[tuple[Any, Any]] = []

    def start(self, *args: Any) -> Any:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_receiver_main, args=(*args, child), daemon=True)
        p.start()
        self.items.append((p, parent))
        return parent

    def wait_ready(self, timeout: float) -> None:
        for p, conn in self.items:
            if not conn.poll(timeout) or conn.recv() != "ready":
                raise RuntimeError(f"receiver process {p.pid} did not start")

    def stop(self) -> None:
        for _, conn in self.items:
            with contextlib.suppress(OSError):
                conn.send("stop")
        for p, _ in self.items:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def _marked(payload: np.ndarray, k: int) -> int:
    mark = k % 251
    payload[0] = payload[-1] = mark
    return mark


def _memcpy(cfg: BenchConfig) -> dict[int, list[float]]:
    results: dict[int, list[float]] = {}
    for n in cfg.sizes:
        src, dst = np.ones(n, np.uint8), np.zeros(n, np.uint8)
        np.copyto(dst, src)
        copies = []
        for _ in range(cfg.iterations):
            t0 = time.monotonic_ns()
            np.copyto(dst, src)
            copies.append((time.monotonic_ns() - t0) / 1e6)
        results[n] = copies
    return results


def _broadcast(
    impls: list[str], cfg: BenchConfig, run_id: str, progress: Callable[[str], None]
) -> dict[str, dict[int, list[float]]]:
    """Measure ``impls`` that share one receiver implementation, message by message in
    turn, so that load from elsewhere on the machine hits them alike."""
    max_bytes = max(cfg.sizes)
    results: dict[str, dict[int, list[float]]] = {impl: {} for impl in impls}
    procs = _Procs()
    senders: dict[str, Any] = {}
    try:
        for impl in impls:
            senders[impl] = make_sender(impl, run_id, "bcast", cfg.subscribers, max_bytes)
        conns = [
            procs.start(impls[0], run_id, "bcast", max_bytes, None) for _ in range(cfg.subscribers)
        ]
        procs.wait_ready(60)
        k = 0
        for index, n in enumerate(cfg.sizes):
            payload = np.random.default_rng(n).integers(0, 255, n, dtype=np.uint8)
            # Connections and discovery settle on the first size; later ones only need
            # their first message (new buffer sizes, page faults) kept out of the stats.
            warm_rounds = (3 if index == 0 else 1) * len(impls)
            timeout = 30.0 + 2.0 * n / 1e6
            lats: dict[str, list[float]] = {impl: [] for impl in impls}
            warm = attempts = 0
            start = time.monotonic()
            while min(len(v) for v in lats.values()) < cfg.iterations:
                k += 1
                impl = impls[k % len(impls)]
                mark = _marked(payload, k)
                t0 = senders[impl].send(payload)
                # Warm-up rounds may lose messages (PUB/SUB joins late, DDS discovers
                # late): patience starts short and doubles, so slow transports still pass.
                limit = min(timeout, 2.0 * 2**attempts) if warm < warm_rounds else timeout
                times = []
                for conn in conns:
                    got = None
                    end = time.monotonic() + limit
                    while time.monotonic() < end and conn.poll(max(0.0, end - time.monotonic())):
                        first, last, t = conn.recv()
                        if first == mark and last == mark:
                            got = t
                            break
                    times.append(got)
                if warm < warm_rounds:
                    warm += 1 if None not in times else 0
                    attempts += 1
                    if attempts > 8 * len(impls):
                        raise RuntimeError("receivers never got a complete warm-up round")
                    continue
                if None in times:
                    raise RuntimeError(f"a receiver missed message {k} ({n} bytes)")
                lats[impl].append((max(t for t in times if t is not None) - t0) / 1e6)
                if (
                    time.monotonic() - start > cfg.max_seconds
                    and min(len(v) for v in lats.values()) >= cfg.min_iterations
                ):
                    break
            for impl, lat in lats.items():
                results[impl][n] = lat
                progress(
                    f"{impl} {n} B: {len(lat)} messages, median {statistics.median(lat):.3f} ms"
                )
    finally:
        procs.stop()
        for tx in senders.values():
            tx.close()
    return results


def _rtt(
    impl: str, cfg: BenchConfig, run_id: str, progress: Callable[[str], None]
) -> dict[int, list[float]]:
    results: dict[int, list[float]] = {}
    max_bytes = max(cfg.rtt_sizes)
    if impl == "memcpy":
        for n in cfg.rtt_sizes:
            a, b = np.ones(n, np.uint8), np.zeros(n, np.uint8)
            copies = []
            for _ in range(cfg.rtt_iterations):
                t0 = time.monotonic_ns()
                np.copyto(b, a)
                np.copyto(a, b)
                copies.append((time.monotonic_ns() - t0) / 1e3)
            results[n] = copies
        return results
    procs = _Procs()
    tx = make_sender(impl, run_id, "ping", 1, max_bytes)
    rx = None
    try:
        procs.start(impl, run_id, "ping", max_bytes, "pong")
        procs.wait_ready(60)
        rx = make_receiver(impl, run_id, "pong", max_bytes)
        k = 0
        for n in cfg.rtt_sizes:
            payload = np.ones(n, np.uint8)
            lat: list[float] = []
            misses = 0
            start = time.monotonic()
            while len(lat) < cfg.rtt_iterations + 5:
                k += 1
                mark = _marked(payload, k)
                t0 = tx.send(payload)
                end = time.monotonic() + (1.0 if len(lat) < 5 else 30.0)
                got = None
                while got is None and time.monotonic() < end:
                    arr = rx.recv(max(0.0, end - time.monotonic()))
                    if arr is not None and int(arr.reshape(-1)[0]) == mark:
                        got = time.monotonic_ns()
                    del arr
                if got is None:
                    misses += 1
                    if misses > 20 or len(lat) >= 5:
                        raise RuntimeError(f"echo lost message {k} ({n} bytes)")
                    continue
                lat.append((got - t0) / 1e3)
                if time.monotonic() - start > cfg.max_seconds and len(lat) > 10:
                    break
            results[n] = lat[5:]  # the first round trips warm caches and connections
            progress(f"{impl} rtt {n} B: median {statistics.median(results[n]):.1f} us")
    finally:
        procs.stop()
        if rx is not None:
            rx.close()
        tx.close()
    return results


def run(cfg: BenchConfig, progress: Callable[[str], None] = lambda _m: None) -> BenchResult:
    """Run every implementation in ``cfg.impls`` plus ``memcpy``; skip what cannot run."""
    result = BenchResult()
    run_id = f"{os.getpid()}"
    result.broadcast["memcpy"] = _memcpy(cfg)
    if cfg.rtt_sizes:
        result.rtt["memcpy"] = _rtt("memcpy", cfg, run_id, progress)
    # coorp and coorp_copy share their receivers and are measured interleaved.
    groups: list[list[str]] = []
    for impl in cfg.impls:
        if impl == "coorp_copy" and ["coorp"] in groups:
            groups[groups.index(["coorp"])].append(impl)
        elif impl == "coorp" and ["coorp_copy"] in groups:
            groups[groups.index(["coorp_copy"])].insert(0, impl)
        else:
            groups.append([impl])
    for group in groups:
        reason = unavailable(group[0])
        if reason is not None:
            for impl in group:
                result.skipped[impl] = reason
            progress(f"{', '.join(group)}: skipped ({reason})")
            continue
        try:
            result.broadcast.update(_broadcast(group, cfg, run_id, progress))
        except Exception as exc:  # a baseline failing must not sink the whole run
            for impl in group:
                result.skipped[impl] = f"failed: {type(exc).__name__}: {exc}"
            progress(f"{', '.join(group)}: failed ({exc})")
            continue
        rtt_impl = "coorp" if group[0] == "coorp_copy" else group[0]
        if cfg.rtt_sizes and rtt_impl not in result.rtt:
            try:
                result.rtt[rtt_impl] = _rtt(rtt_impl, cfg, run_id, progress)
            except Exception as exc:
                result.skipped[f"{rtt_impl} (rtt)"] = f"failed: {type(exc).__name__}: {exc}"
                progress(f"{rtt_impl} rtt: failed ({exc})")
    return result
