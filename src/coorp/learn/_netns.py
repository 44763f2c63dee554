"""A throw-away network of Linux namespaces for ``coorp learn --runtime``
(:mod:`coorp._netns`).

``split`` (the runtime tests' layout): robots (``ld`` for the leader, ``w1``.. for
workers) on one bridge, ``10.232.0.x/24``; both directions through the leader shaped
with ``tbf`` at one rate (the bridge port towards the leader, and the leader's own
``eth0``): like the shared channel in front of an access point, every robot's uplink
meets one FIFO, and the leader's downlink another, where its control messages wait
behind its model broadcast unless local preemption holds the bulk back. ``shared``: one
shaped queue for every packet, both ways (:meth:`StarNetwork.create_shared`).

Names start with ``coorpl-<pid>-<n>-``; :meth:`Topology.destroy` kills the processes
started here (by pid) and deletes the namespaces, from the caller's ``finally``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from coorp._errors import UsageError
from coorp._netns import StarNetwork, shape
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

    def create(  # type: ignore[override]
        self, *, rate_mbit: float, queue_ms: float, downlink: bool = True
    ) -> None:
        if self.medium == "shared":
            self.create_shared(rate_mbit=rate_mbit, queue_ms=queue_ms)
            return
        super().create()
        # Uplink: everything sent to the leader shares the FIFO of its bridge port.
        shape(self.ns("sw"), self.port("ld"), rate_mbit=rate_mbit, queue_ms=queue_ms)
        if downlink:  # the leader's own interface (its NIC's queue)
            shape(self.ns("ld"), "eth0", rate_mbit=rate_mbit, queue_ms=queue_ms)

    def popen(  # type: ignore[override]
        self, host: str | None, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: here, on loopback); stdout piped
        (the roles print one ``READY`` line), stderr to ``log``."""
        with log.open("ab") as err:
            return super().popen(host, argv, env=env, stderr=err)
