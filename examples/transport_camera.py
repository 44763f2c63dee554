"""A camera process streams frames to a planner process through shared memory.

The camera fills each frame *in place* in a loaned iceoryx2 sample (no copy at all); the
planner gets a read-only numpy view of the same memory and has a 50 ms deadline: if no
frame arrives in time, its handler runs (it does while the camera process starts up).
Run: ``python examples/transport_camera.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np

from coorp.transport import Bus, DeadlineMiss, Topic

FRAMES = Topic(name="example/camera/front", type=np.ndarray, max_payload=8 << 20)
SHAPE = (720, 1280, 3)


def planner(n: int, conn: Any) -> None:
    def late(miss: DeadlineMiss) -> None:
        print(f"planner: deadline missed ({miss.kind.value}, {miss.overdue_ns / 1e6:.1f} ms)")

    with Bus("planner") as bus:
        sub = bus.subscriber(FRAMES, depth=2, deadline=0.050, on_deadline_miss=late)
        conn.send("ready")
        for _ in range(n):
            msg = sub.receive(timeout=1.0)
            if msg is None:
                break
            with msg:  # the sample goes back to the camera when the block ends
                frame = msg.value
                lat = f"{msg.latency_ns / 1e3:.0f} us" if msg.latency_ns is not None else "?"
                print(
                    f"planner: frame {msg.seq} mean {frame.mean():6.2f} "
                    f"via {msg.via.name}, {lat} after publish"
                )
                del frame


def main() -> None:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=planner, args=(10, child))
    proc.start()
    try:
        assert parent.poll(30) and parent.recv() == "ready"
        with Bus("camera") as bus:
            pub = bus.publisher(FRAMES)
            for i in range(10):
                with pub.loan_array(SHAPE, np.uint8) as loan:
                    loan.array[...] = i  # a real camera would DMA or decode here
                time.sleep(1 / 30)  # a 30 Hz camera
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()


if __name__ == "__main__":
    main()
