"""Tools of a running ``coorp agent``: a local control socket (``coorp send``) and an
LS traffic generator with echo (``coorp agent --ls``, an iperf for Coorp).

**Control socket.** A running agent listens on a Unix socket (``--control PATH``,
default ``$XDG_RUNTIME_DIR/coorp/<team>-<robot>.sock`` or
``/tmp/coorp-<uid>/<team>-<robot>.sock``, in a mode-700 directory; peers of another
uid are refused by ``SO_PEERCRED``). ``coorp send FILE --to HOST:PORT`` writes one
JSON line ``{"file": ..., "to": ...}`` and reads one JSON line back: the agent sends
the file as a coordinated bulk message as *itself* — no second process joins under
the robot's name.

**LS generator.** ``--ls HZ:BYTES[:DEST]`` sends ``BYTES``-byte LS messages at ``HZ``
on channel ``coorp-ping`` to ``DEST`` (default: the leader robot's inbox, the
``agent.leader`` host at the ``agent.listen`` port). Every agent echoes a ping's first
24 bytes back on an LS channel to the sender's inbox; the sender reports the round
trip (its own clock: no clock synchronisation) once per second and at the end. Each
line counts what it measures over the same span: ``last 1 s: 30 echoed / 30 sent``
(pings sent in that second, echoes that came back in it), ``total: 298 echoed / 300
sent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from coorp._errors import UsageError

__all__ = [
    "LsGenerator",
    "PingEcho",
    "control_socket_path",
    "parse_ls_spec",
    "send_via_agent",
    "serve_control",
]

PING_CHANNEL = "coorp-ping"
PONG_CHANNEL = "coorp-pong"
_PING = struct.Struct(">4sHQQ")  # magic, reply port, seq, sender's send time
_MAGIC = b"CPNG"
_MAX_ECHO_CHANNELS = 64


def control_socket_path(team: str, robot: str) -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(base) / "coorp" if base else Path(tempfile.gettempdir()) / f"coorp-{os.getuid()}"
    return root / f"{team}-{robot}.sock"


def parse_ls_spec(text: str) -> tuple[float, int, str | None]:
    """``HZ:BYTES[:DEST]`` -> (hz, nbytes, dest or None)."""
    parts = text.split(":", 2)
    if len(parts) < 2:
        raise UsageError(f"--ls {text!r}: expected HZ:BYTES[:HOST:PORT], e.g. 30:12000")
    try:
        hz, nbytes = float(parts[0]), int(parts[1])
    except ValueError:
        raise UsageError(f"--ls {text!r}: HZ and BYTES must be numbers") from None
    if not 0 < hz <= 10_000:
        raise UsageError(f"--ls {text!r}: HZ={hz:g} must be in (0, 10000]")
    if not _PING.size <= nbytes <= 60_000:
        raise UsageError(f"--ls {text!r}: BYTES={nbytes} must be in {_PING.size}..60000")
    return hz, nbytes, parts[2] if len(parts) == 3 else None


# -- control socket --------------------------------------------------------------------------
async def serve_control(
    path: Path, send_file: Callable[[Path, str], Any]
) -> asyncio.AbstractServer:
    """Listen on ``path`` for ``coorp send`` requests (one JSON line each)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = writer.get_extra_info("socket")
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            if uid not in (os.getuid(), 0):
                reply: dict[str, Any] = {"ok": False, "error": f"uid {uid} may not use this agent"}
            else:
                async with asyncio.timeout(10):
                    line = await reader.readline()
                if not line:  # a peer that only checked who listens (running_agent)
                    writer.close()
                    return
                req = json.loads(line)
                reply = await send_file(Path(str(req["file"])), str(req["to"]))
        except Exception as exc:  # reported to the client, never fatal to the agent
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(OSError):
            writer.write((json.dumps(reply) + "\n").encode())
            await writer.drain()
            writer.close()

    server = await asyncio.start_unix_server(handle, path=str(path), limit=1 << 16)
    path.chmod(0o600)
    return server


def running_agent(path: Path) -> int | None:
    """The pid of the agent answering on control socket ``path`` (None: nobody does;
    a socket file left by a crash is not an agent). The kernel says who listens
    (``SO_PEERCRED``): no request is sent."""
    if not path.exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect(str(path))
        except OSError:
            return None
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _, _ = struct.unpack("3i", creds)
        return pid


def send_via_agent(path: Path, file: Path, to: str, timeout_s: float) -> dict[str, Any]:
    """Ask the agent at ``path`` to send ``file`` to ``to``; its JSON reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
        except OSError as exc:
            raise UsageError(
                f"no running agent at {path} ({exc.strerror}); start `coorp agent` first"
            ) from None
        s.sendall((json.dumps({"file": str(file.resolve()), "to": to}) + "\n").encode())
        buf = b""
        for _ in range(1 << 16):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if buf.endswith(b"\n"):
                break
    reply: dict[str, Any] = json.loads(buf or b"{}")
    return reply


# -- LS generator and echo ----------------------------------------------------------------------
class PingEcho:
    """Echo pings back to their sender's inbox (every agent does this)."""

    def __init__(self, team: Any) -> None:
        self._team = team
        self._channels: dict[tuple[str, int], Any] = {}

    def handle(self, msg: Any) -> bool:
        if msg.kind != "ls" or msg.channel != PING_CHANNEL or len(msg.payload) < _PING.size:
            return False
        magic, port, _, _ = _PING.unpack_from(msg.payload)
        if magic != _MAGIC:
            return False
        host = msg.peer.rpartition(":")[0].strip("[]")
        key = (msg.robot, port)
        ch = self._channels.get(key)
        if ch is None:
            if len(self._channels) >= _MAX_ECHO_CHANNELS:
                return True
            name = f"{PONG_CHANNEL}-{msg.robot}-{port}"
            ch = self._channels[key] = self._team.latency_sensitive(
                name, f"{host}:{port}", deadline_ms=1000
            )
        ch.send(bytes(msg.payload[: _PING.size]))
        return True


class LsGenerator:
    """Send pings at ``hz`` and collect round trips from the echoes."""

    def __init__(self, team: Any, hz: float, nbytes: int, dest: str, reply_port: int) -> None:
        self._ch = team.latency_sensitive(PING_CHANNEL, dest, deadline_ms=1000 / hz)
        self.hz, self.nbytes, self.dest, self._port = hz, nbytes, dest, reply_port
        self._sent: dict[int, int] = {}
        self.rtts_ns: list[int] = []
        self._window: list[int] = []
        self._window_sent = 0
        self.sent = 0
        self.failed = 0

    def handle(self, msg: Any) -> bool:
        if msg.kind != "ls" or not msg.channel.startswith(PONG_CHANNEL):
            return False
        if len(msg.payload) >= _PING.size:
            magic, _, seq, sent_ns = _PING.unpack_from(msg.payload)
            if magic == _MAGIC and self._sent.pop(seq, None) == sent_ns:
                rtt = time.monotonic_ns() - sent_ns
                self.rtts_ns.append(rtt)
                self._window.append(rtt)
        return True

    async def run(self, duration_s: float, report: Callable[[str], None]) -> None:
        period_ns = round(1e9 / self.hz)
        pad = bytes(self.nbytes - _PING.size)
        t0 = time.monotonic_ns()
        next_report = t0 + 1_000_000_000
        n_total = max(1, round(duration_s * self.hz))
        for k in range(n_total):
            target = t0 + k * period_ns
            await asyncio.sleep(max(target - time.monotonic_ns(), 0) / 1e9)
            now = time.monotonic_ns()
            if now >= next_report:
                # The pings of the second that ended, and the echoes that came in it.
                report(self.line("last 1 s", self._window, self._window_sent))
                self._window, self._window_sent = [], 0
                next_report += 1_000_000_000
            self._sent[k] = now
            if len(self._sent) > 10_000:
                self._sent.pop(next(iter(self._sent)))
            self.sent += 1
            self._window_sent += 1
            if self._ch.send(_PING.pack(_MAGIC, self._port, k, now) + pad) == "failed":
                self.failed += 1
        await asyncio.sleep(min(1.0, 10 / self.hz))  # the last echoes' way back
        report(self.line("total", self.rtts_ns, self.sent))

    def line(self, what: str, rtts: list[int], sent: int) -> str:
        """One report: ``rtts`` (echoes) and ``sent`` (pings) over the same span."""
        if not rtts:
            return f"coorp ls: {what}: 0 echoed / {sent} sent to {self.dest}"
        a = np.array(rtts) / 1e6
        st = self._ch.stats  # the receiver's counts, as of its last keep-alive answer
        receiver = "receiver" if what == "total" else "receiver so far"
        return (
            f"coorp ls: {what}: {len(rtts)} echoed / {sent} sent to {self.dest} "
            f"({self.hz:g} Hz, {self.nbytes} B): round trip p50 {np.percentile(a, 50):.2f} ms, "
            f"p99 {np.percentile(a, 99):.2f} ms, max {a.max():.2f} ms; one way ≈ half; "
            f"{receiver}: {st.received} received, {st.lost} lost, {st.reordered} reordered"
        )
