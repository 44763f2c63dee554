"""What an inbox saw of each sender's LS messages: how late, how many past deadline.

:class:`LatencyBook` keeps, per sending robot, its recent one-way latencies (a ring) and
counters. A latency is ``received − sent`` with the sender's clock mapped to ours by
the session's offset — the smallest ``received − sent`` seen, tightened by every
datagram —, so it is the delay above the fastest datagram of the session: queueing and
scheduling, the part coordination changes. ``coorp top`` shows it per sender.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..wire import LatencySummary

__all__ = ["LatencyBook"]


class LatencyBook:
    def __init__(self, *, ring: int = 1024, max_senders: int = 256) -> None:
        self.ring = ring
        self.max_senders = max_senders
        self._lat: dict[str, deque[int]] = {}
        self._counts: dict[str, list[int]] = {}  # sender -> [received, late]

    def record(self, sender: str, latency_ns: int, late: bool) -> None:
        ring = self._lat.get(sender)
        if ring is None:
            if len(self._lat) >= self.max_senders:
                return
            ring = self._lat[sender] = deque(maxlen=self.ring)
            self._counts[sender] = [0, 0]
        ring.append(max(latency_ns, 0))
        c = self._counts[sender]
        c[0] += 1
        c[1] += late

    def summaries(self, limit: int = 32) -> list[LatencySummary]:
        """Per sender (the busiest ``limit``): counts, p50 and p99 over its ring (µs)."""
        out = []
        busiest = sorted(self._counts, key=lambda s: -self._counts[s][0])[:limit]
        for sender in busiest:
            lat = np.fromiter(self._lat[sender], dtype=np.int64)
            p50, p99 = (np.percentile(lat, [50, 99]) // 1000).astype(int) if lat.size else (0, 0)
            received, late = self._counts[sender]
            out.append(LatencySummary(sender, received, late, int(p50), int(p99)))
        return out
