"""A throw-away network of Linux namespaces for ``coorp learn --runtime``.

The same layout as the runtime's namespace tests (``tests/runtime/rt_netns.py``): a
switch namespace holding bridge ``br0`` and one namespace per robot (``ld`` for the
leader, ``w1``.. for workers), each wired to the bridge by a veth pair created inside
the namespaces (no interface appears in the root namespace). Robots get
``10.232.0.x/24``. Both directions through the leader are shaped with ``tbf`` at one
rate (the bridge port towards the leader, and the leader's own ``eth0``): like the
shared channel in front of an access point, every robot's uplink meets one FIFO, and
the leader's downlink another, where its control messages wait behind its model
broadcast unless local preemption holds the bulk back.

Names start with ``coorpl-<pid>-<n>-``; :meth:`Topology.destroy` kills the processes
started here (by pid) and deletes the namespaces, from the caller's ``finally``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from coorp._errors import ConfigurationError, UsageError

__all__ = ["MEDIA", "Topology", "netns_unavailable"]

#: ``split``: the uplink to the leader and its downlink are two shaped queues (the
#: runtime tests' layout); ``shared``: one shaped queue for every packet, both ways.
MEDIA = ("split", "shared")

_counter = itertools.count()


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN/CAP_NET_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command (iproute2) is not installed"
    name = f"coorpl-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


def _run(argv: Sequence[str]) -> None:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise ConfigurationError(f"{' '.join(argv)}: {r.stderr.strip()}")


class Topology:
    """Leader + workers behind one bridge; both directions through the leader shaped."""

    SUBNET = "10.232.0"

    def __init__(self, workers: int, *, medium: str = "split") -> None:
        if medium not in MEDIA:
            raise UsageError(f"--medium must be one of {', '.join(MEDIA)}, got {medium!r}")
        self.prefix = f"coorpl-{os.getpid()}-{next(_counter)}-"
        self.hosts = ["ld"] + [f"w{i}" for i in range(1, workers + 1)]
        self.medium = medium
        self.created: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def ns(self, host: str) -> str:
        return self.prefix + host

    def _index(self, host: str) -> int:
        return 0 if host == "ld" else int(host[1:])

    def addr(self, host: str) -> str:
        if self.medium == "shared":
            return f"10.233.{self._index(host)}.2"
        return f"{self.SUBNET}.{1 if host == 'ld' else 10 + int(host[1:])}"

    def create(self, *, rate_mbit: float, queue_ms: float, downlink: bool = True) -> None:
        if self.medium == "shared":
            self._create_shared(rate_mbit=rate_mbit, queue_ms=queue_ms)
            return
        sw = self.ns("sw")
        for name in [sw, *(self.ns(h) for h in self.hosts)]:
            _run(["ip", "netns", "add", name])
            self.created.append(name)
            _run(["ip", "-n", name, "link", "set", "lo", "up"])
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            port, ns = f"p{i}", self.ns(host)
            _run(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                  "netns", ns])  # fmt: skip
            _run(["ip", "-n", sw, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", sw, "link", "set", port, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", "32kb", "latency", f"{queue_ms}ms"]
        # Uplink: everything sent to the leader shares the FIFO of its bridge port.
        _run(["ip", "netns", "exec", sw, "tc", "qdisc", "add", "dev", "p0", "root", *tbf])
        if not downlink:
            return
        # Downlink: the leader's own interface (its NIC's queue).
        _run(["ip", "netns", "exec", self.ns("ld"), "tc", "qdisc", "add", "dev", "eth0", "root",
              *tbf])  # fmt: skip

    def _create_shared(self, *, rate_mbit: float, queue_ms: float) -> None:
        """One FIFO for every packet between robots, both directions: each robot hangs
        off a hub ``ap`` on its own /24; the hub sends everything a robot sent out of
        ``air0`` (shaped) to a reflector ``rf``, which hands it back, and the hub then
        delivers it. Like one WiFi channel, an upload and a download share the queue."""
        ap, rf = self.ns("ap"), self.ns("rf")
        for name in [ap, rf, *(self.ns(h) for h in self.hosts)]:
            _run(["ip", "netns", "add", name])
            self.created.append(name)
            _run(["ip", "-n", name, "link", "set", "lo", "up"])
        for ns in (ap, rf):
            for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                        "net.ipv4.conf.default.rp_filter=0",
                        "net.ipv4.conf.all.send_redirects=0",
                        "net.ipv4.conf.default.send_redirects=0"):  # fmt: skip
                _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", key])
        _run(["ip", "-n", ap, "link", "add", "air0", "type", "veth", "peer", "name", "air1",
              "netns", rf])  # fmt: skip
        _run(["ip", "-n", ap, "addr", "add", "10.233.250.1/24", "dev", "air0"])
        _run(["ip", "-n", rf, "addr", "add", "10.233.250.2/24", "dev", "air1"])
        _run(["ip", "-n", ap, "link", "set", "air0", "up"])
        _run(["ip", "-n", rf, "link", "set", "air1", "up"])
        _run(["ip", "-n", rf, "route", "add", "default", "via", "10.233.250.1"])
        _run(["ip", "-n", ap, "route", "add", "default", "via", "10.233.250.2", "table", "100"])
        for host in self.hosts:
            i, ns = self._index(host), self.ns(host)
            port = f"h{i}"
            _run(["ip", "-n", ap, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                  "netns", ns])  # fmt: skip
            _run(["ip", "-n", ap, "addr", "add", f"10.233.{i}.1/24", "dev", port])
            _run(["ip", "-n", ap, "link", "set", port, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "route", "add", "default", "via", f"10.233.{i}.1"])
            _run(["ip", "-n", ap, "rule", "add", "iif", port, "table", "100"])
        tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", "32kb", "latency", f"{queue_ms}ms"]
        _run(["ip", "netns", "exec", ap, "tc", "qdisc", "add", "dev", "air0", "root", *tbf])

    def popen(
        self, host: str | None, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: here, on loopback); stdout piped
        (the roles print one ``READY`` line), stderr to ``log``."""
        pre = [] if host is None else ["ip", "netns", "exec", self.ns(host)]
        with log.open("ab") as err:
            p = subprocess.Popen([*pre, *argv], stdout=subprocess.PIPE, stderr=err, env=dict(env))
        self.procs.append(p)
        return p

    def destroy(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.created.clear()
