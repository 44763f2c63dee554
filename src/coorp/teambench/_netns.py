"""The benchmark's network (:mod:`coorp._netns`): a leader and robots on one bridge.

Layout (every name starts with ``coorptb-<pid>-<n>-``): hosts ``ld`` (the leader) and
``r1``.. on bridge ``br0`` of namespace ``sw``, 10.232.0.x/24. The bottleneck is the
leader's link, shaped in both directions (the bridge port towards the leader and the
leader's own interface) with ``tbf`` (or ``htb`` + ``bfifo`` where tbf is missing):
everything the robots send to the leader shares one FIFO, like the air in front of it,
and so do the echoes back. Hosts keep incomplete IP datagrams for
:data:`IPFRAG_TIME_S` instead of 30 s (see :meth:`Network.create`).

:meth:`Network.destroy` kills every process started here (by pid) and deletes the
namespaces; the runner calls it on every exit path.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from coorp._netns import QDISCS, Proc, StarNetwork, probe_qdiscs, shape
from coorp._netns import netns_unavailable as _netns_unavailable

__all__ = ["QDISCS", "Network", "Proc", "netns_unavailable", "probe_qdiscs"]

#: How long a host keeps the fragments of an incomplete datagram (Linux: 30 s).
IPFRAG_TIME_S = 1


def netns_unavailable() -> str | None:
    """Why namespaces cannot be used here, or None if they can."""
    return _netns_unavailable("coorptb")


class Network(StarNetwork):
    """Leader + ``robots`` hosts behind one bridge, the leader's link the bottleneck."""

    def __init__(self, robots: int, *, medium: str = "split") -> None:
        super().__init__(["ld", *(f"r{i}" for i in range(1, robots + 1))],
                         tag="coorptb", subnet="10.232.0")  # fmt: skip
        self.qdiscs: dict[str, bool] = {}
        self.shaper = ""
        #: ``split``: the leader's link shaped both ways (two queues); ``shared``: one
        #: queue for every packet (:meth:`StarNetwork.create_shared`).
        self.medium = medium

    def create(self, *, rate_mbit: float, queue_ms: float) -> None:  # type: ignore[override]
        # IP reassembly: a datagram that lost a fragment at the bottleneck holds its other
        # fragments for ipfrag_time (30 s by default), and past ipfrag_high_thresh (4 MB)
        # every new fragment is dropped; after an overloaded cell, messages larger than
        # the MTU would be lost for half a minute. 1 s keeps cells apart.
        sysctls = [f"net.ipv4.ipfrag_time={IPFRAG_TIME_S}", "net.ipv4.ipfrag_high_thresh=33554432",
                   "net.ipv4.ipfrag_low_thresh=25165824"]  # fmt: skip
        if self.medium == "shared":
            self.create_shared(rate_mbit=rate_mbit, queue_ms=queue_ms, sysctls=sysctls)
            self.shaper = "tbf"
            return
        super().create(sysctls=sysctls)
        sw = self.ns("sw")
        self.qdiscs = probe_qdiscs(sw, self.port("ld"))
        for ns, dev in ((sw, self.port("ld")), (self.ns("ld"), "eth0")):
            self.shaper = shape(ns, dev, rate_mbit=rate_mbit, queue_ms=queue_ms,
                                qdiscs=self.qdiscs)  # fmt: skip

    def start(  # type: ignore[override]
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> Proc:
        """A role with commands on its stdin and ``KEY {json}`` lines back."""
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        return super().start(host, ["env", "PYTHONUNBUFFERED=1", *envs, *argv], name,
                             stdin=True)  # fmt: skip

    def python(self) -> list[str]:
        return [sys.executable, "-m", "coorp.teambench._roles"]

    def __enter__(self) -> Network:
        return self
