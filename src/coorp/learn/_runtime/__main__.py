"""``python -m coorp.learn._runtime permits|server|worker``: one role of a run (the team
key in ``COORP_LEARN_KEY_HEX``, never on the command line)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence

from coorp.learn._runtime.config import KEY_ENV
from coorp.learn._runtime.role import Role
from coorp.learn._runtime.server import Server
from coorp.learn._runtime.worker import Worker


def _permits(args: argparse.Namespace) -> None:
    """The team's permit service, until SIGTERM (or ``--timeout``)."""
    from coorp.runtime import LeaderSettings, PermitService, TeamKey

    key = TeamKey.from_hex(os.environ[KEY_ENV])
    settings = LeaderSettings(
        limit=args.limit,
        timeslice_ns=round(args.timeslice_s * 1e9),
        downlink=tuple(r for r in args.downlink.split(",") if r),
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        service = PermitService(args.robots.split(","), key, settings)
        _host, port = await service.start((args.host, 0))
        print(f"READY {port}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.timeout)
        await service.close()

    asyncio.run(main())


#: ``coorp agent``'s default ``agent.scheduling``.
_SCHEDULING = "nice:-10"
#: The interpreter's thread switch interval in a role process (Python's default 5 ms).
_SWITCH_S = 0.0005


def _prioritise(name: str) -> None:
    """This role process takes the CPU share ``coorp agent`` takes on a robot.

    On a robot the runtime is the agent (and the permit service the leader daemon),
    a process of its own at ``agent.scheduling`` (nice -10 by default,
    docs/runtime.md). Here a worker's or the leader's runtime runs inside its training
    process, on one interpreter: a training thread preempted by other programs while
    it holds the GIL stalls the runtime's thread behind it (the pacer, the permit
    link, the LS channels), whatever that thread's own share. So the whole process
    takes the agent's share, set before any thread starts (Linux keeps nice values
    per thread; new threads inherit them), and the interpreter switches threads every
    0.5 ms instead of 5 ms: a thread woken for an LS send or a chunk waits that long at
    most for the training thread to let go of the GIL. Every mode alike (the LS loop
    runs on the runtime in both). Without the right to raise it (no CAP_SYS_NICE) the
    share stays as started, said on stderr (the role's log)."""
    from coorp.runtime import apply_scheduling, parse_scheduling

    sys.setswitchinterval(_SWITCH_S)
    try:
        apply_scheduling(parse_scheduling(_SCHEDULING))
    except PermissionError as exc:
        print(f"{name}: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m coorp.learn._runtime")
    sub = p.add_subparsers(dest="role", required=True)
    pm = sub.add_parser("permits")
    pm.add_argument("--host", required=True)
    pm.add_argument("--robots", required=True)
    pm.add_argument("--limit", type=int, default=1)
    pm.add_argument("--timeslice-s", type=float, default=5.0)
    pm.add_argument("--timeout", type=float, default=3600)
    pm.add_argument("--downlink", default="", help="robots with a queue of their own")
    for name in ("server", "worker"):
        q = sub.add_parser(name)
        q.add_argument("--robot", required=True)
        q.add_argument("--host", required=True)
        q.add_argument("--config", required=True)
        q.add_argument("--result", required=True)
        q.add_argument("--team", default="", help="a team file: this robot's key and permits")
        q.add_argument("--port", type=int, default=0, help="the inbox port (0: any)")
        if name == "worker":
            q.add_argument("--server", required=True, help="the leader's inbox host:port")
            q.add_argument("--server-tcp", default="", help="the leader's TCP host:port")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _prioritise(getattr(args, "robot", args.role))
    if args.role == "permits":
        _permits(args)
        return
    role: Role = Server(args) if args.role == "server" else Worker(args)
    try:
        role.run()
    finally:
        role.close()


if __name__ == "__main__":
    main()
