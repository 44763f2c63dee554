"""The ``api`` mode of ``benchmarks/transparent.py``: the same MPC loop and bulk
transfers, rewritten on Coorp's own API (LS channels, bulk streams), as a team would
after porting its code. ``--direction up`` (uploads to the leader), ``down`` (the
leader sends to every robot), ``both``; ``--streams K`` streams per robot and way.

    python _transparent_api.py leader --config team.toml --robots r1,r2 --start-at NS ...
    python _transparent_api.py robot --config team.toml --name r1 --leader-host IP ...

Lines: ``READY``, then ``RESULT {json}`` in the format of
``examples/unmodified/mpc_loop.py`` (plus ``bulk_bytes``: bulk bytes this process
received inside the window, counted segment by segment, and ``bulk_digests``: the
SHA-256 of every message it received; ``sent_digests``: of every message confirmed).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import random
import struct
import sys
import time
from typing import Any

import coorp.runtime as rt

HEADER = struct.Struct("!IQ")
INBOX_PORT = 7301


def _pad(seq: int, size: int) -> bytes:
    head = HEADER.pack(seq, time.monotonic_ns())
    return head + bytes(max(size - len(head), 0))


async def _until(t_ns: int) -> None:
    await asyncio.sleep(max(t_ns - time.monotonic_ns(), 0) / 1e9)


async def leader(args: argparse.Namespace) -> dict[str, Any]:
    cfg = rt.load_team_config(args.config)
    key = rt.resolve_team_key(cfg, args.config, robot="leader")
    team = await rt.ajoin(cfg.agent.leader, "leader", key, settings=rt.team_settings(cfg))
    inbox = await team.listen(f"0.0.0.0:{INBOX_PORT}")
    robots = [r for r in args.robots.split(",") if r]
    hosts = cfg.team.hosts
    commands = {
        r: team.latency_sensitive(f"command-{r}", f"{hosts[r]}:{INBOX_PORT}", deadline_ms=33)
        for r in robots
    }
    latencies: dict[str, list[float]] = {r: [] for r in robots}
    seqs: dict[str, set[int]] = {r: set() for r in robots}
    window: dict[str, int] = {}
    digests: list[str] = []
    print("READY", flush=True)
    end_at = args.start_at + int(args.duration * 1e9)
    sending: list[asyncio.Task[list[str]]] = []
    if args.direction in ("down", "both"):
        for r in robots:
            for i in range(args.streams):
                stream = team.bulk(f"model-{r}-{i}", f"{hosts[r]}:{INBOX_PORT}")
                sending.append(
                    asyncio.create_task(_bulk_until(stream, f"leader/{r}/{i}", args, end_at))
                )

    async def count_window() -> None:
        await _until(args.start_at)
        window["b0"] = int(inbox.stats().get("bulk_bytes", 0))
        await _until(end_at)
        window["b1"] = int(inbox.stats().get("bulk_bytes", 0))

    counter = asyncio.create_task(count_window())
    stop_at = end_at + int(args.drain * 1e9)
    while time.monotonic_ns() < stop_at:
        try:
            msg = await inbox.recv(timeout_s=0.2)
        except TimeoutError:
            continue
        now = time.monotonic_ns()
        if msg.kind == "bulk":
            digests.append(hashlib.sha256(msg.payload).hexdigest())
            continue
        seq, sent = HEADER.unpack_from(msg.payload)
        if sent >= args.start_at and seq < 1_000_000 and msg.robot in latencies:
            latencies[msg.robot].append((now - sent) / 1e6)
            seqs[msg.robot].add(seq)
        if msg.robot in commands:
            commands[msg.robot].send(_pad(seq, args.command_bytes))
    await counter
    sent = [d for t in sending for d in await t]
    await team.close()
    return {
        "role": "leader",
        "perception_ms": latencies,
        "perceptions": {r: len(s) for r, s in seqs.items()},
        "bulk_bytes": window["b1"] - window["b0"],
        "bulk_digests": digests,
        "sent_digests": sent,
    }


async def _bulk_until(stream: Any, seed: str, args: argparse.Namespace, end_at: int) -> list[str]:
    """Messages on ``stream`` from the warm-up to the window's end; their digests."""
    digests = []
    data = random.Random(seed).randbytes(args.bulk_message_bytes)
    digest = hashlib.sha256(data).hexdigest()
    await _until(args.start_at - int(args.warmup * 1e9))
    while (left := end_at - time.monotonic_ns()) > 0:
        # A message not confirmed by the window's end is abandoned (the receiver
        # delivers none of it), as the plain transfers stop at the window's end.
        try:
            await stream.send(data, timeout_s=left / 1e9)
        except TimeoutError:
            break
        digests.append(digest)
    return digests


async def robot(args: argparse.Namespace) -> dict[str, Any]:
    cfg = rt.load_team_config(args.config)
    key = rt.resolve_team_key(cfg, args.config, robot=args.name)
    team = await rt.ajoin(cfg.agent.leader, args.name, key, settings=rt.team_settings(cfg))
    inbox = await team.listen(f"0.0.0.0:{INBOX_PORT}")
    dest = f"{args.leader_host}:{INBOX_PORT}"
    perception = team.latency_sensitive("perception", dest, deadline_ms=33, period_ms=1e3 / args.hz)
    latencies: list[float] = []
    received: list[str] = []
    window: dict[str, int] = {}
    reaction: list[float] = []
    sent_at: dict[int, int] = {}
    print("READY", flush=True)
    period = round(1e9 / args.hz)
    phase = random.Random(f"{args.seed}/{args.name}").randrange(period)
    n = int(args.duration * args.hz)
    end_at = args.start_at + int(args.duration * 1e9)

    async def commands() -> None:
        while True:
            try:
                msg = await inbox.recv(timeout_s=0.2)
            except TimeoutError:
                continue
            now = time.monotonic_ns()
            if msg.kind == "bulk":
                received.append(hashlib.sha256(msg.payload).hexdigest())
                continue
            seq, sent = HEADER.unpack_from(msg.payload)
            if seq in sent_at:
                latencies.append((now - sent) / 1e6)
                reaction.append((now - sent_at.pop(seq)) / 1e6)

    async def loop() -> None:
        warm = args.start_at - int(args.warmup * 1e9)
        k = 0
        while warm + k * period < args.start_at:
            await _until(warm + k * period + phase)
            perception.send(_pad(1_000_000 + k, args.perception_bytes))
            k += 1
        for seq in range(n):
            await _until(args.start_at + seq * period + phase)
            sent_at[seq] = time.monotonic_ns()
            perception.send(_pad(seq, args.perception_bytes))

    async def count_window() -> None:
        await _until(args.start_at)
        window["b0"] = int(inbox.stats().get("bulk_bytes", 0))
        await _until(end_at)
        window["b1"] = int(inbox.stats().get("bulk_bytes", 0))

    receiver = asyncio.create_task(commands())
    counter = asyncio.create_task(count_window())
    ups = []
    if args.direction in ("up", "both"):
        ups = [
            asyncio.create_task(
                _bulk_until(team.bulk(f"upload-{i}", dest), f"{args.name}/{i}", args, end_at)
            )
            for i in range(args.streams)
        ]
    await loop()
    digests = [d for t in ups for d in await t]
    await counter
    await _until(end_at + int(args.drain * 1e9))
    receiver.cancel()
    stats = team.stats()
    await team.close()
    return {
        "role": "robot",
        "name": args.name,
        "sent": n,
        "command_ms": latencies,
        "reaction_ms": reaction,
        "sent_digests": digests,
        "bulk_digests": received,
        "bulk_bytes": window["b1"] - window["b0"],
        # Where the bulk's time went, summed over its streams (docs/runtime.md).
        "pacing": _summed(stats.get("bulk", {})),
        "permits": stats.get("permits", {}),
        "ls_stats": {k: dataclasses.asdict(v) for k, v in stats.get("ls", {}).items()},
    }


def _summed(streams: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counters in streams.values():
        for k, v in counters.items():
            out[k] = max(out.get(k, 0), v) if k == "inflight_max_bytes" else out.get(k, 0) + v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["leader", "robot"])
    ap.add_argument("--config", required=True)
    ap.add_argument("--name", default="r1")
    ap.add_argument("--robots", default="r1")
    ap.add_argument("--leader-host", default="127.0.0.1")
    ap.add_argument("--start-at", type=int, required=True)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--drain", type=float, default=1.0)
    ap.add_argument("--hz", type=float, default=30.0)
    ap.add_argument("--perception-bytes", type=int, default=12_000)
    ap.add_argument("--command-bytes", type=int, default=1_000)
    ap.add_argument("--bulk-message-bytes", type=int, default=4 << 20)
    ap.add_argument("--seed", default="1")
    ap.add_argument("--direction", choices=["up", "down", "both"], default="up")
    ap.add_argument("--streams", type=int, default=1)
    args = ap.parse_args()
    out = asyncio.run(leader(args) if args.role == "leader" else robot(args))
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
