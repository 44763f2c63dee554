"""Time series of a run in fixed bins: bulk throughput, hardware-ring depth, gate state.

:class:`Sampler` schedules a read-only callback every ``sample_ns`` (1 ms) on the
simulation and folds the samples into bins of ``bin_ns`` (10 ms) per station. It only
*reads* the simulator's state (ring lengths, whether the bulk queue is paused, delivered
byte counters), so a run with it computes exactly what a run without it computes: the
event loop orders events by ``(time, priority, sequence)`` and the extra events change
no other event's relative order (only ``events_processed`` grows).

Per bin and station:

* ``bh_bytes`` — bytes of the given bulk flows *sent by* the station and delivered
  within the bin (exact: differences of the flows' delivered-byte counters at the bin
  edges);
* ``ring_depth_mean`` / ``ring_depth_max`` — packets in the station's hardware ring(s),
  over the samples in the bin;
* ``paused_fraction`` — share of samples at which the station's bulk queue was paused
  (the gate or a policy's time-aware shaper held it back);
* ``backlog_fraction`` — share of samples with bulk data waiting to be handed to the NIC.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from coorp.sim import Simulation
from coorp.sim.packets import FlowState
from coorp.units import NS_PER_MS

__all__ = ["BIN_NS", "SAMPLE_NS", "Sampler"]

#: Width of a time-series bin.
BIN_NS = 10 * NS_PER_MS
#: Sampling period of the ring depth and the gate state inside a bin.
SAMPLE_NS = NS_PER_MS


class Sampler:
    """Samples ``sim`` until ``until_ns``; :meth:`table` returns the binned series."""

    def __init__(
        self,
        sim: Simulation,
        until_ns: int,
        bulk_flows: Iterable[FlowState],
        *,
        bin_ns: int = BIN_NS,
        sample_ns: int = SAMPLE_NS,
    ) -> None:
        if bin_ns <= 0 or sample_ns <= 0 or bin_ns % sample_ns:
            raise ValueError(f"bin_ns ({bin_ns}) must be a positive multiple of sample_ns")
        self.sim = sim
        self.bin_ns = bin_ns
        self.sample_ns = sample_ns
        self.per_bin = bin_ns // sample_ns
        self.stations = list(sim.stations.values())
        index = {st.name: i for i, st in enumerate(self.stations)}
        self._flows = [(index[f.src.name], f) for f in bulk_flows]
        n_bins = -(-until_ns // bin_ns)
        k = len(self.stations)
        self.until_ns = until_ns
        self.bh_bytes = np.zeros((n_bins, k), np.int64)
        self.depth_sum = np.zeros((n_bins, k), np.int64)
        self.depth_max = np.zeros((n_bins, k), np.int64)
        self.paused = np.zeros((n_bins, k), np.int64)
        self.backlog = np.zeros((n_bins, k), np.int64)
        self.samples = np.zeros(n_bins, np.int64)
        self._last_bytes = np.zeros(k, np.int64)
        # Each station's distinct rings (a shared ring is one ring for every category).
        self._rings = [list({id(r): r for r in st.rings.values()}.values()) for st in self.stations]

    def begin(self) -> None:
        # The first sample is at sample_ns: a bin's samples are its (t0, t0 + bin] instants.
        self.sim.call_at(min(self.sample_ns, self.until_ns), self._sample, 1)

    def _sample(self, j: int) -> None:
        t = self.sim.now_ns
        b = min((t - 1) // self.bin_ns, self.samples.size - 1)
        self.samples[b] += 1
        depth_sum, depth_max = self.depth_sum[b], self.depth_max[b]
        paused, backlog = self.paused[b], self.backlog[b]
        for i, st in enumerate(self.stations):
            d = 0
            for ring in self._rings[i]:
                d += ring.n
            depth_sum[i] += d
            if d > depth_max[i]:
                depth_max[i] = d
            if st.bulk_paused:
                paused[i] += 1
            if st.bulk_backlog:
                backlog[i] += 1
        if j % self.per_bin == 0 or t >= self.until_ns:
            self._close_bin(b)
        nxt = (j + 1) * self.sample_ns
        if t < self.until_ns:
            self.sim.call_at(min(nxt, self.until_ns), self._sample, j + 1)

    def _close_bin(self, b: int) -> None:
        total = np.zeros_like(self._last_bytes)
        for i, f in self._flows:
            total[i] += f.delivered_bytes
        self.bh_bytes[b] = total - self._last_bytes
        self._last_bytes = total

    def table(self) -> dict[str, np.ndarray]:
        """The series in long format: one row per (bin, station)."""
        n_bins, k = self.bh_bytes.shape
        t0 = np.arange(n_bins, dtype=np.int64) * self.bin_ns
        t1 = np.minimum(t0 + self.bin_ns, self.until_ns)
        width_s = (t1 - t0) / 1e9
        samples = np.maximum(self.samples, 1)[:, None]
        names = np.array([st.name for st in self.stations], dtype=object)
        return {
            "t_start_ns": np.repeat(t0, k),
            "t_end_ns": np.repeat(t1, k),
            "station": np.tile(names, n_bins),
            "bh_bytes": self.bh_bytes.ravel(),
            "bh_mbps": (self.bh_bytes * 8 / width_s[:, None] / 1e6).ravel(),
            "ring_depth_mean": (self.depth_sum / samples).ravel(),
            "ring_depth_max": self.depth_max.ravel(),
            "paused_fraction": (self.paused / samples).ravel(),
            "backlog_fraction": (self.backlog / samples).ravel(),
        }
