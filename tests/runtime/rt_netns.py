"""A throw-away network of Linux namespaces for runtime tests.

Layout (all names start with a per-run prefix ``coorpt-<pid>-<n>-``): a switch
namespace ``sw`` holding bridge ``br0``, and one namespace per host (``ld`` for the
leader, ``a1``.. for agents), each wired to the bridge by a veth pair created *inside*
the namespaces (no interface ever appears in the root namespace). Hosts get
10.231.0.x/24 on their ``eth0``; only these addresses are ever used. The bridge port
towards the leader can be shaped with ``tbf`` so that a queue builds there, like the
shared channel in front of the leader.

:meth:`Topology.destroy` kills every process the test started (by pid) and deletes
the namespaces; it runs from a fixture's ``finally``, so it happens even when the test
fails.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Sequence

_counter = itertools.count()


def netns_unavailable() -> str | None:
    """Why namespace tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "not root: network namespace tests need CAP_SYS_ADMIN/CAP_NET_ADMIN"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if shutil.which("tc") is None:
        return "the 'tc' command (iproute2) is not installed"
    name = f"coorpt-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Proc:
    """A process started in a namespace; its stdout is read line by line with timeouts."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.popen = popen
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        assert popen.stdout is not None
        os.set_blocking(popen.stdout.fileno(), False)
        self._sel.register(popen.stdout, selectors.EVENT_READ)
        self.lines: list[str] = []

    def read_line(self, timeout: float) -> str | None:
        """The next stdout line, or None at EOF/timeout."""
        deadline = time.monotonic() + timeout
        assert self.popen.stdout is not None
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._sel.select(remaining):
                return None
            chunk = self.popen.stdout.read(65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        text = line.decode(errors="replace")
        self.lines.append(text)
        return text

    def expect(self, prefix: str, timeout: float, *, anywhere: bool = False) -> str:
        """Read lines until one starts with ``prefix`` (contains it, if ``anywhere``);
        AssertionError on timeout/EOF."""
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            line = self.read_line(max(deadline - time.monotonic(), 0))
            if line is None:
                break
            if line.startswith(prefix) or (anywhere and prefix in line):
                return line
        err = b""
        if self.popen.poll() is not None and self.popen.stderr is not None:
            err = self.popen.stderr.read() or b""
        raise AssertionError(
            f"{self.name}: no line starting with {prefix!r} within {timeout} s; "
            f"got {self.lines[-5:]}; exit={self.popen.poll()}; stderr tail: "
            f"{err.decode(errors='replace')[-2000:]}"
        )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._sel.close()

    def stderr_tail(self) -> str:
        if self.popen.poll() is None or self.popen.stderr is None:
            return ""
        return (self.popen.stderr.read() or b"").decode(errors="replace")[-3000:]


class Topology:
    """Leader + agents behind one bridge; the leader's port shaped with tbf."""

    SUBNET = "10.231.0"

    def __init__(self, agents: int) -> None:
        self.prefix = f"coorpt-{os.getpid()}-{next(_counter)}-"
        self.hosts = ["ld"] + [f"a{i}" for i in range(1, agents + 1)]
        self.created: list[str] = []
        self.procs: list[Proc] = []

    def ns(self, host: str) -> str:
        return self.prefix + host

    def addr(self, host: str) -> str:
        return f"{self.SUBNET}.{1 if host == 'ld' else 10 + int(host[1:])}"

    def create(self, *, rate_mbit: float, queue_ms: float) -> None:
        sw = self.ns("sw")
        for name in [sw, *(self.ns(h) for h in self.hosts)]:
            _ip("netns", "add", name)
            self.created.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            port = f"p{i}"
            _ip(
                "-n",
                sw,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                self.ns(host),
            )
            _ip("-n", sw, "link", "set", port, "master", "br0")
            _ip("-n", sw, "link", "set", port, "up")
            _ip("-n", self.ns(host), "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            _ip("-n", self.ns(host), "link", "set", "eth0", "up")
        # The queue in front of the leader: everything sent to it shares one FIFO.
        r = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                sw,
                "tc",
                "qdisc",
                "add",
                "dev",
                "p0",
                "root",
                "tbf",
                "rate",
                f"{rate_mbit}mbit",
                "burst",
                "32kb",
                "latency",
                f"{queue_ms}ms",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if r.returncode != 0:
            raise RuntimeError(f"tc tbf: {r.stderr.strip()}")

    def start(self, host: str, argv: Sequence[str], name: str | None = None) -> Proc:
        popen = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc = Proc(name or host, popen)
        self.procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], timeout: float = 30) -> str:
        r = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode != 0:
            raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr[-2000:]}")
        return r.stdout

    def destroy(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.kill()
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.created.clear()
