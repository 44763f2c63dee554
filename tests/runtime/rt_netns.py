"""The runtime tests' network (coorp._netns): leader ``ld`` and agents ``a1``.. on one
bridge, 10.231.0.x/24, the bridge port towards the leader shaped with ``tbf`` so that a
queue builds there, like the shared channel in front of the leader. Names start with
``coorpt-<pid>-<n>-``; :meth:`Topology.destroy` runs from each fixture's ``finally``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from coorp._netns import Proc, StarNetwork, shape
from coorp._netns import netns_unavailable as _netns_unavailable

__all__ = ["Proc", "Topology", "netns_unavailable", "topology"]


def netns_unavailable() -> str | None:
    """Why namespace tests cannot run here, or None if they can."""
    return _netns_unavailable("coorpt")


class Topology(StarNetwork):
    """Leader + agents behind one bridge; the leader's port shaped with tbf."""

    def __init__(self, agents: int, *, tag: str = "coorpt") -> None:
        super().__init__(["ld", *(f"a{i}" for i in range(1, agents + 1))],
                         tag=tag, subnet="10.231.0")  # fmt: skip

    def add_addresses(self, host: str, last_octets: range) -> None:
        """More addresses on ``host``'s interface (one ``ip -batch`` call): a host that
        sends from many source addresses."""
        import subprocess

        batch = "".join(f"addr add {self.subnet}.{i}/24 dev eth0\n" for i in last_octets)
        r = subprocess.run(["ip", "-n", self.ns(host), "-batch", "-"], input=batch,
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"ip -batch on {host}: {r.stderr.strip()}")

    def create(self, *, rate_mbit: float, queue_ms: float) -> None:  # type: ignore[override]
        super().create()
        # The queue in front of the leader: everything sent to it shares one FIFO.
        shape(self.ns("sw"), self.port("ld"), rate_mbit=rate_mbit, queue_ms=queue_ms)


@contextmanager
def topology(
    agents: int,
    *,
    rate_mbit: float,
    queue_ms: float,
    tag: str = "coorpt",
    logs: Path | None = None,
) -> Iterator[Topology]:
    """A created :class:`Topology` for one fixture, destroyed after it; the test is
    skipped (saying why) where namespaces cannot be made. ``logs``: a directory made for
    the programs' logs, kept as ``topology.logs``."""
    reason = netns_unavailable()
    if reason is not None:
        print(f"SKIP netns tests: {reason}")
        pytest.skip(reason)
    t = Topology(agents, tag=tag)
    if logs is not None:
        logs.mkdir()
        t.logs = logs  # type: ignore[attr-defined]
    try:
        t.create(rate_mbit=rate_mbit, queue_ms=queue_ms)
        yield t
    finally:
        t.destroy()
