"""A throw-away network of Linux namespaces for ``coorp learn --runtime``
(:mod:`coorp._netns`).

``split`` (the runtime tests' layout): robots (``ld`` for the leader, ``w1``.. for
workers) on one bridge, ``10.232.0.x/24``; both directions through the leader shaped
with ``tbf`` at one rate (the bridge port towards the leader, and the leader's own
``eth0``): like the shared channel in front of an access point, every robot's uplink
meets one FIFO, and the leader's downlink another, where its control messages wait
behind its model broadcast unless local preemption holds the bulk back. ``shared``: one
shaped queue for every packet, both ways (:meth:`Topology._create_shared`).

Names start with ``coorpl-<pid>-<n>-``; :meth:`Topology.destroy` kills the processes
started here (by pid) and deletes the namespaces, from the caller's ``finally``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from coorp._errors import UsageError
from coorp._netns import StarNetwork, run_checked, shape
from coorp._netns import netns_unavailable as _netns_unavailable

__all__ = ["MEDIA", "Topology", "netns_unavailable"]

#: ``split``: the uplink to the leader and its downlink are two shaped queues (the
#: runtime tests' layout); ``shared``: one shaped queue for every packet, both ways.
MEDIA = ("split", "shared")


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None if they can."""
    return _netns_unavailable("coorpl")


class Topology(StarNetwork):
    """Leader + workers behind one bridge; both directions through the leader shaped."""

    def __init__(self, workers: int, *, medium: str = "split") -> None:
        if medium not in MEDIA:
            raise UsageError(f"--medium must be one of {', '.join(MEDIA)}, got {medium!r}")
        super().__init__(["ld", *(f"w{i}" for i in range(1, workers + 1))],
                         tag="coorpl", subnet="10.232.0")  # fmt: skip
        self.medium = medium

    def _index(self, host: str) -> int:
        return 0 if host == "ld" else int(host[1:])

    def addr(self, host: str) -> str:
        if self.medium == "shared":
            return f"10.233.{self._index(host)}.2"
        return super().addr(host)

    def create(  # type: ignore[override]
        self, *, rate_mbit: float, queue_ms: float, downlink: bool = True
    ) -> None:
        if self.medium == "shared":
            self._create_shared(rate_mbit=rate_mbit, queue_ms=queue_ms)
            return
        super().create()
        # Uplink: everything sent to the leader shares the FIFO of its bridge port.
        shape(self.ns("sw"), self.port("ld"), rate_mbit=rate_mbit, queue_ms=queue_ms)
        if downlink:  # the leader's own interface (its NIC's queue)
            shape(self.ns("ld"), "eth0", rate_mbit=rate_mbit, queue_ms=queue_ms)

    def _create_shared(self, *, rate_mbit: float, queue_ms: float) -> None:
        """One FIFO for every packet between robots, both directions: each robot hangs
        off a hub ``ap`` on its own /24; the hub sends everything a robot sent out of
        ``air0`` (shaped) to a reflector ``rf``, which hands it back, and the hub then
        delivers it. Like one WiFi channel, an upload and a download share the queue."""
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
            i, ns = self._index(host), self.ns(host)
            port = f"h{i}"
            run_checked(["ip", "-n", ap, "link", "add", port, "type", "veth", "peer", "name",
                         "eth0", "netns", ns])  # fmt: skip
            run_checked(["ip", "-n", ap, "addr", "add", f"10.233.{i}.1/24", "dev", port])
            run_checked(["ip", "-n", ap, "link", "set", port, "up"])
            run_checked(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            run_checked(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run_checked(["ip", "-n", ns, "route", "add", "default", "via", f"10.233.{i}.1"])
            run_checked(["ip", "-n", ap, "rule", "add", "iif", port, "table", "100"])
        shape(ap, "air0", rate_mbit=rate_mbit, queue_ms=queue_ms)

    def popen(  # type: ignore[override]
        self, host: str | None, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: here, on loopback); stdout piped
        (the roles print one ``READY`` line), stderr to ``log``."""
        with log.open("ab") as err:
            return super().popen(host, argv, env=env, stderr=err)
