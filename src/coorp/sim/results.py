"""What a simulation run produced: per-flow, per-station, per-message and channel results.

:class:`SimResult` is plain data. ``summary()`` is the JSON-able digest; ``tables()``
gives the columnar per-message / per-flow / per-station tables written as Parquet/CSV.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from coorp.sim.congestion import rto_now
from coorp.sim.packets import message_columns
from coorp.stats import grouped_percentiles
from coorp.units import NS_PER_MS

if TYPE_CHECKING:
    from coorp.scenario import Scenario
    from coorp.sim.events import EventLoop
    from coorp.sim.mac import Channel, ChannelStats
    from coorp.sim.packets import FlowState, Message
    from coorp.sim.station import Station
    from coorp.sim.tcp import TcpConnection

__all__ = ["FlowStats", "SimResult", "StationStats"]


class FinishedRun(Protocol):
    """What :meth:`SimResult.collect` reads of a finished run (a
    :class:`~coorp.sim.engine.Simulation`): stated here, so that the engine imports its
    results and not the other way round."""

    scenario: Scenario
    seed: int
    wall_s: float
    loop: EventLoop
    channel: Channel
    channels: list[Channel]
    cells: Any
    stations: dict[str, Station]
    flows: dict[str, FlowState]
    messages: list[Message]
    tcp: dict[str, TcpConnection]


@dataclass(frozen=True, slots=True)
class FlowStats:
    name: str
    kind: str  # "datagram", "bulk" or "tcp-ack"
    src: str
    dst: str
    category: str
    sent_packets: int
    delivered_packets: int
    delivered_bytes: int
    dropped_packets: int
    retransmitted_packets: int
    throughput_mbps: float
    messages_sent: int
    messages_delivered: int
    messages_lost: int
    latency_ms_p50: float | None
    latency_ms_p99: float | None
    latency_ms_max: float | None


@dataclass(frozen=True, slots=True)
class StationStats:
    name: str
    airtime_ns: int
    airtime_fraction: float
    tx_attempts: int
    tx_success: int
    tx_failed: int
    dropped_packets: int
    ls_hw_depth_mean: float | None
    ls_hw_depth_max: int | None


@dataclass(frozen=True)
class SimResult:
    scenario_name: str
    seed: int
    duration_ns: int
    wall_s: float
    events_processed: int
    flows: dict[str, FlowStats]
    stations: dict[str, StationStats]
    channel: ChannelStats
    messages: dict[str, np.ndarray]
    ls_hw_depths: dict[str, np.ndarray]
    trace: list[tuple[object, ...]] | None = field(default=None, repr=False)
    #: A fleet's contention domains, each medium's counters (``channel`` sums them);
    #: empty for one BSS.
    domains: dict[str, ChannelStats] = field(default_factory=dict)
    #: Per bulk flow with a TCP connection (``[tcp] sender``): its counters
    #: (``TcpConnection.stats``) and, with ``trace=True``, ``cwnd_trace``: (time ns,
    #: cwnd, ssthresh) at every change. Empty without the TCP model.
    tcp: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def sim_s_per_wall_s(self) -> float:
        return (self.duration_ns / 1e9) / self.wall_s if self.wall_s > 0 else float("inf")

    @classmethod
    def collect(cls, sim: FinishedRun, duration_ns: int) -> SimResult:
        flow_names, *cols = message_columns(sim.messages)
        codes, ids, sizes, created, delivered, lost, depth = (
            np.fromiter(c, np.int64, len(c))  # (no shape or type discovery: see message_columns)
            for c in cols
        )
        latency = np.where(delivered >= 0, delivered - created, -1)
        messages = {
            "flow": np.array(flow_names, dtype=object)[codes],
            "msg_id": ids,
            "size_bytes": sizes,
            "created_ns": created,
            "delivered_ns": delivered,
            "latency_ns": latency,
            "lost": lost.astype(bool),
            "hw_depth_first": depth,
        }
        secs = duration_ns / 1e9
        # A flow's kind is its role, never read from its name: TCP-ack flows are the ones
        # bulk flows created for their acknowledgements.
        ack_flows = {id(f.ack_flow) for f in sim.flows.values() if f.ack_flow is not None}
        # Per flow number at once (a mask per flow cost flows x messages, minutes for a
        # fleet's thousand flows; a percentile call per flow, hundreds of numpy calls,
        # the first importing numpy.ma inside the run): counts by bincount, the delivered
        # latencies sorted by flow then latency, so each flow's p50, p99 and max are read
        # off its slice.
        nf = len(flow_names)
        sent = np.bincount(codes, minlength=nf)
        nlost = np.bincount(codes[lost != 0], minlength=nf)
        ok = latency >= 0
        ok_codes, ok_lat = codes[ok], latency[ok]
        done_ms = ok_lat[np.lexsort((ok_lat, ok_codes))] / NS_PER_MS
        ndone = np.bincount(ok_codes, minlength=nf)
        pct = grouped_percentiles(done_ms, ndone, (50, 99))
        ends = np.cumsum(ndone)
        number = {n: i for i, n in enumerate(flow_names)}
        flows = {}
        for name, f in sim.flows.items():
            c = number.get(name)
            k = int(ndone[c]) if c is not None else 0
            p50, p99, top = (
                (float(pct[c, 0]), float(pct[c, 1]), float(done_ms[ends[c] - 1]))
                if c is not None and k
                else (None, None, None)
            )
            kind = "bulk" if f.bulk else ("tcp-ack" if id(f) in ack_flows else "datagram")
            flows[name] = FlowStats(
                name=name, kind=kind, src=f.src.name, dst=f.dst.name, category=f.ac.value,
                sent_packets=f.sent_packets, delivered_packets=f.delivered_packets,
                delivered_bytes=f.delivered_bytes, dropped_packets=f.dropped_packets,
                retransmitted_packets=f.retransmitted_packets,
                throughput_mbps=f.delivered_bytes * 8 / secs / 1e6,
                messages_sent=int(sent[c]) if c is not None else 0,
                messages_delivered=k,
                messages_lost=int(nlost[c]) if c is not None else 0,
                latency_ms_p50=p50,
                latency_ms_p99=p99,
                latency_ms_max=top,
            )  # fmt: skip
        stations = {}
        depths = {}
        # Time counters cover [0, duration_ns]: an exchange on the air at the end counts
        # up to the horizon only (see ``Channel.stats_at``).
        beyond: dict[Station, int] = {}
        for ch in sim.channels:
            beyond.update(ch.airtime_beyond(duration_ns))
        for name, st in sim.stations.items():
            d = np.asarray(st.ls_depths, dtype=np.int64)
            depths[name] = d
            airtime = st.airtime_ns - beyond.get(st, 0)
            stations[name] = StationStats(
                name=name, airtime_ns=airtime, airtime_fraction=airtime / duration_ns,
                tx_attempts=st.tx_attempts, tx_success=st.tx_success, tx_failed=st.tx_failed,
                dropped_packets=st.dropped_packets,
                ls_hw_depth_mean=float(d.mean()) if d.size else None,
                ls_hw_depth_max=int(d.max()) if d.size else None,
            )  # fmt: skip
        domains: dict[str, ChannelStats] = {}
        channel = sim.channel.stats_at(duration_ns)
        trace = sim.channel.stats.trace
        if sim.cells is not None:
            domains = {name: ch.stats_at(duration_ns) for name, ch in sim.cells.channels.items()}
            channel = _summed(list(domains.values()))
            if trace is not None:
                trace = sorted(
                    (row for ch in sim.channels for row in (ch.stats.trace or ())),
                    key=lambda row: row[0],  # type: ignore[arg-type,return-value]
                )
        return cls(
            scenario_name=sim.scenario.name, seed=sim.seed, duration_ns=duration_ns,
            wall_s=sim.wall_s, events_processed=sim.loop.events_processed, flows=flows,
            stations=stations, channel=channel, messages=messages,
            ls_hw_depths=depths, trace=trace, domains=domains,
            tcp={name: _tcp_stats(c) for name, c in sim.tcp.items()},
        )  # fmt: skip

    @property
    def total_throughput_mbps(self) -> float:
        return sum(f.throughput_mbps for f in self.flows.values() if f.kind != "tcp-ack")

    def summary(self) -> dict[str, Any]:
        ch = self.channel
        return {
            "scenario": self.scenario_name,
            "seed": self.seed,
            "duration_s": self.duration_ns / 1e9,
            "wall_s": round(self.wall_s, 6),
            "sim_s_per_wall_s": round(self.sim_s_per_wall_s, 3),
            "events_processed": self.events_processed,
            "throughput_mbps": self.total_throughput_mbps,
            "channel": {
                "busy_fraction": ch.busy_ns / self.duration_ns,
                "success_ns": ch.success_ns,
                "failure_ns": ch.failure_ns,
                "exchanges": ch.exchanges,
                "collisions": ch.collisions,
                "internal_collisions": ch.internal_collisions,
                "bar_exchanges": ch.bar_exchanges,
                "per_failures": ch.per_failures,
            },
            "flows": {n: _asdict(f) for n, f in self.flows.items()},
            "stations": {n: _asdict(s) for n, s in self.stations.items()},
            **(
                {
                    "domains": {
                        n: _channel_summary(c, self.duration_ns) for n, c in self.domains.items()
                    }
                }
                if self.domains
                else {}
            ),
            **(
                {"tcp": {n: {k: v for k, v in t.items() if k != "cwnd_trace"}
                         for n, t in self.tcp.items()}}
                if self.tcp else {}
            ),
        }  # fmt: skip

    def tables(self) -> dict[str, dict[str, Any]]:
        flows = list(self.flows.values())
        stations = list(self.stations.values())
        return {
            "messages": self.messages,
            "flows": {k: [getattr(f, k) for f in flows] for k in FlowStats.__slots__},
            "stations": {k: [getattr(s, k) for s in stations] for k in StationStats.__slots__},
        }


def _summed(parts: list[ChannelStats]) -> ChannelStats:
    """Several media's counters added up (a fleet's ``channel``: its busy time may
    exceed the run's duration, one medium per contention domain)."""
    from coorp.sim.mac import ChannelStats

    out = ChannelStats()
    for p in parts:
        for k in ("busy_ns", "success_ns", "failure_ns", "exchanges", "collisions",
                  "internal_collisions", "bar_exchanges", "per_failures"):  # fmt: skip
            setattr(out, k, getattr(out, k) + getattr(p, k))
    return out


def _channel_summary(ch: ChannelStats, duration_ns: int) -> dict[str, Any]:
    return {
        "busy_fraction": ch.busy_ns / duration_ns,
        "exchanges": ch.exchanges,
        "collisions": ch.collisions,
    }


#: A TCP connection's counters ``SimResult.tcp`` reports, besides the congestion control,
#: SRTT and RTO.
_TCP_COUNTERS: Final = (
    "segments_sent", "retransmits", "fast_recoveries", "timeouts", "spurious_timeouts",
    "idle_restarts", "duplicate_segments", "dupacks_received", "delayed_acks", "cwnd",
    "max_cwnd", "ssthresh",
)  # fmt: skip


def _tcp_stats(conn: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"congestion_control": conn.cc.name}
    out.update((name, getattr(conn, name)) for name in _TCP_COUNTERS)
    out["srtt_us"] = conn.srtt_ns // 1000
    out["rto_us"] = rto_now(conn) // 1000
    if conn.trace is not None:
        out["cwnd_trace"] = list(conn.trace)
    return out


def _asdict(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__slots__}
