"""An MPC control loop over ROS 2's middleware, knowing nothing of Coorp.

What a robot team runs today, without ROS 2 itself: every robot publishes a
perception (12 KB by default) at 30 Hz on its own topic; the leader answers each one
with a command (1 KB) on the robot's command topic. Over Cyclone DDS (ROS 2's default
RMW; reliable, keep-last 10, as ROS 2's default QoS profile) or Zenoh (peers over
TCP, as rmw_zenoh: the leader listens on 7447, robots connect).

Each message carries its sequence number and the sender's ``CLOCK_MONOTONIC``: on one
machine (network namespaces) that is one clock, so the receiver measures one-way
latency. At the end each process prints one line ``RESULT {json}``.

    python mpc_loop.py leader --transport dds --robots r1,r2 --start-at NS --duration 10
    python mpc_loop.py robot --name r1 --transport dds --start-at NS --duration 10

Coorp's transparent mode protects exactly this program as it is (docs/ros2.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import threading
import time
from typing import Any

HEADER = struct.Struct("!IQ")  # sequence number, sender's CLOCK_MONOTONIC (ns)
ZENOH_PORT = 7447
WARMUP_SEQ = 1_000_000  # warm-up messages' numbers start here


def _blob_type() -> Any:
    import types as pytypes
    from dataclasses import dataclass

    from cyclonedds.idl import IdlStruct, types

    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {"data": types.sequence[types.uint8]}

    return dataclass(pytypes.new_class("Frame", (IdlStruct,), {"typename": "mpc::Frame"}, body))


class Dds:
    """Cyclone DDS, one topic per robot and direction, ROS 2's default QoS."""

    def __init__(self) -> None:
        from cyclonedds.core import Policy, Qos
        from cyclonedds.domain import DomainParticipant
        from cyclonedds.util import duration

        self.blob = _blob_type()
        self.dp = DomainParticipant(0)
        self.qos = Qos(
            Policy.Reliability.Reliable(duration(milliseconds=100)), Policy.History.KeepLast(10)
        )
        self.keep: list[Any] = []

    def publisher(self, topic: str) -> Any:
        from cyclonedds.pub import DataWriter
        from cyclonedds.topic import Topic

        w = DataWriter(self.dp, Topic(self.dp, topic, self.blob, qos=self.qos), qos=self.qos)
        self.keep.append(w)
        return lambda payload: w.write(self.blob(payload))

    def subscribe(self, topic: str, fn: Any) -> None:
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        def on_data(reader: Any) -> None:
            for s in reader.take(N=64):
                data = getattr(s, "data", None)  # None: an InvalidSample (writer gone)
                if data is not None:
                    fn(bytes(data))

        t = Topic(self.dp, topic, self.blob, qos=self.qos)
        self.keep.append(
            DataReader(self.dp, t, qos=self.qos, listener=Listener(on_data_available=on_data))
        )

    def close(self) -> None:
        self.keep.clear()


class Zenoh:
    """Zenoh peers over TCP (leader listens on 7447, robots connect to it and listen on
    nothing, as rmw_zenoh's nodes reach their router), reliable, shared memory off
    (robots are separate machines; namespaces would share /dev/shm)."""

    def __init__(self, listen: str | None, connect: str | None) -> None:
        import zenoh

        conf: dict[str, Any] = {
            "mode": "peer",
            "scouting": {"multicast": {"enabled": False}},
            "transport": {"shared_memory": {"enabled": False}},
        }
        if listen:
            conf["listen"] = {"endpoints": [f"tcp/{listen}:{ZENOH_PORT}"]}
        if connect:
            # As rmw_zenoh's nodes reach their router: through its locator only (no
            # listening port of their own, no peer-to-peer links learnt by gossip).
            conf["connect"] = {"endpoints": [f"tcp/{connect}:{ZENOH_PORT}"]}
            conf["listen"] = {"endpoints": []}
            conf["scouting"]["gossip"] = {"enabled": False}
        self.z = zenoh
        self.session = zenoh.open(zenoh.Config.from_json5(json.dumps(conf)))
        self.keep: list[Any] = []

    def publisher(self, topic: str) -> Any:
        pub = self.session.declare_publisher(
            topic,
            reliability=self.z.Reliability.RELIABLE,
            congestion_control=self.z.CongestionControl.BLOCK,
        )
        self.keep.append(pub)
        return pub.put

    def subscribe(self, topic: str, fn: Any) -> None:
        self.keep.append(self.session.declare_subscriber(topic, lambda s: fn(s.payload.to_bytes())))

    def close(self) -> None:
        self.keep.clear()
        self.session.close()


def _transport(args: argparse.Namespace) -> Any:
    if args.transport == "dds":
        return Dds()
    if args.role == "leader":
        return Zenoh(listen=args.addr, connect=None)
    return Zenoh(listen=None, connect=args.leader)


def _pad(seq: int, size: int) -> bytes:
    head = HEADER.pack(seq, time.monotonic_ns())
    return head + bytes(max(size - len(head), 0))


def _sleep_until(t_ns: int) -> None:
    while True:
        left = t_ns - time.monotonic_ns()
        if left <= 0:
            return
        time.sleep(min(left / 1e9, 0.05))


def leader(args: argparse.Namespace) -> dict[str, Any]:
    robots = [r for r in args.robots.split(",") if r]
    t = _transport(args)
    lock = threading.Lock()
    latencies: dict[str, list[float]] = {r: [] for r in robots}
    seqs: dict[str, set[int]] = {r: set() for r in robots}
    pubs = {r: t.publisher(f"mpc/{r}/command") for r in robots}

    def on_perception(robot: str, data: bytes) -> None:
        now = time.monotonic_ns()
        seq, sent = HEADER.unpack_from(data)
        with lock:
            # Warm-up messages (numbered from WARMUP_SEQ) are not counted, even the last
            # one, whose phase may put its send after start_at.
            if sent >= args.start_at and seq < WARMUP_SEQ:
                latencies[robot].append((now - sent) / 1e6)
                seqs[robot].add(seq)
        pubs[robot](_pad(seq, args.command_bytes))  # the command for this perception

    for r in robots:
        t.subscribe(f"mpc/{r}/perception", lambda d, r=r: on_perception(r, d))
    print("READY", flush=True)
    _sleep_until(args.start_at + int((args.duration + args.drain) * 1e9))
    with lock:
        out = {"role": "leader", "perception_ms": latencies,
               "perceptions": {r: len(s) for r, s in seqs.items()}}  # fmt: skip
    return out


def robot(args: argparse.Namespace) -> dict[str, Any]:
    t = _transport(args)
    publish = t.publisher(f"mpc/{args.name}/perception")
    lock = threading.Lock()
    latencies: list[float] = []
    reaction: list[float] = []
    sent_at: dict[int, int] = {}

    def on_command(data: bytes) -> None:
        now = time.monotonic_ns()
        seq, sent = HEADER.unpack_from(data)
        with lock:
            if seq in sent_at:
                latencies.append((now - sent) / 1e6)
                reaction.append((now - sent_at.pop(seq)) / 1e6)

    t.subscribe(f"mpc/{args.name}/command", on_command)
    print("READY", flush=True)
    period = round(1e9 / args.hz)
    phase = random.Random(f"{args.seed}/{args.name}").randrange(period)
    n = int(args.duration * args.hz)
    # Warm-up messages (before start_at) are not counted: discovery, connections.
    warm = args.start_at - int(args.warmup * 1e9)
    k = 0
    while warm + k * period < args.start_at:
        _sleep_until(warm + k * period + phase)
        publish(_pad(WARMUP_SEQ + k, args.perception_bytes))
        k += 1
    for seq in range(n):
        _sleep_until(args.start_at + seq * period + phase)
        with lock:
            sent_at[seq] = time.monotonic_ns()
        publish(_pad(seq, args.perception_bytes))
    _sleep_until(args.start_at + int((args.duration + args.drain) * 1e9))
    with lock:
        out = {"role": "robot", "name": args.name, "sent": n, "command_ms": latencies,
               "reaction_ms": reaction}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["leader", "robot"])
    ap.add_argument("--transport", choices=["dds", "zenoh"], required=True)
    ap.add_argument("--name", default="r1")
    ap.add_argument("--robots", default="r1")
    ap.add_argument("--addr", default="0.0.0.0", help="leader: Zenoh listen address")
    ap.add_argument("--leader", default="127.0.0.1", help="robot: the leader's address (Zenoh)")
    ap.add_argument("--start-at", type=int, required=True, help="CLOCK_MONOTONIC ns")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of uncounted messages")
    ap.add_argument("--drain", type=float, default=1.0)
    ap.add_argument("--hz", type=float, default=30.0)
    ap.add_argument("--perception-bytes", type=int, default=12_000)
    ap.add_argument("--command-bytes", type=int, default=1_000)
    ap.add_argument("--seed", default="1")
    args = ap.parse_args(argv)
    out = leader(args) if args.role == "leader" else robot(args)
    print("RESULT " + json.dumps(out), flush=True)
    # The middleware's threads (DDS listeners, Zenoh) must not keep the process alive
    # or deadlock its teardown: the result is out, leave now.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
