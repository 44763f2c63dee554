"""Broadcast benchmark (thesis Fig. 2.4 style): same as ``coorp bench broadcast``.

Usage: ``python benchmarks/broadcast.py --sizes 1MB,10MB,50MB --subscribers 4 --json out.json``

``python benchmarks/broadcast.py --fanout [--size 10MB] [--subscribers 4] [--messages 40]``
is a diagnostic instead: where a loaned broadcast's time goes with each way subscribers
sleep (``Bus(wake="futex")`` and ``Bus(wake="iceoryx2")``, alternating message by
message): from the instant before the loan, when the producer's fill is done, when
``send`` returns, when the first and the last subscriber hold the array. Medians in µs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from typing import Any

_MODES = ("futex", "iceoryx2")


def _subscriber(topics: dict[str, Any], conn: Any, stamps: Any, idx: int, n: int) -> None:
    from coorp.transport import Bus, Reach

    buses = {m: Bus(f"fanout-{m}-{idx}", reach=Reach.MACHINE, wake=m) for m in _MODES}
    try:
        subs = {m: buses[m].subscriber(topics[m], depth=2) for m in _MODES}
        conn.send("ready")
        for _ in range(2 * n):
            mode, k = conn.recv()  # armed: wait on this mode alone
            conn.send("armed")
            msg = subs[mode].receive(timeout=10.0)
            got = time.monotonic_ns()
            if msg is None:
                conn.send("timeout")
                return
            assert msg.value.shape[0] > 0
            msg.release()
            stamps[k * 8 + idx] = got
            conn.send("ok")
    finally:
        for bus in buses.values():
            bus.close()


def _asleep(pids: list[int]) -> None:
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        states = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read()
                states.append(stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3])
            except OSError:
                states.append(b"?")
        if all(s == b"S" for s in states):
            return
        os.sched_yield()


def fanout(size: int, nsubs: int, n: int) -> None:
    import numpy as np

    from coorp.transport import Bus, Reach, Topic

    run = uuid.uuid4().hex[:8]
    topics = {
        m: Topic(name=f"fanout/{run}/{m}", type=np.ndarray, max_payload=size + 4096, max_depth=2)
        for m in _MODES
    }
    ctx = mp.get_context("spawn")
    stamps = ctx.RawArray("q", 2 * n * 8)
    pipes = [ctx.Pipe() for _ in range(nsubs)]
    procs = [
        ctx.Process(target=_subscriber, args=(topics, child, stamps, i, n), daemon=True)
        for i, (_, child) in enumerate(pipes)
    ]
    payload = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
    rows: dict[str, list[tuple[int, int, int, int]]] = {m: [] for m in _MODES}
    with Bus("fanout-pub", reach=Reach.MACHINE) as bus:
        pubs = {m: bus.publisher(topics[m]) for m in _MODES}
        for p in procs:
            p.start()
        try:
            for parent, _ in pipes:
                if not parent.poll(60) or parent.recv() != "ready":
                    raise RuntimeError("a subscriber did not start")
            pids = [p.pid for p in procs if p.pid is not None]
            for k in range(2 * n):
                mode = _MODES[(k + k // 2) % 2]  # both orders, alternating
                for parent, _ in pipes:
                    parent.send((mode, k))
                for parent, _ in pipes:
                    if not parent.poll(15) or parent.recv() != "armed":
                        raise RuntimeError("a subscriber did not arm")
                _asleep(pids)
                t0 = time.monotonic_ns()
                loan = pubs[mode].loan_array(payload.shape, payload.dtype)
                np.copyto(loan.array, payload)
                t_fill = time.monotonic_ns()
                loan.send()
                t_send = time.monotonic_ns()
                for parent, _ in pipes:
                    if not parent.poll(15) or parent.recv() != "ok":
                        raise RuntimeError("a subscriber timed out")
                got = [stamps[k * 8 + i] - t0 for i in range(nsubs)]
                rows[mode].append((t_fill - t0, t_send - t0, min(got), max(got)))
        finally:
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    print(
        f"{size / 1e6:g} MB to {nsubs} subscribers, {n} messages per mode, "
        f"load {os.getloadavg()[0]:.2f}; medians, µs from before the loan"
    )
    print("| wake | fill done | `send` returns | first has it | last has it | fill → last |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in _MODES:
        cols = list(zip(*rows[mode], strict=True))
        med = [statistics.median(c) / 1e3 for c in cols]
        last = statistics.median([r[3] - r[0] for r in rows[mode]]) / 1e3
        print(f"| {mode} | " + " | ".join(f"{v:,.0f}" for v in med) + f" | {last:,.0f} |")


def _size(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1}
    for unit, mult in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * mult)
    return int(text)


if __name__ == "__main__":
    if "--fanout" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--fanout", action="store_true")
        ap.add_argument("--size", default="10MB")
        ap.add_argument("--subscribers", type=int, default=4)
        ap.add_argument("--messages", type=int, default=40)
        args = ap.parse_args()
        fanout(_size(args.size), min(8, args.subscribers), max(1, min(1000, args.messages)))
    else:
        from coorp.cli import main

        main(["bench", "broadcast", *sys.argv[1:]])
