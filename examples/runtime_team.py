"""A whole robot team on one machine (loopback): leader, a receiving robot, two workers.

Each worker sends a 30 Hz perception (12 KB, latency-sensitive) and a 20 MB parameter
update (bulk). The leader's permits let one bulk sender go at a time; each worker's
local preemption pauses bulk writes ahead of its perception sends. Runs anywhere
(no root needed; marking falls back to DSCP if SO_PRIORITY is not permitted)::

    python examples/runtime_team.py
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time

import numpy as np

import coorp.runtime as rt

KEY = rt.TeamKey(os.urandom(32))  # in a deployment: rt.TeamKey.from_file("team.key")
PERIOD_S = 1 / 30


def run_leader(ready: threading.Event, address: list[str], stop: threading.Event) -> None:
    async def main() -> None:
        service = rt.PermitService(["sink", "w1", "w2"], KEY, rt.LeaderSettings(limit=1))
        host, port = await service.start(("127.0.0.1", 0))
        address.append(f"{host}:{port}")
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        print("leader counters:", {k: v for k, v in service.stats().items() if v})
        await service.close()

    asyncio.run(main())


def worker(name: str, leader: str, dest: str, results: dict[str, object]) -> None:
    with rt.join(leader, name, KEY) as team:
        perception = team.latency_sensitive("perception", dest, period_ms=33.3, deadline_ms=33)
        params = team.bulk("params", dest)
        update = os.urandom(20_000_000)
        done = threading.Event()

        def send_update() -> None:
            results[name] = (params.send(update), hashlib.sha256(update).hexdigest())
            done.set()

        sender = None
        next_t = time.monotonic()
        for k in range(300):  # at most 10 s of control loop
            perception.send(b"p" * 12_000)
            if k == 10:  # start learning once the perception flow is running
                sender = threading.Thread(target=send_update)
                sender.start()
            if done.is_set():
                break
            next_t += PERIOD_S
            time.sleep(max(0.0, next_t - time.monotonic()))
        if sender is not None:
            sender.join()


def main() -> None:
    ready, stop, address = threading.Event(), threading.Event(), []
    lt = threading.Thread(target=run_leader, args=(ready, address, stop))
    lt.start()
    ready.wait(10)
    with rt.join(address[0], "sink", KEY) as sink:
        print(sink.marking["ls"].describe())
        inbox = sink.listen("127.0.0.1:0")
        dest = f"127.0.0.1:{inbox.address[1]}"
        results: dict[str, object] = {}
        workers = [
            threading.Thread(target=worker, args=(w, address[0], dest, results))
            for w in ("w1", "w2")
        ]
        for w in workers:
            w.start()
        latencies, bulk = [], {}
        while len(bulk) < 2:
            msg = inbox.recv(timeout=60)
            if msg.kind == "ls":
                latencies.append(msg.latency_ns / 1e6)  # same host: one clock
            else:
                bulk[msg.robot] = hashlib.sha256(msg.payload).hexdigest()
        for w in workers:
            w.join()
    stop.set()
    lt.join()
    for name, (receipt, digest) in sorted(results.items()):  # type: ignore[misc]
        print(
            f"{name}: {receipt.nbytes / 1e6:.0f} MB in {receipt.duration_ns / 1e9:.2f} s, "
            f"waited {receipt.permit_wait_ns / 1e9:.2f} s for the permit, paused "
            f"{receipt.preemptions} times; intact: {bulk[name] == digest}"
        )
    lat = np.array(latencies)
    print(
        f"perception latency: p50 {np.percentile(lat, 50):.2f} ms, "
        f"p99 {np.percentile(lat, 99):.2f} ms over {len(lat)} messages"
    )


if __name__ == "__main__":
    main()
