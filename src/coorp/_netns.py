"""Throw-away networks of Linux namespaces: hosts around one bridge, a shaped bottleneck,
processes started inside, everything removed afterwards.

Used by the runtime's namespace tests, ``coorp learn --runtime`` and ``coorp bench
team``. Layout of :class:`StarNetwork`: a switch namespace ``sw`` holding bridge
``br0``, and one namespace per host, each wired to the bridge by a veth pair created
*inside* the namespaces (no interface ever appears in the root namespace). Every name
starts with a per-run prefix (``<tag>-<pid>-<n>-``), so concurrent runs never collide;
host ``ld`` gets ``<subnet>.1``, host ``x<k>`` gets ``<subnet>.<10 + k>``.

:meth:`StarNetwork.destroy` kills every process started through it (by pid) and deletes
its namespaces; call it on every exit path (it is also the context manager's exit).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import IO

from coorp._errors import ConfigurationError

__all__ = [
    "QDISCS",
    "ExpectTimeout",
    "Proc",
    "StarNetwork",
    "netns_unavailable",
    "probe_qdiscs",
    "run_checked",
    "shape",
]

#: Qdiscs :func:`probe_qdiscs` reports (:func:`shape` uses the first of tbf, htb).
QDISCS = ("tbf", "htb", "netem", "fq_codel", "cake")

_counter = itertools.count()


def netns_unavailable(tag: str = "coorp") -> str | None:
    """Why namespaces cannot be made here, or None if they can (a probe is created and
    deleted)."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command (iproute2) is not installed"
    name = f"{tag}-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


def run_checked(argv: Sequence[str]) -> str:
    """Run a setup command (10 s at most); its stdout, or ConfigurationError naming it."""
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise ConfigurationError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


def probe_qdiscs(ns: str, dev: str, qdiscs: Sequence[str] = QDISCS) -> dict[str, bool]:
    """Which ``qdiscs`` this kernel can attach (each tried, then removed, on ``dev``)."""
    out = {}
    for q in qdiscs:
        args = {"tbf": ["rate", "1mbit", "burst", "32kb", "latency", "10ms"],
                "htb": ["default", "1"]}.get(q, [])  # fmt: skip
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc"]
        r = subprocess.run([*tc, "add", "dev", dev, "root", q, *args], capture_output=True,
                           timeout=10)  # fmt: skip
        out[q] = r.returncode == 0
        subprocess.run([*tc, "del", "dev", dev, "root"], capture_output=True, timeout=10)
    return out


def shape(
    ns: str,
    dev: str,
    *,
    rate_mbit: float,
    queue_ms: float,
    qdiscs: Mapping[str, bool] | None = None,
) -> str:
    """Make ``dev`` in ``ns`` a bottleneck of ``rate_mbit`` with at most ``queue_ms`` of
    queue: ``tbf``, or ``htb`` + ``bfifo`` where tbf is missing (``qdiscs``, from
    :func:`probe_qdiscs`; None: assume tbf). Returns the shaper used."""
    tc = ["ip", "netns", "exec", ns, "tc"]
    if qdiscs is None or qdiscs.get("tbf"):
        run_checked([*tc, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                     "burst", "32kb", "latency", f"{queue_ms}ms"])  # fmt: skip
        return "tbf"
    if qdiscs.get("htb"):
        limit = max(int(rate_mbit * 1e6 / 8 * queue_ms / 1e3), 16_000)
        run_checked([*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                     "default", "10"])  # fmt: skip
        run_checked([*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                     "rate", f"{rate_mbit}mbit", "ceil", f"{rate_mbit}mbit"])  # fmt: skip
        run_checked([*tc, "qdisc", "add", "dev", dev, "parent", "1:10", "bfifo", "limit",
                     str(limit)])  # fmt: skip
        return "htb"
    raise ConfigurationError("neither the tbf nor the htb qdisc is available: cannot shape")


class ExpectTimeout(RuntimeError, AssertionError):
    """A process did not print the expected line in time (an AssertionError in tests)."""


class Proc:
    """A process started in a namespace: lines to its stdin, its stdout read line by line
    with timeouts."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.popen = popen
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        assert popen.stdout is not None
        os.set_blocking(popen.stdout.fileno(), False)
        self._sel.register(popen.stdout, selectors.EVENT_READ)
        #: The lines read so far (the newest 200).
        self.lines: list[str] = []

    def send(self, line: str) -> None:
        if self.popen.stdin is None:
            raise RuntimeError(f"{self.name}: started without a stdin pipe")
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
        del self.lines[:-200]
        return text

    def expect(self, prefix: str, timeout: float, *, anywhere: bool = False) -> str:
        """The next line starting with ``prefix`` (containing it, if ``anywhere``);
        :class:`ExpectTimeout` at timeout or EOF."""
        deadline = time.monotonic() + timeout
        for _ in range(100_000):
            line = self.read_line(max(deadline - time.monotonic(), 0))
            if line is None:
                break
            if line.startswith(prefix) or (anywhere and prefix in line):
                return line
        raise ExpectTimeout(
            f"{self.name}: no line starting with {prefix!r} within {timeout:g} s; last lines "
            f"{self.lines[-5:]}; exit={self.popen.poll()}; stderr tail: {self.stderr_tail()}"
        )

    def expect_rest(self, prefix: str, timeout: float) -> str:
        """:meth:`expect`, returning what follows ``prefix`` on the line."""
        return self.expect(prefix, timeout).removeprefix(prefix)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._sel.close()

    def stderr_tail(self) -> str:
        """The end of stderr once the process has exited (reading earlier would block)."""
        if self.popen.poll() is None or self.popen.stderr is None:
            return "(still running)"
        with contextlib.suppress(OSError, ValueError):
            return (self.popen.stderr.read() or b"").decode(errors="replace")[-3000:]
        return ""


class NamespacePrograms:
    """Programs started in a set of namespaces and stopped together: what a star of
    namespaces (:class:`StarNetwork`) and the emulated channel
    (``coorp.emulate.Emulation``) share. A subclass provides :meth:`ns`, :meth:`popen`
    (which appends to ``popens``) and the two lists."""

    popens: list[subprocess.Popen[bytes]]
    procs: list[Proc]

    def ns(self, host: str) -> str:
        raise NotImplementedError

    def popen(
        self,
        host: str | None,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
    ) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def start(
        self,
        host: str,
        argv: Sequence[str],
        name: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
    ) -> Proc:
        """:meth:`popen` wrapped in a :class:`Proc` (stdout read line by line with
        timeouts, stderr piped)."""
        proc = Proc(name or host, self.popen(host, argv, env=env, stdin=stdin))
        self.procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], timeout: float = 30) -> str:
        """Run ``argv`` to its end in ``host``'s namespace; its stdout."""
        r = subprocess.run(["ip", "netns", "exec", self.ns(host), *argv], capture_output=True,
                           text=True, timeout=timeout)  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr[-2000:]}")
        return r.stdout

    def stop_procs(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.kill()
        for p in self.popens:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self.procs.clear()
        self.popens.clear()


class StarNetwork(NamespacePrograms):
    """Hosts around one bridge in namespace ``sw`` (see the module docstring)."""

    def __init__(self, hosts: Sequence[str], *, tag: str, subnet: str) -> None:
        if not hosts or hosts[0] != "ld" or any(not h[1:].isdigit() for h in hosts[1:]):
            raise ValueError(f"hosts={list(hosts)}: 'ld' first, then names like 'r1', 'r2'")
        self.prefix = f"{tag}-{os.getpid()}-{next(_counter)}-"
        self.hosts = list(hosts)
        self.subnet = subnet
        self.created: list[str] = []
        self.popens: list[subprocess.Popen[bytes]] = []
        self.procs: list[Proc] = []

    def ns(self, host: str) -> str:
        return self.prefix + host

    #: ``split``: hosts on the bridge (:meth:`create`); ``shared``: hosts around one
    #: queue for every packet, both ways (:meth:`create_shared`).
    medium = "split"

    def index(self, host: str) -> int:
        return 0 if host == "ld" else int(host[1:])

    def addr(self, host: str) -> str:
        if self.medium == "shared":
            return f"10.233.{self.index(host)}.2"
        return f"{self.subnet}.{1 if host == 'ld' else 10 + int(host[1:])}"

    def add_namespaces(self, names: Sequence[str]) -> None:
        """Create namespaces (recorded for :meth:`destroy`) with their loopback up."""
        for name in names:
            run_checked(["ip", "netns", "add", name])
            self.created.append(name)
            run_checked(["ip", "-n", name, "link", "set", "lo", "up"])

    def create(self, *, sysctls: Sequence[str] = ()) -> None:
        """The switch, the bridge and every host on it (``sysctls`` set in each host)."""
        sw = self.ns("sw")
        self.add_namespaces([sw, *(self.ns(h) for h in self.hosts)])
        run_checked(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        run_checked(["ip", "-n", sw, "link", "set", "br0", "up"])
        for host in self.hosts:
            port, ns = self.port(host), self.ns(host)
            run_checked(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name",
                         "eth0", "netns", ns])  # fmt: skip
            run_checked(["ip", "-n", sw, "link", "set", port, "master", "br0"])
            run_checked(["ip", "-n", sw, "link", "set", port, "up"])
            run_checked(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            run_checked(["ip", "-n", ns, "link", "set", "eth0", "up"])
            if sysctls:
                run_checked(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *sysctls])

    def create_shared(
        self, *, rate_mbit: float, queue_ms: float, sysctls: Sequence[str] = ()
    ) -> None:
        """One FIFO for every packet between hosts, both directions: each host hangs off
        a hub ``ap`` on its own /24 (``10.233.<i>.2``); the hub sends everything a host
        sent out of ``air0`` (shaped) to a reflector ``rf``, which hands it back, and the
        hub then delivers it. Like one WiFi channel, an upload and a download share the
        queue. Sets :attr:`medium` to ``shared``."""
        self.medium = "shared"
        ap, rf = self.ns("ap"), self.ns("rf")
        self.add_namespaces([ap, rf, *(self.ns(h) for h in self.hosts)])
        for ns in (ap, rf):
            for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                        "net.ipv4.conf.default.rp_filter=0",
                        "net.ipv4.conf.all.send_redirects=0",
                        "net.ipv4.conf.default.send_redirects=0"):  # fmt: skip
                run_checked(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", key])
        run_checked(["ip", "-n", ap, "link", "add", "air0", "type", "veth", "peer", "name",
                     "air1", "netns", rf])  # fmt: skip
        run_checked(["ip", "-n", ap, "addr", "add", "10.233.250.1/24", "dev", "air0"])
        run_checked(["ip", "-n", rf, "addr", "add", "10.233.250.2/24", "dev", "air1"])
        run_checked(["ip", "-n", ap, "link", "set", "air0", "up"])
        run_checked(["ip", "-n", rf, "link", "set", "air1", "up"])
        run_checked(["ip", "-n", rf, "route", "add", "default", "via", "10.233.250.1"])
        run_checked(
            ["ip", "-n", ap, "route", "add", "default", "via", "10.233.250.2", "table", "100"]
        )
        for host in self.hosts:
            i, ns = self.index(host), self.ns(host)
            port = f"h{i}"
            run_checked(["ip", "-n", ap, "link", "add", port, "type", "veth", "peer", "name",
                         "eth0", "netns", ns])  # fmt: skip
            run_checked(["ip", "-n", ap, "addr", "add", f"10.233.{i}.1/24", "dev", port])
            run_checked(["ip", "-n", ap, "link", "set", port, "up"])
            run_checked(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            run_checked(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run_checked(["ip", "-n", ns, "route", "add", "default", "via", f"10.233.{i}.1"])
            run_checked(["ip", "-n", ap, "rule", "add", "iif", port, "table", "100"])
            if sysctls:
                run_checked(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *sysctls])
        shape(ap, "air0", rate_mbit=rate_mbit, queue_ms=queue_ms)

    def port(self, host: str) -> str:
        """The bridge port towards ``host`` (in namespace ``sw``)."""
        return f"p{self.hosts.index(host)}"

    def popen(
        self,
        host: str | None,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        stderr: int | IO[bytes] = subprocess.PIPE,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: here), stdout piped; killed by
        :meth:`destroy`."""
        pre = [] if host is None else ["ip", "netns", "exec", self.ns(host)]
        p = subprocess.Popen(
            [*pre, *argv], stdin=subprocess.PIPE if stdin else None, stdout=subprocess.PIPE,
            stderr=stderr, env=None if env is None else dict(env),
        )  # fmt: skip
        self.popens.append(p)
        return p

    def destroy(self) -> None:
        self.stop_procs()
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.created.clear()

    def __enter__(self) -> StarNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
