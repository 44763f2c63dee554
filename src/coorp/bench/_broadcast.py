"""The broadcast and round-trip benchmark behind ``coorp bench broadcast``.

Broadcast: one publisher, N subscriber processes, in two *consume* modes:

* ``view`` -- latency until the *last* subscriber holds a usable numpy array;
* ``checksum`` -- until the last subscriber has read every byte and computed a checksum
  (:func:`checksum`), which the harness verifies against the payload's.

Every implementation is timed from the same instant, before any producer work (filling
the loan, serializing, copying into a segment), on ``CLOCK_MONOTONIC`` (one clock for all
processes of a machine); the producer's own cost (until its send call returns) is
reported beside it. The next message is sent only after every subscriber acknowledged
the previous one, so queues never build up. Every implementation, mode and in-process
reference takes its turn message by message, each round in a new (seeded) order: the
subscriber processes hold an endpoint of every implementation and the harness *arms* one
before each message, so ratios compare numbers taken under the same machine load.
Consumers release what they received before acknowledging, and only the last one to
finish wakes the harness (it must not take a core from subscribers still working).
References: ``memcpy`` (one copy of the payload), ``memcpy_x4`` (four copies, one per
subscriber, in one process) and, in ``checksum`` mode, ``private_copy`` (each subscriber
checksums its own in-memory copy: the physical limit of reading the bytes). Round trip:
a ping to one echo process and back, per message size, in blocks of ten per
implementation in turn. An implementation that cannot be
imported or fails is reported as such and left out of the results, never estimated.

Socket files go to a private directory (``run_dir``) removed on every exit path.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import re
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.bench._impls import (
    IMPLS,
    REFERENCES,
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
    impls: list[str],
    run_id: str,
    channel: str,
    max_bytes: int,
    echo: str | None,
    finished: Any,
    conn: Any,
) -> None:
    """One subscriber (or echo) process holding an endpoint of every implementation of
    the run. The harness *arms* one implementation before each message (or block of
    round trips), so every implementation meets the same machine load, message by
    message, and the process waits on that implementation alone when the clock starts."""
    rxs: dict[str, Any] = {}
    txs: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for impl in impls:
        try:
            if echo:
                txs[impl] = make_sender(impl, run_id, f"{echo}-{impl}", 1, max_bytes)
            rxs[impl] = make_receiver(impl, run_id, f"{channel}-{impl}", max_bytes)
        except Exception as exc:  # reported to the harness, which leaves the impl out
            failed[impl] = f"{type(exc).__name__}: {exc}"
    conn.send(("ready", failed))
    try:
        while True:
            command = conn.recv()
            if command == "stop":
                return
            impl, count = command
            rx, tx = rxs[impl], txs.get(impl)
            conn.send("armed")
            while count > 0 and not conn.poll():
                arr = rx.recv(0.2)
                if arr is None:
                    continue
                count -= 1
                if tx is not None:
                    tx.send(arr)
                    del arr
                else:
                    flat = arr.reshape(-1)
                    first, last = int(flat[0]), int(flat[-1])
                    # Odd marks ask for every byte to be read (see _mark).
                    total = checksum(arr) if first % 2 else None
                    t = time.monotonic_ns()
                    del flat, arr
                    # Finished with it: a pooled buffer (coorp's sample) goes back
                    # before the acknowledgement, as a consumer's `with msg:` would.
                    getattr(rx, "done", lambda: None)()
                    conn.send((first, last, t, total))
                    finished.arrive()
    finally:
        for endpoint in (*rxs.values(), *txs.values()):
            with contextlib.suppress(Exception):
                endpoint.close()


class _Finished:
    """Counts the subscribers done with the current message; only the last one wakes
    the harness, so the measuring process does not take a core from the subscribers
    still working (with 4 subscribers on 2 cores it would)."""

    def __init__(self, ctx: Any) -> None:
        self.count = ctx.Value("i", 0)
        self.expected = ctx.Value("i", 0)
        self.event = ctx.Event()

    def reset(self, expected: int) -> None:
        with self.count.get_lock():
            self.count.value = 0
            self.expected.value = expected
            self.event.clear()

    def arrive(self) -> None:
        with self.count.get_lock():
            self.count.value += 1
            if self.count.value == self.expected.value:
                self.event.set()

    def wait(self, timeout: float) -> bool:
        return bool(self.event.wait(timeout))


class _Procs:
    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.items: list[tuple[Any, Any]] = []
        self.finished = _Finished(self.ctx)

    def start(self, *args: Any) -> Any:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_receiver_main, args=(*args, self.finished, child), daemon=True)
        p.start()
        self.items.append((p, parent))
        return parent

    def wait_ready(self, timeout: float) -> dict[str, str]:
        """Wait for every process; returns the implementations that failed to start."""
        failed: dict[str, str] = {}
        for p, conn in self.items:
            if not conn.poll(timeout):
                raise RuntimeError(f"receiver process {p.pid} did not start")
            tag, errors = conn.recv()
            if tag != "ready":
                raise RuntimeError(f"receiver process {p.pid} did not start")
            failed.update(errors)
        return failed

    def arm(self, impl: str, count: int = 1, timeout: float = 30.0) -> None:
        """Make every process wait on ``impl`` for the next ``count`` messages (returns
        once all are waiting; a new command ends the wait early)."""
        for _, conn in self.items:
            conn.send((impl, count))
        for p, conn in self.items:
            end = time.monotonic() + timeout
            while True:
                if not conn.poll(max(0.0, end - time.monotonic())):
                    raise RuntimeError(f"receiver process {p.pid} did not arm {impl}")
                if conn.recv() == "armed":  # late acknowledgements of earlier messages
                    break
        self.settle()

    def settle(self, limit: float = 0.05) -> None:
        """Wait (briefly, bounded) until every receiver process is asleep: "armed" is
        sent just *before* a receiver goes to wait, and on two cores the few tens of
        microseconds it still runs would otherwise overlap the timed producer work.
        Reads ``/proc/<pid>/stat`` (Linux); elsewhere this is a no-op."""
        end = time.monotonic() + limit
        for p, _ in self.items:
            path = f"/proc/{p.pid}/stat"
            while time.monotonic() < end:
                try:
                    with open(path, "rb") as f:
                        state = f.read().rsplit(b")", 1)[1].split()[0]
                except (OSError, IndexError):
                    return
                if state in (b"S", b"D"):
                    break

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


#: In-process references, measured in the harness between the transports' messages.
_COPIES = {"memcpy": 1, "memcpy_x4": 4}


class _Copies:
    """``copies`` copies of the payload into as many destinations (one per subscriber)."""

    def __init__(self, n: int, copies: int) -> None:
        self.dsts = [np.zeros(n, np.uint8) for _ in range(copies)]

    def send(self, payload: np.ndarray) -> tuple[int, int]:
        t0 = time.monotonic_ns()
        for dst in self.dsts:
            np.copyto(dst, payload)
        return t0, time.monotonic_ns()


Series = dict[str, dict[str, dict[int, list[float]]]]  # mode -> impl -> size -> ms


def _endpoints(
    impls: list[str], make: Callable[[str], Any], result: BenchResult, what: str
) -> dict[str, Any]:
    """Build one endpoint per implementation; one that fails is reported and left out."""
    made: dict[str, Any] = {}
    for impl in impls:
        try:
            made[impl] = make(impl)
        except Exception as exc:
            result.skipped[impl if what == "" else f"{impl} ({what})"] = (
                f"failed: {type(exc).__name__}: {exc}"
            )
    return made


def _broadcast(
    impls: list[str],
    cfg: BenchConfig,
    run_id: str,
    result: BenchResult,
    progress: Callable[[str], None],
) -> None:
    """Measure every implementation (and the in-process copy references) in every
    consume mode, message by message in turn, so that load from elsewhere on the
    machine hits them alike. The subscriber processes hold an endpoint of every
    implementation; the harness arms one before each message."""
    max_bytes = max(cfg.sizes)
    modes = list(cfg.consume)
    procs = _Procs()
    senders: dict[str, Any] = {}
    try:
        senders = _endpoints(
            impls,
            lambda impl: make_sender(
                impl, run_id, f"bcast-{_rx(impl)}", cfg.subscribers, max_bytes
            ),
            result,
            "",
        )
        rx_impls = sorted({_rx(impl) for impl in senders})
        for _ in range(cfg.subscribers):
            procs.start(rx_impls, run_id, "bcast", max_bytes, None)
        for impl, reason in procs.wait_ready(60).items():
            for sender_impl in [s for s in senders if _rx(s) == impl]:
                result.skipped[sender_impl] = f"failed: {reason}"
                senders.pop(sender_impl).close()
        live = [impl for impl in impls if impl in senders]
        combos = [
            (impl, mode)
            for impl in [*_COPIES, *live]
            for mode in modes
            if not (impl in REFERENCES and mode != "checksum")  # a trigger alone says nothing
        ]
        k = 0
        order = random.Random(0)
        for index, n in enumerate(cfg.sizes):
            payload = bench_payload(n)
            copies = {impl: _Copies(n, c) for impl, c in _COPIES.items()}
            # Connections and discovery settle on the first size; later ones only need
            # their first message (new buffer sizes, page faults) kept out of the stats.
            warm_rounds = (3 if index == 0 else 1) * sum(i not in copies for i, _ in combos)
            timeout = 30.0 + 2.0 * n / 1e6
            lats: dict[tuple[str, str], list[float]] = {c: [] for c in combos}
            prods: dict[tuple[str, str], list[float]] = {c: [] for c in combos}
            warm = attempts = sent = 0
            start = time.monotonic()
            for _ in range(100 * (cfg.iterations + warm_rounds) * len(combos)):  # bounded
                if not combos or min(len(v) for v in lats.values()) >= cfg.iterations:
                    break
                k += 1
                if sent % len(combos) == 0:
                    # Each round in a new order, so that no implementation always
                    # follows the same predecessor (whose caches and wake-ups it inherits).
                    order.shuffle(combos)
                impl, mode = combos[sent % len(combos)]
                sent += 1
                mark = _marked(payload, k, mode)
                if impl in copies:
                    t0, t_done = copies[impl].send(payload)
                    if sent > len(combos):  # the first copies fault the destinations in
                        lats[impl, mode].append((t_done - t0) / 1e6)
                    continue
                procs.arm(_rx(impl))
                procs.finished.reset(len(procs.items))
                t0, t_done = senders[impl].send(payload)
                # Warm-up rounds may lose messages (PUB/SUB joins late, DDS discovers
                # late): patience starts short and doubles, so slow transports still pass.
                limit = min(timeout, 2.0 * 2**attempts) if warm < warm_rounds else timeout
                procs.finished.wait(limit)  # then the acknowledgements are all there
                times: list[int | None] = []
                sums: list[int | None] = []
                for _p, conn in procs.items:
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
                    raise RuntimeError(f"{impl}: a receiver missed message {k} ({n} bytes)")
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
            del copies
            for (impl, mode), lat in lats.items():
                if not lat:
                    raise RuntimeError(f"{impl} {mode}: no message measured at {n} B")
                result.broadcast.setdefault(mode, {}).setdefault(impl, {})[n] = lat
                if prods[impl, mode]:
                    result.producer.setdefault(mode, {}).setdefault(impl, {})[n] = prods[impl, mode]
                progress(
                    f"{impl} {mode} {n} B: {len(lat)} messages, "
                    f"median {statistics.median(lat):.3f} ms"
                )
    finally:
        procs.stop()
        for tx in senders.values():
            tx.close()


def _rx(impl: str) -> str:
    """The receiving implementation of ``impl`` (coorp_copy is received as coorp)."""
    return "coorp" if impl == "coorp_copy" else impl


#: Round trips per implementation before the harness moves to the next one.
_RTT_BLOCK = 10


def _rtt(
    impls: list[str],
    cfg: BenchConfig,
    run_id: str,
    result: BenchResult,
    progress: Callable[[str], None],
) -> None:
    """Round trips to one echo process that holds every implementation, in blocks of
    ``_RTT_BLOCK`` per implementation in turn (and the in-process copy reference)."""
    max_bytes = max(cfg.rtt_sizes)
    procs = _Procs()
    txs: dict[str, Any] = {}
    rxs: dict[str, Any] = {}
    try:
        txs = _endpoints(
            impls, lambda i: make_sender(i, run_id, f"ping-{i}", 1, max_bytes), result, "rtt"
        )
        procs.start(sorted(txs), run_id, "ping", max_bytes, "pong")
        for impl, reason in procs.wait_ready(60).items():
            result.skipped[f"{impl} (rtt)"] = f"failed: {reason}"
            txs.pop(impl).close()
        rxs = _endpoints(
            sorted(txs),
            lambda i: make_receiver(i, run_id, f"pong-{i}", max_bytes),
            result,
            "rtt",
        )
        live = ["memcpy", *[impl for impl in impls if impl in rxs]]
        order = random.Random(0)
        k = 0
        for n in cfg.rtt_sizes:
            payload = np.ones(n, np.uint8)
            other = np.zeros(n, np.uint8)
            lat: dict[str, list[float]] = {impl: [] for impl in live}
            start = time.monotonic()
            rounds = 0
            while min(len(v) for v in lat.values()) < cfg.rtt_iterations:
                rounds += 1
                order.shuffle(live)  # no implementation always follows the same one
                for impl in live:
                    if impl != "memcpy":
                        procs.arm(impl, _RTT_BLOCK)
                    for i in range(_RTT_BLOCK):
                        k += 1
                        mark = _marked(payload, k)
                        if impl == "memcpy":
                            t0 = time.monotonic_ns()
                            np.copyto(other, payload)
                            np.copyto(payload, other)
                            done = time.monotonic_ns()
                        else:
                            t0, _ = txs[impl].send(payload)
                            got = _await_echo(rxs[impl], mark, 30.0 if rounds > 1 else 2.0)
                            if got is None:
                                if rounds == 1:
                                    continue  # the first round warms caches and connections
                                raise RuntimeError(f"{impl}: echo lost message {k} ({n} B)")
                            done = got
                        if rounds > 1 or i >= _RTT_BLOCK // 2:
                            lat[impl].append((done - t0) / 1e3)
                if time.monotonic() - start > cfg.max_seconds and min(
                    len(v) for v in lat.values()
                ) > min(10, cfg.rtt_iterations - 1):
                    break
            for impl, xs in lat.items():
                result.rtt.setdefault(impl, {})[n] = xs
                progress(f"{impl} rtt {n} B: median {statistics.median(xs):.1f} us")
    finally:
        procs.stop()
        for endpoint in (*rxs.values(), *txs.values()):
            endpoint.close()


def _await_echo(rx: Any, mark: int, timeout: float) -> int | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        arr = rx.recv(max(0.0, end - time.monotonic()))
        if arr is not None and int(arr.reshape(-1)[0]) == mark:
            return time.monotonic_ns()
        del arr
    return None


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
    impls: list[str] = []
    for impl in dict.fromkeys(cfg.impls):
        reason = unavailable(impl)
        if reason is None:
            impls.append(impl)
        else:
            result.skipped[impl] = reason
            progress(f"{impl}: skipped ({reason})")
    for variant in ("coorp_iox", "coorp_spin"):
        if "coorp" in impls and variant not in impls:
            # Coorp with its busy-poll option and with iceoryx2's per-subscriber event
            # instead of the futex wake-all, side by side with the default.
            impls.insert(impls.index("coorp") + 1, variant)
    if "checksum" in cfg.consume:
        impls.append("private_copy")  # the physical limit of reading the bytes
    try:
        _broadcast(impls, cfg, run_id, result, progress)
    except Exception as exc:  # reported, never estimated
        for impl in impls:
            result.skipped.setdefault(impl, f"failed: {type(exc).__name__}: {exc}")
        progress(f"broadcast failed ({exc})")
    if cfg.rtt_sizes:
        rtt_impls = [i for i in impls if i not in REFERENCES and i != "coorp_copy"]
        try:
            _rtt(rtt_impls, cfg, run_id, result, progress)
        except Exception as exc:
            for impl in rtt_impls:
                result.skipped.setdefault(f"{impl} (rtt)", f"failed: {type(exc).__name__}: {exc}")
            progress(f"round trips failed ({exc})")
