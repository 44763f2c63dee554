"""Where ``coorp learn --runtime`` runs the team's processes: a :class:`RuntimeNetwork`.

The orchestrator asks a network only for a robot's address, to start a process as a
robot, what the network has to report once the processes ended, and to remove
everything. Two kinds come from here (:func:`wired`): loopback, and the namespaces of
:mod:`coorp.learn._netns` (``split`` and ``shared``, a shaped wired queue). Any other
network with the same four methods can carry a run: ``coorp learn --runtime --medium
wifi`` passes one over the emulated WiFi channel (built by the CLI, which may import
``coorp.emulate``; this package may not: the two are peers).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["NetworkFactory", "RuntimeNetwork", "wired"]


class RuntimeNetwork(Protocol):
    """A network the team's processes run on, up from its creation until
    :meth:`destroy`."""

    def addr(self, robot: str) -> str:
        """The IPv4 address ``robot``'s processes bind and are reached at."""
        ...

    def popen(
        self, robot: str, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as ``robot`` (stdout piped, stderr appended to ``log``); the
        process is ended by :meth:`destroy` at the latest."""
        ...

    def finish(self) -> dict[str, Any] | None:
        """Once every process ended: what the network reports about the run (JSON
        data), or None."""
        ...

    def destroy(self) -> None:
        """Kill every process started here and remove what was made (every exit path;
        safe to call twice)."""
        ...


#: Makes the network of one run, up: ``(leader, workers, seed) -> network``.
NetworkFactory = Callable[[str, Sequence[str], int], RuntimeNetwork]


class _Wired:
    """The team on :class:`coorp.learn._netns.Topology` (``ld``, ``w1``..), or on
    loopback when ``net`` is ``loopback`` (every process here, ``127.0.0.1``)."""

    def __init__(
        self,
        leader: str,
        workers: Sequence[str],
        *,
        net: str,
        medium: str,
        rate_mbit: float,
        queue_ms: float,
        downlink: bool,
    ) -> None:
        from coorp.learn._netns import Topology

        self.topo = Topology(len(workers), medium=medium)
        self.netns = net == "netns"
        self.hosts = {leader: "ld", **{w: f"w{i + 1}" for i, w in enumerate(workers)}}
        if self.netns:
            try:
                self.topo.create(rate_mbit=rate_mbit, queue_ms=queue_ms, downlink=downlink)
            except BaseException:
                self.topo.destroy()
                raise

    def addr(self, robot: str) -> str:
        return self.topo.addr(self.hosts[robot]) if self.netns else "127.0.0.1"

    def popen(
        self, robot: str, argv: Sequence[str], env: Mapping[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        return self.topo.popen(self.hosts[robot] if self.netns else None, argv, env, log)

    def finish(self) -> dict[str, Any] | None:
        return None

    def destroy(self) -> None:
        self.topo.destroy()


def wired(
    *, net: str, medium: str, rate_mbit: float, queue_ms: float, downlink: bool
) -> NetworkFactory:
    """Loopback (``net="loopback"``) or namespaces with the ``split`` or ``shared``
    wired bottleneck of ``rate_mbit``."""

    def make(leader: str, workers: Sequence[str], seed: int) -> RuntimeNetwork:
        del seed  # a wired queue makes no random decisions
        return _Wired(leader, workers, net=net, medium=medium, rate_mbit=rate_mbit,
                      queue_ms=queue_ms, downlink=downlink)  # fmt: skip

    return make
