"""The broadcast and round-trip benchmark behind ``coorp bench broadcast``.

Broadcast: one publisher, N subscriber processes, in two *consume* modes:

* ``view`` -- latency until the *last* subscriber holds a usable numpy array;
* ``checksum`` -- until the last subscriber has read every byte and computed a checksum
  (:func:`checksum`), which the harness verifies against the payload's.

Every implementation is timed from the same instant, before any producer work (filling
the loan, serializing, copying into a segment), on ``CLOCK_MONOTONIC`` (one clock for all
processes of a machine); the producer's own cost (until its send call returns) is
reported beside it. The next message is sent only after every subscriber acknowledged
the previous one, so queues never build up; the two modes alternate message by message.
References: ``memcpy`` (one copy of the payload), ``memcpy_x4`` (four copies, one per
subscriber, in one process) and, in ``checksum`` mode, ``private_copy`` (each subscriber
checksums its own in-memory copy: the physical limit of reading the bytes). Round trip:
a ping to an echo process and back, per message size. An implementation that cannot be
imported or fails is reported as such and left out of the results, never estimated.

Socket files go to a private directory (``run_dir``) removed on every exit path.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import re
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.transport._bench_impls import (
    IMPLS,
    bench_payload,
    make_receiver,
    make_sender,
    run_dir,
    unavailable,
)

__all__ = ["CONSUME", "PUBLISHED", "BenchConfig", "BenchResult", "checksum", "parse_sizes", "run"]

#: The consume modes, in the order they are reported.
CONSUME = ("view", "checksum")

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
    consume: Sequence[str] = CONSUME


def _stats(xs: list[float], unit: str) -> dict[str, float]:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    return {f"median_{unit}": round(statistics.median(xs), 4), f"p99_{unit}": round(p99, 4)}


@dataclass
class BenchResult:
    #: mode -> impl -> size -> latencies (ms)
    broadcast: dict[str, dict[str, dict[int, list[float]]]] = field(default_factory=dict)
    #: mode -> impl -> size -> producer cost (ms): from the common instant until send returns
    producer: dict[str, dict[str, dict[int, list[float]]]] = field(default_factory=dict)
    rtt: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # us
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        def row(mode: str, impl: str, by: dict[int, list[float]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for n, v in by.items():
                out[str(n)] = _stats(v, "ms")
                prod = self.producer.get(mode, {}).get(impl, {}).get(n)
                if prod:
                    out[str(n)]["producer_median_ms"] = round(statistics.median(prod), 4)
            return out

        return {
            "broadcast": {
                mode: {impl: row(mode, impl, by) for impl, by in impls.items()}
                for mode, impls in self.broadcast.items()
            },
            "rtt": {
                impl: {str(n): _stats(v, "us") for n, v in by.items()}
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
            if tx is not None:
                tx.send(arr)
            else:
                flat = arr.reshape(-1)
                first, last = int(flat[0]), int(flat[-1])
                # Odd marks ask for every byte to be read (see _mark).
                total = checksum(arr) if first % 2 else None
                t = time.monotonic_ns()
                conn.send((first, last, t, total))
                del flat
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


def checksum(arr: np.ndarray) -> int:
    """A checksum that reads every byte: the wrapping sum of the little-endian 64-bit
    words, plus the trailing bytes."""
    b = arr.reshape(-1).view(np.uint8)
    whole = b.nbytes // 8 * 8
    total = int(b[:whole].view("<u8").sum(dtype=np.uint64)) if whole else 0
    return (total + int(b[whole:].sum(dtype=np.uint64))) % (1 << 64)


def _marked(payload: np.ndarray, k: int, mode: str = "view") -> int:
    """Mark message ``k`` in its first and last byte; odd marks mean ``checksum``."""
    mark = 2 * (k % 125) + (1 if mode == "checksum" else 0)
    payload[0] = payload[-1] = mark
    return mark


def _memcpy(cfg: BenchConfig, copies: int) -> dict[int, list[float]]:
    """``copies`` copies of the payload into as many destinations (one per subscriber)."""
    results: dict[int, list[float]] = {}
    for n in cfg.sizes:
        src = np.ones(n, np.uint8)
        dsts = [np.zeros(n, np.uint8) for _ in range(copies)]
        for dst in dsts:
            np.copyto(dst, src)
        times = []
        for _ in range(cfg.iterations):
            t0 = time.monotonic_ns()
            for dst in dsts:
                np.copyto(dst, src)
            times.append((time.monotonic_ns() - t0) / 1e6)
        results[n] = times
        del dsts
    return results


Series = dict[str, dict[str, dict[int, list[float]]]]  # mode -> impl -> size -> ms


def _broadcast(
    impls: list[str], cfg: BenchConfig, run_id: str, progress: Callable[[str], None]
) -> tuple[Series, Series]:
    """Measure ``impls`` that share one receiver implementation in every consume mode,
    message by message in turn, so that load from elsewhere on the machine hits them
    alike. Returns (latencies, producer costs)."""
    max_bytes = max(cfg.sizes)
    modes = list(cfg.consume)
    combos = [(impl, mode) for impl in impls for mode in modes]
    lat_out: Series = {mode: {impl: {} for impl in impls} for mode in modes}
    prod_out: Series = {mode: {impl: {} for impl in impls} for mode in modes}
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
            payload = bench_payload(n)
            # Connections and discovery settle on the first size; later ones only need
            # their first message (new buffer sizes, page faults) kept out of the stats.
            warm_rounds = (3 if index == 0 else 1) * len(combos)
            timeout = 30.0 + 2.0 * n / 1e6
            lats: dict[tuple[str, str], list[float]] = {c: [] for c in combos}
            prods: dict[tuple[str, str], list[float]] = {c: [] for c in combos}
            warm = attempts = 0
            start = time.monotonic()
            for _ in range(100 * (cfg.iterations + warm_rounds) * len(combos)):  # bounded
                if min(len(v) for v in lats.values()) >= cfg.iterations:
                    break
                k += 1
                impl, mode = combos[k % len(combos)]
                mark = _marked(payload, k, mode)
                t0, t_done = senders[impl].send(payload)
                # Warm-up rounds may lose messages (PUB/SUB joins late, DDS discovers
                # late): patience starts short and doubles, so slow transports still pass.
                limit = min(timeout, 2.0 * 2**attempts) if warm < warm_rounds else timeout
                times: list[int | None] = []
                sums: list[int | None] = []
                for conn in conns:
                    got = total = None
                    end = time.monotonic() + limit
                    while time.monotonic() < end and conn.poll(max(0.0, end - time.monotonic())):
                        first, last, t, cs = conn.recv()
                        if first == mark and last == mark:
                            got, total = t, cs
                            break
                    times.append(got)
                    sums.append(total)
                if warm < warm_rounds:
                    warm += 1 if None not in times else 0
                    attempts += 1
                    if attempts > 8 * len(combos):
                        raise RuntimeError("receivers never got a complete warm-up round")
                    continue
                if None in times:
                    raise RuntimeError(f"a receiver missed message {k} ({n} bytes)")
                if mode == "checksum":
                    want = checksum(payload)
                    if any(cs != want for cs in sums):
                        raise RuntimeError(f"{impl}: a subscriber's checksum of {n} B is wrong")
                lats[impl, mode].append((max(t for t in times if t is not None) - t0) / 1e6)
                prods[impl, mode].append((t_done - t0) / 1e6)
                if (
                    time.monotonic() - start > cfg.max_seconds
                    and min(len(v) for v in lats.values()) >= cfg.min_iterations
                ):
                    break
            for (impl, mode), lat in lats.items():
                if not lat:
                    raise RuntimeError(f"{impl} {mode}: no message measured at {n} B")
                lat_out[mode][impl][n] = lat
                prod_out[mode][impl][n] = prods[impl, mode]
                progress(
                    f"{impl} {mode} {n} B: {len(lat)} messages, "
                    f"median {statistics.median(lat):.3f} ms"
                )
    finally:
        procs.stop()
        for tx in senders.values():
            tx.close()
    return lat_out, prod_out


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
                t0, _ = tx.send(payload)
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
    """Run every implementation in ``cfg.impls`` plus the references; skip what cannot run.

    Socket files live in a private directory that is removed on every exit path
    (exceptions and ``KeyboardInterrupt`` included; the CLI turns SIGTERM into one)."""
    unknown = sorted(set(cfg.consume) - set(CONSUME))
    if unknown or not cfg.consume:
        raise UsageError(f"--consume must be some of {list(CONSUME)}, not {list(cfg.consume)}")
    result = BenchResult()
    # Short: socket paths must stay under the 107-byte limit of AF_UNIX addresses.
    run_id = f"{os.getpid()}-{os.urandom(3).hex()}"
    directory = run_dir(run_id)
    os.makedirs(directory, mode=0o700)
    try:
        _run(cfg, run_id, result, progress)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return result


def _run(
    cfg: BenchConfig, run_id: str, result: BenchResult, progress: Callable[[str], None]
) -> None:
    once, four = _memcpy(cfg, 1), _memcpy(cfg, 4)
    for mode in cfg.consume:
        result.broadcast[mode] = {"memcpy": once, "memcpy_x4": four}
        result.producer[mode] = {}
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
    if "checksum" in cfg.consume:
        groups.append(["private_copy"])  # the physical limit of reading the bytes
    for group in groups:
        reason = unavailable(group[0])
        if reason is not None:
            for impl in group:
                result.skipped[impl] = reason
            progress(f"{', '.join(group)}: skipped ({reason})")
            continue
        try:
            lats, prods = _broadcast(group, cfg, run_id, progress)
        except Exception as exc:  # a baseline failing must not sink the whole run
            for impl in group:
                result.skipped[impl] = f"failed: {type(exc).__name__}: {exc}"
            progress(f"{', '.join(group)}: failed ({exc})")
            continue
        for mode in cfg.consume:
            for impl in group:
                if impl == "private_copy" and mode != "checksum":
                    continue  # a trigger alone says nothing in view mode
                result.broadcast[mode][impl] = lats[mode][impl]
                result.producer[mode][impl] = prods[mode][impl]
        if group == ["private_copy"]:
            continue
        rtt_impl = "coorp" if group[0] == "coorp_copy" else group[0]
        if cfg.rtt_sizes and rtt_impl not in result.rtt:
            try:
                result.rtt[rtt_impl] = _rtt(rtt_impl, cfg, run_id, progress)
            except Exception as exc:
                result.skipped[f"{rtt_impl} (rtt)"] = f"failed: {type(exc).__name__}: {exc}"
                progress(f"{rtt_impl} rtt: failed ({exc})")
