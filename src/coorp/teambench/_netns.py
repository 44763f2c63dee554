"""A throw-away network of Linux namespaces: a leader and robots on one bridge.

Layout (every name starts with ``coorptb-<pid>-<n>-``): a switch namespace ``sw`` with
bridge ``br0`` and one namespace per host (``ld`` for the leader, ``r1``.. for robots),
each wired to the bridge by a veth pair created inside the namespaces (nothing appears in
the root namespace). Hosts get 10.232.0.x/24. The bottleneck is the leader's link, shaped
in both directions (the bridge port towards the leader and the leader's own interface)
with ``tbf`` (or ``htb`` + ``bfifo`` where tbf is missing): everything the robots send
to the leader shares one FIFO, like the air in front of it, and so do the echoes back.
Hosts keep incomplete IP datagrams for :data:`IPFRAG_TIME_S` instead of 30 s (see
:meth:`Network.create`).

:meth:`Network.destroy` kills every process started here (by pid) and deletes the
namespaces; the runner calls it on every exit path. Same pattern as
``tests/runtime/rt_netns.py`` (which tests may not import from a package).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from coorp._errors import ConfigurationError

__all__ = ["QDISCS", "Network", "Proc", "netns_unavailable", "probe_qdiscs"]

_counter = itertools.count()
#: Qdiscs probed and reported (the bottleneck uses the first of tbf, htb that exists).
QDISCS = ("tbf", "htb", "netem", "fq_codel", "cake")
SUBNET = "10.232.0"
#: How long a host keeps the fragments of an incomplete datagram (Linux: 30 s).
IPFRAG_TIME_S = 1


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here, or None if they can."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the '{tool}' command (iproute2) is not installed"
    name = f"coorptb-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=10)


def _ip(*args: str) -> None:
    r = _run(["ip", *args])
    if r.returncode != 0:
        raise ConfigurationError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def probe_qdiscs(ns: str, dev: str) -> dict[str, bool]:
    """Which of :data:`QDISCS` this kernel can attach (tried on ``dev`` in ``ns``)."""
    out = {}
    for q in QDISCS:
        args = {"tbf": ["rate", "1mbit", "burst", "32kb", "latency", "10ms"],
                "htb": ["default", "1"]}.get(q, [])  # fmt: skip
        r = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", q, *args])
        out[q] = r.returncode == 0
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"])
    return out


class Proc:
    """A process started in a namespace: commands on stdin, ``KEY {json}`` lines back."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.popen = popen
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        assert popen.stdout is not None
        os.set_blocking(popen.stdout.fileno(), False)
        self._sel.register(popen.stdout, selectors.EVENT_READ)
        self.lines: list[str] = []

    def send(self, line: str) -> None:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise RuntimeError(f"{self.name}: exited ({exc}); {self.stderr_tail()}") from None

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
        del self.lines[:-20]
        return text

    def expect(self, prefix: str, timeout: float) -> str:
        """The rest of the next line starting with ``prefix``; RuntimeError on timeout/EOF."""
        deadline = time.monotonic() + timeout
        for _ in range(100_000):
            line = self.read_line(max(deadline - time.monotonic(), 0))
            if line is None:
                break
            if line.startswith(prefix):
                return line.removeprefix(prefix)
        raise RuntimeError(
            f"{self.name}: no {prefix.strip()!r} line within {timeout:g} s; last lines "
            f"{self.lines[-3:]}; exit={self.popen.poll()}; stderr: {self.stderr_tail()}"
        )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._sel.close()

    def stderr_tail(self) -> str:
        if self.popen.poll() is None or self.popen.stderr is None:
            return "(still running)"
        with contextlib.suppress(OSError, ValueError):
            return (self.popen.stderr.read() or b"").decode(errors="replace")[-1500:]
        return ""


class Network:
    """Leader + ``robots`` hosts behind one bridge, the leader's link the bottleneck."""

    def __init__(self, robots: int) -> None:
        self.prefix = f"coorptb-{os.getpid()}-{next(_counter)}-"
        self.hosts = ["ld"] + [f"r{i}" for i in range(1, robots + 1)]
        self.created: list[str] = []
        self.procs: list[Proc] = []
        self.qdiscs: dict[str, bool] = {}
        self.shaper = ""

    def ns(self, host: str) -> str:
        return self.prefix + host

    def addr(self, host: str) -> str:
        return f"{SUBNET}.{1 if host == 'ld' else 10 + int(host[1:])}"

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
            _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", self.ns(host))  # fmt: skip
            _ip("-n", sw, "link", "set", port, "master", "br0")
            _ip("-n", sw, "link", "set", port, "up")
            _ip("-n", self.ns(host), "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            _ip("-n", self.ns(host), "link", "set", "eth0", "up")
            # IP reassembly: a datagram that lost a fragment at the bottleneck holds its
            # other fragments for ipfrag_time (30 s by default), and past ipfrag_high_thresh
            # (4 MB) every new fragment is dropped; after an overloaded cell, messages
            # larger than the MTU would be lost for half a minute. 1 s keeps cells apart.
            r = _run(["ip", "netns", "exec", self.ns(host), "sysctl", "-q", "-w",
                      f"net.ipv4.ipfrag_time={IPFRAG_TIME_S}",
                      "net.ipv4.ipfrag_high_thresh=33554432",
                      "net.ipv4.ipfrag_low_thresh=25165824"])  # fmt: skip
            if r.returncode != 0:
                raise ConfigurationError(f"sysctl ipfrag in {host}: {r.stderr.strip()}")
        self.qdiscs = probe_qdiscs(sw, "p0")
        for ns, dev in ((sw, "p0"), (self.ns("ld"), "eth0")):
            self._shape(ns, dev, rate_mbit, queue_ms)

    def _shape(self, ns: str, dev: str, rate_mbit: float, queue_ms: float) -> None:
        tc = ["ip", "netns", "exec", ns, "tc"]
        if self.qdiscs.get("tbf"):
            self.shaper = "tbf"
            steps = [[*tc, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                      "burst", "32kb", "latency", f"{queue_ms}ms"]]  # fmt: skip
        elif self.qdiscs.get("htb"):
            self.shaper = "htb"
            limit = max(int(rate_mbit * 1e6 / 8 * queue_ms / 1e3), 16_000)
            steps = [
                [*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"],
                [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                 "rate", f"{rate_mbit}mbit", "ceil", f"{rate_mbit}mbit"],
                [*tc, "qdisc", "add", "dev", dev, "parent", "1:10", "bfifo", "limit", str(limit)],
            ]  # fmt: skip
        else:
            raise ConfigurationError(
                "neither the tbf nor the htb qdisc is available: cannot shape the bottleneck"
            )
        for argv in steps:
            r = _run(argv)
            if r.returncode != 0:
                raise ConfigurationError(f"{' '.join(argv[4:])}: {r.stderr.strip()}")

    def start(self, host: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              name: str | None = None) -> Proc:  # fmt: skip
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        popen = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), "env", "PYTHONUNBUFFERED=1", *envs, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        proc = Proc(name or host, popen)
        self.procs.append(proc)
        return proc

    def python(self) -> list[str]:
        return [sys.executable, "-m", "coorp.teambench._roles"]

    def stop_procs(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.kill()
        self.procs.clear()

    def destroy(self) -> None:
        self.stop_procs()
        for name in reversed(self.created):
            _run(["ip", "netns", "del", name])
        self.created.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
