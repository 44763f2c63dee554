"""Programs the relay's namespace tests and benchmark run (``python rt_relay.py ROLE``).

* ``agent`` — one robot's transparent mode as ``coorp agent --transparent`` runs it
  (join, inbox, :class:`~coorp.runtime.TransparentAgent`), answering ``stats`` lines on
  stdin with ``STATS {json}``: the relay's, gatekeeper's and budget's counters, its open
  fds and RSS, the link's counters and how long it was uncoordinated (sampled every
  10 ms).
* ``sink`` — the destinations: ``--upload`` ports hash what arrives and answer
  ``"<bytes> <sha256>"`` after the client's half-close; ``--download`` ports send
  ``--download-bytes`` then close; ``--hold`` ports accept and keep connections open.
  Each connection's end is recorded (``eof`` or ``reset`` and the bytes), ``stats`` on
  stdin prints them.
* ``probe`` — a program that knows nothing of Coorp: ``connect``, ``upload``,
  ``download``, ``hold``, ``direct`` (to the relay port itself); with ``--uid/--gid``
  it drops to that user (after ``--cgroup`` moved it into a cgroup), so its sockets
  are another user's. Prints ``RESULT {json}``; errors are errno names.

Every program is bounded in time (``--timeout``) and stops on a line on stdin where it
waits for one.

:class:`RelayNet` puts them on a topology (``rt_netns.Topology``: ``a1`` the robot, ``ld``
the destinations and, if asked, the leader), for the namespace tests and
``benchmarks/runtime_faults.py --only relay``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RELAY = [sys.executable, "-u", str(Path(__file__).resolve())]
KEY_HEX = "c3" * 32
NOBODY, NOGROUP = 65534, 65533
#: Ports of the sink on ``ld``: uploads hashed, downloads sent, connections held; 9001
#: has no listener; 9050 is selected by no rule (a direct connection).
UPLOAD, REFUSED, DOWNLOAD, HOLD, DIRECT = 9000, 9001, 9002, 9003, 9050
LEADER_PORT = 7300


@dataclass
class RelayNet:
    """Processes on a topology, started with ``nsenter --net`` (not ``ip netns exec``,
    which remounts /sys and hides the cgroup hierarchy the relay's connectors need)."""

    topo: Any
    logs: Path
    team: Path
    nofile: int | None = None
    sink: Any = None
    agent: Any = None
    leader: Any = None
    extra: list[Any] = field(default_factory=list)

    def start(self, host: str, argv: list[str], name: str) -> Any:
        from rt_netns import Proc

        ns = f"--net=/run/netns/{self.topo.ns(host)}"
        with open(self.logs / f"{name}.log", "ab") as err:
            popen = self.topo.popen(None, ["nsenter", ns, *argv], stdin=True, stderr=err)
        proc = Proc(name, popen)
        self.topo.procs.append(proc)
        return proc

    def stats(self, proc: Any) -> dict[str, Any]:
        proc.send("stats")
        return dict(json.loads(proc.expect_rest("STATS ", 30)))

    def probe(self, *argv: str, timeout: float = 60) -> dict[str, Any]:
        p = self.start("a1", [*RELAY, "probe", *argv], "probe")
        return dict(json.loads(p.expect_rest("RESULT ", timeout)))

    def dest(self, port: int) -> str:
        return f"{self.topo.addr('ld')}:{port}"

    def start_agent(self) -> None:
        pre = ["prlimit", f"--nofile={self.nofile}:{self.nofile}"] if self.nofile else []
        argv = [*pre, *RELAY, "agent", "--config", str(self.team), "--robot", "a1"]
        self.agent = self.start("a1", argv, "agent")
        self.agent.expect("READY", 60)

    def start_leader(self) -> None:
        from rt_attacks import COORP

        self.leader = self.start("ld", [*COORP, "leader", "--config", str(self.team)], "leader")
        self.leader.expect("coorp leader: serving", 60)


def team_file(tmp: Path, topo: Any, *, max_flows: int, leader: bool) -> Path:
    (tmp / "team.key").write_text(KEY_HEX + "\n")
    (tmp / "team.key").chmod(0o600)
    ld = topo.addr("ld")
    path = tmp / "team.toml"
    lead = (
        f'[leader]\nlisten = "{ld}:{LEADER_PORT}"\n[agent]\nleader = "{ld}:{LEADER_PORT}"\n'
        if leader
        else "[agent]\n"
    )
    path.write_text(
        '[team]\nname = "rl"\nkey_file = "team.key"\nteam_key_fallback = true\n'
        'robots = ["leader", "a1"]\n'
        f'hosts = {{ leader = "{ld}", a1 = "{topo.addr("a1")}" }}\n'
        f'{lead}listen = "0.0.0.0:7301"\n'
        f'[transparent]\nbulk = [{{ ports = "9000-9010" }}]\nrelay_max_flows = {max_flows}\n'
    )
    return path


@contextlib.contextmanager
def relay_net(
    tmp: Path,
    *,
    max_flows: int = 8,
    leader: bool = False,
    nofile: int | None = None,
    tag: str = "coorpt",
) -> Iterator[RelayNet]:
    """``ld`` (sink, and leader if ``leader``) and ``a1`` (the robot's agent under
    ``nofile``) on a bridge, the port towards ``ld`` shaped at 50 Mbit/s."""
    from rt_netns import Topology

    topo = Topology(agents=1, tag=tag)
    try:
        topo.create(rate_mbit=50, queue_ms=100)
        # Unanswered ARP gives up after 3 x 100 ms (not 3 s): unreachable hosts fail fast.
        for key in ("retrans_time_ms=100", "mcast_solicit=3"):
            topo.run("a1", ["sysctl", "-q", "-w", f"net.ipv4.neigh.eth0.{key}"])
        net = RelayNet(topo, tmp, team_file(tmp, topo, max_flows=max_flows, leader=leader),
                       nofile=nofile)  # fmt: skip
        net.sink = net.start("ld", [*RELAY, "sink", "--upload", str(UPLOAD), "--download",
                                    str(DOWNLOAD), "--hold", str(HOLD)], "sink")  # fmt: skip
        net.sink.expect("READY", 30)
        if leader:
            net.start_leader()
        net.start_agent()
        yield net
    finally:
        topo.destroy()


def _err(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    if isinstance(exc, TimeoutError) or code is None:
        return "ETIMEDOUT" if isinstance(exc, TimeoutError) else type(exc).__name__
    return errno.errorcode.get(code, str(code))


def _stdin_lines() -> asyncio.Queue[str]:
    """Lines of stdin, read by a thread (EOF reads as ``stop``)."""
    q: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(q.put_nowait, line.strip())
        loop.call_soon_threadsafe(q.put_nowait, "stop")

    threading.Thread(target=read, daemon=True).start()
    return q


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- agent ----------------------------------------------------------------------------------
async def agent(args: argparse.Namespace) -> None:
    import logging

    from coorp.runtime import (
        TransparentAgent,
        ajoin,
        load_team_config,
        parse_address,
        resolve_team_key,
        team_settings,
    )

    logging.basicConfig(
        level=logging.WARNING, format="%(created).3f %(levelname)s %(name)s: %(message)s"
    )
    cfg = load_team_config(args.config)
    key = resolve_team_key(cfg, args.config, robot=args.robot)
    assert cfg.transparent is not None
    team = await ajoin(cfg.agent.leader, args.robot, key, settings=team_settings(cfg))
    inbox = await team.listen(cfg.agent.listen)
    ports = [parse_address(cfg.agent.listen)[1]]
    if cfg.agent.leader:
        ports.append(parse_address(cfg.agent.leader)[1])
    tmode = TransparentAgent(
        team,
        cfg.transparent,
        team_hosts=cfg.team_hosts(besides=args.robot),
        coorp_ports=tuple(ports),
    )
    await tmode.start()
    mode = {"uncoordinated_ns": 0, "not_coordinated_ns": 0, "fds_max": _fds(), "rss_mb_max": 0.0}

    async def sample() -> None:
        last = time.monotonic_ns()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic_ns()
            if team.mode == "uncoordinated":
                mode["uncoordinated_ns"] += now - last
            if cfg.agent.leader and team.mode != "coordinated":
                mode["not_coordinated_ns"] += now - last
            mode["fds_max"] = max(mode["fds_max"], _fds())
            mode["rss_mb_max"] = max(mode["rss_mb_max"], _rss_mb())
            last = now

    sampler = asyncio.create_task(sample())
    print(f"READY {os.getpid()} {team.mode}", flush=True)
    lines = _stdin_lines()
    try:
        async with asyncio.timeout(args.timeout):
            while (line := await lines.get()) != "stop":
                if line == "stats":
                    st = await tmode.stats()
                    st["link"] = team.stats().get("link", {})
                    st["mode"] = team.mode
                    st["sampled"] = {
                        "uncoordinated_s": mode["uncoordinated_ns"] / 1e9,
                        "not_coordinated_s": mode["not_coordinated_ns"] / 1e9,
                        "fds_max": mode["fds_max"],
                        "rss_mb_max": mode["rss_mb_max"],
                    }
                    st["fds"] = _fds()
                    st["rss_mb"] = _rss_mb()
                    st["relay"].pop("flows", None)
                    print("STATS " + json.dumps(st), flush=True)
                elif line == "reset-max":
                    mode["fds_max"], mode["rss_mb_max"] = _fds(), _rss_mb()
    finally:
        sampler.cancel()
        await tmode.close()
        await inbox.close()
        await team.close()


def _room_for_fds() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- sink -----------------------------------------------------------------------------------
async def sink(args: argparse.Namespace) -> None:
    _room_for_fds()
    ends: list[dict[str, Any]] = []
    held: list[asyncio.StreamWriter] = []
    payload = bytes(range(256)) * 4096  # 1 MiB, repeated

    async def upload(r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int) -> None:
        h, n = hashlib.sha256(), 0
        try:
            while data := await r.read(1 << 16):
                h.update(data)
                n += len(data)
            w.write(f"{n} {h.hexdigest()}".encode())
            await w.drain()
            ends.append({"port": port, "end": "eof", "bytes": n})
        except OSError as exc:
            ends.append({"port": port, "end": "reset", "bytes": n, "error": _err(exc)})
        finally:
            w.close()

    async def download(r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int) -> None:
        left = args.download_bytes
        try:
            while left > 0:
                w.write(payload[: min(left, len(payload))])
                left -= min(left, len(payload))
                await w.drain()
            w.write_eof()
            await r.read()
            ends.append({"port": port, "end": "eof", "bytes": args.download_bytes - left})
        except OSError as exc:
            ends.append(
                {"port": port, "end": "reset", "bytes": args.download_bytes - left,
                 "error": _err(exc)}
            )  # fmt: skip
        finally:
            w.close()

    async def hold(r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int) -> None:
        held.append(w)
        with contextlib.suppress(OSError):
            await r.read()
        ends.append({"port": port, "end": "eof", "bytes": 0})
        w.close()

    servers = []
    for kind, ports in (("upload", args.upload), ("download", args.download), ("hold", args.hold)):
        fn = {"upload": upload, "download": download, "hold": hold}[kind]
        for port in ports:
            servers.append(
                await asyncio.start_server(
                    lambda r, w, fn=fn, port=port: fn(r, w, port), "0.0.0.0", port, backlog=4096
                )
            )
    accepted = {"n": 0}
    print("READY", flush=True)
    lines = _stdin_lines()
    async with asyncio.timeout(args.timeout):
        while (line := await lines.get()) != "stop":
            if line == "stats":
                print("STATS " + json.dumps({"ends": ends, **accepted}), flush=True)
    for s in servers:
        s.close()


# -- probe ----------------------------------------------------------------------------------
def _become(args: argparse.Namespace) -> None:
    # Whatever the interpreter loads lazily, loaded while it may still read its own
    # files (another user may not read a root-owned install).
    "x".encode("idna")
    socket.getaddrinfo("127.0.0.1", 80)
    if args.cgroup:
        Path(args.cgroup, "cgroup.procs").write_text(f"{os.getpid()}\n")
    if args.gid is not None:
        os.setgroups([])
        os.setgid(args.gid)
    if args.uid is not None:
        os.setuid(args.uid)


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def probe(args: argparse.Namespace) -> None:
    _room_for_fds()
    _become(args)
    out: dict[str, Any] = {"uid": os.getuid(), "gid": os.getgid()}
    if args.action == "connect":
        try:
            s = socket.create_connection(_addr(args.to), timeout=args.timeout)
            out["connect"] = "ok"
            s.settimeout(2)
            try:
                out["first_read"] = "data" if s.recv(1) else "eof"
            except OSError as exc:
                out["first_read"] = _err(exc)
            s.close()
        except OSError as exc:
            out["connect"] = _err(exc)
    elif args.action == "upload":
        data = os.urandom(args.bytes)
        t0 = time.monotonic()
        try:
            s = socket.create_connection(_addr(args.to), timeout=args.timeout)
        except OSError as exc:
            out["connect"] = _err(exc)
        else:
            out["connect"] = "ok"
            try:
                print("STARTED", flush=True)
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                reply = s.recv(200).decode()
                out["intact"] = reply == f"{len(data)} {hashlib.sha256(data).hexdigest()}"
                out["end"] = "eof"
                out["seconds"] = time.monotonic() - t0
            except OSError as exc:
                out["end"] = _err(exc)
            s.close()
    elif args.action == "download":
        got = 0
        try:
            s = socket.create_connection(_addr(args.to), timeout=args.timeout)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            out["connect"] = "ok"
            said = False
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    out["end"] = "eof"
                    break
                got += len(chunk)
                if not said and got >= args.bytes // 10:
                    print("STARTED", flush=True)
                    said = True
                if args.rate_mbps:
                    time.sleep(len(chunk) * 8 / (args.rate_mbps * 1e6))
        except OSError as exc:
            out["end"] = _err(exc)
        out["bytes"] = got
    elif args.action in ("hold", "direct"):
        socks, results = [], []
        to = ("127.0.0.1", args.port) if args.action == "direct" else _addr(args.to)
        until = time.monotonic() + args.seconds
        k = 0
        while k < args.count or time.monotonic() < until:
            k += 1
            try:
                s = socket.create_connection(to, timeout=args.timeout)
                if args.action == "direct":
                    s.settimeout(2)
                    try:
                        s.sendall(b"x" * args.bytes)
                        results.append("data" if s.recv(1) else "eof")
                    except OSError as exc:
                        results.append(_err(exc))
                    s.close()
                else:
                    if args.bytes:
                        s.sendall(b"x" * args.bytes)
                    results.append("ok")
                    socks.append(s)
            except OSError as exc:
                results.append(_err(exc))
        out["results"] = (
            results if len(results) <= 100 else {r: results.count(r) for r in set(results)}
        )
        if args.action == "hold":
            print("HELD " + json.dumps(out["results"]), flush=True)
            sys.stdin.readline()
            for s in socks:
                s.close()
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="role", required=True)
    a = sub.add_parser("agent")
    a.add_argument("--config", type=Path, required=True)
    a.add_argument("--robot", required=True)
    a.add_argument("--timeout", type=float, default=300)
    s = sub.add_parser("sink")
    s.add_argument("--upload", type=int, nargs="*", default=[])
    s.add_argument("--download", type=int, nargs="*", default=[])
    s.add_argument("--hold", type=int, nargs="*", default=[])
    s.add_argument("--download-bytes", type=int, default=20_000_000)
    s.add_argument("--timeout", type=float, default=300)
    q = sub.add_parser("probe")
    q.add_argument("action", choices=["connect", "upload", "download", "hold", "direct"])
    q.add_argument("--to", default="")
    q.add_argument("--port", type=int, default=7409)
    q.add_argument("--bytes", type=int, default=1000)
    q.add_argument("--count", type=int, default=1)
    q.add_argument("--seconds", type=float, default=0.0)
    q.add_argument("--rate-mbps", type=float, default=0.0)
    q.add_argument("--uid", type=int)
    q.add_argument("--gid", type=int)
    q.add_argument("--cgroup", default="")
    q.add_argument("--timeout", type=float, default=10)
    args = p.parse_args()
    if args.role == "agent":
        asyncio.run(agent(args))
    elif args.role == "sink":
        asyncio.run(sink(args))
    else:
        probe(args)


if __name__ == "__main__":
    main()
