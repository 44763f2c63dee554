"""Cross-check coorp's TCP sender model (``[tcp] sender``) against ns-3's TCP over its WiFi.

The same channel as ``ns3_crosscheck.py`` (802.11ac, 80 MHz, 2 streams, VHT MCS 7, long
GI, A-MPDU of up to 64 MPDUs, AC_BE, control frames at 24 Mb/s, stations on a 1 m circle
around the AP, ns-3's BlockAckReq retry policy on both sides) carries N bulk TCP uploads
to the AP, each a connection that starts with an initial window of 10 segments and
always has data (ns-3: ``BulkSendApplication``; coorp: a saturating bulk flow), segments
of 1448 payload bytes in 1500-byte IP packets, 52-byte ACKs (timestamps), one ACK per
two segments after the first, which is acknowledged at once (ns-3's receiver; coorp's
``[tcp] quickacks = 1``), a 40 ms delayed-ACK timeout, RTO bounds of 200 ms .. 120 s
with a 1 ms clock granularity, no SACK (``--sack on``: SACK on both sides), a fixed
receive window (``--rwnd``). Congestion control: ns-3's ``TcpLinuxReno`` against
``reno``, ``TcpCubic`` against ``cubic`` (HyStart off on both sides unless ``--hystart
on``: docs/validation.md says why); both recover with proportional rate reduction. ns-3
runs without a queue disc (its WiFi MAC queue holds 500 packets per access category,
more than the window: nothing is dropped there, unless ``--queue-packets``), with its
neighbour caches filled (no ARP) and its Block Ack agreements set up by a few UDP
datagrams each way half a second before (coorp has them from the start). ns-3 sends its
segments without the timestamps option (1460 payload bytes in the same 1500-byte
packets, 40-byte ACKs against coorp's 52): with it, ns-3 3.44 measures RTTs in whole
milliseconds (a sub-millisecond RTT becomes 1 µs), which is not what Linux does. Both
sides open every connection at the applications' start with a SYN and a SYN-ACK over the
channel (44-byte IP packets), so the handshakes contend with each other and with the
first connections' data as ns-3's do (``--starts ns3``: coorp's connections start
instead at the instants ns-3's sent their first segment, without handshakes).

Two things are compared per case:

* **Throughput**: delivered IP bytes per second over ``--duration`` seconds after
  ``--warmup`` seconds of the applications (ns-3 counts TCP payload, scaled by
  1500/1460), the mean over ``--seeds`` seeds.
* **cwnd trace shape**: each side's congestion window (segments) as a step function
  sampled every 0.1 ms over the first ``--trace-ms`` milliseconds, capped at the receive
  window (what limits the sender: ns-3's cwnd keeps growing while the receive window
  limits it, Linux's and coorp's does not, ``tcp_is_cwnd_limited``). Two metrics, each
  the mean of ``|coorp - ns3| / ns3`` over the samples: per connection from its first
  segment (averaged over connections and seeds: with several senders it depends on the
  order in which contention serves them), and of the *mean window per connection* from
  the applications' start, averaged over the seeds first (the expected window, which
  that order does not decide); and when that mean reaches the receive window. With
  several senders the mean window over a few seeds is itself noisy (two sets of 10 of
  ns-3's own seeds differ by about 5% with five senders): compare it over many seeds
  (short runs: ``--seeds 60 --warmup 0.05 --duration 0.05``). The table gives that
  difference's 95% interval (resampling the seeds, both sides together) and what two
  random halves of ns-3's own seeds differ by ("ns-3 halves"): a difference inside
  that spread is what the seeds alone produce. ``--figure`` plots the mean windows.

**Loss recovery** (``--queue-packets N``, ``--sack on|off``): every node, the AP too
(where the ACKs wait), holds at most N packets per access category with tail drop, so
that a window larger than that loses what does not fit and the senders recover (fast
recovery, or a timeout). ns-3: its WiFi MAC queue's ``WifiMacQueue::MaxSize`` is N
packets (still no queue disc; the limit is read back from a station's AC_BE queue). The
queue keeps the MPDUs in flight until they are acknowledged. A full queue stops the
device's transmit queue, so ns-3's traffic control layer drops the newest packet, the
one IP hands it then (its ``TcDrop`` trace: all the drops seen here; the MAC queue's own
``DropBeforeEnqueue`` is counted too, and stays 0). coorp: the NIC ring
(``hw_queue.capacity_packets``, 128, which holds the MPDUs in flight too) and in front
of it a FIFO kernel queue of the other N - 128 packets with tail drop
(``hw_queue.kernel_queue_packets = N - 128``, ``kernel_queue_fifo = true``): N packets
in all, as in ns-3, with the A-MPDUs built from a 128-packet ring as without the bound
(so N <= 128 is refused). ``--sack on`` sets ``TcpSocketBase::Sack`` in ns-3 and
``[tcp] sack = true`` in coorp; ``off`` (the default) leaves ns-3's off and coorp's
``[tcp] sack`` unset (off). A second table counts over the whole run (warm-up included),
summed over the connections, the mean per seed of: the stations' drops (ns-3:
``TcDrop`` + ``DropBeforeEnqueue``; coorp: the kernel queue's), the AP's (ACKs), the
retransmitted segments (ns-3's ``Retransmission`` trace; coorp's ``retransmits``), the
fast recoveries (ns-3: entries into CA_RECOVERY; coorp's ``fast_recoveries``) and the
retransmission timeouts (ns-3: ``ReTxTimeout`` doubling the RTO, which an expiry at its
60 s cap would not show; coorp's ``timeouts``); and the throughput's mean over the seeds
± the 95% interval of that mean (Student's t). coorp does not resend a segment that is
still in the station's queues, as Linux does not; ns-3 does, so its retransmissions can
count segments that were never lost.

    python benchmarks/tcp_crosscheck.py --cases cubic-4 --rwnd 4194304 \\
        --queue-packets 200 --sack on --seeds 5 --details results/tcp_loss.json

``--json PATH`` writes exactly ``{"rows": [{"case", "coorp_mbps", "ns3_mbps"}]}``;
``--details PATH`` everything (traces, metrics, the command, the load). Without ns-3 the
script prints how to install it and shows coorp's column only (exit status 0).

    python benchmarks/tcp_crosscheck.py --json results/tcp.json \\
        --details results/tcp_details.json --figure results/tcp_cwnd.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coorp import ScenarioError
from coorp.scenario import AccessCategory, HwQueueConfig, Scenario, parse_scenario
from coorp.sim import Simulation
from ns3_crosscheck import INSTALL_HINT, import_ns3, ns3_version, place_and_address

PACKET_BYTES = 1500
MSS = PACKET_BYTES - 52
#: ns-3 runs without the timestamps option (see the module docstring): 40-byte headers.
NS3_MSS = PACKET_BYTES - 40
#: ns-3's applications start here (after association); both sides' clocks are aligned at
#: each connection's first data segment for the traces, at the application start for
#: the throughput window.
NS3_APP_START_S = 1.0
SAMPLE_NS = 100_000
BE = AccessCategory.BE
#: ns-3's SYN and SYN-ACK without timestamps: IPv4 20 + TCP 20 + window scale 3 + 1 pad.
SYN_IP_BYTES = 44
#: Segments ns-3 3.44's receiver acknowledges at once at a connection's start.
NS3_QUICKACKS = 1
DEFAULT_CASES = "reno-1,cubic-1,reno-5,cubic-5,cubic-1-64k,cubic-5-64k"
#: ns-3 3.44's ``WifiMacQueue::MaxSize`` (packets per access category): what it runs with
#: without ``--queue-packets``.
NS3_MAC_QUEUE_DEFAULT = 500
#: coorp's NIC ring per access category (``hw_queue.capacity_packets``' default): with
#: ``--queue-packets N`` the kernel queue in front of it holds the other ``N - RING``.
RING_PACKETS = HwQueueConfig().capacity_packets


@dataclass(frozen=True)
class Loss:
    """``--sack`` and ``--queue-packets``: SACK on both sides, and the packets a station
    holds per access category (None: ns-3's 500, coorp's kernel queue unbounded)."""

    sack: bool = False
    queue_packets: int | None = None

    @property
    def kernel_packets(self) -> int | None:
        """coorp's ``hw_queue.kernel_queue_packets``: the bound less the NIC ring."""
        if self.queue_packets is None:
            return None
        if self.queue_packets <= RING_PACKETS:
            raise ValueError(
                f"--queue-packets {self.queue_packets}: coorp's stations hold their NIC ring "
                f"({RING_PACKETS} packets, hw_queue.capacity_packets) and a kernel queue of "
                f"the rest in front of it; give more than {RING_PACKETS}"
            )
        return self.queue_packets - RING_PACKETS


@dataclass(frozen=True)
class Case:
    """``<cc>-<n>[-<rwnd>k]``: congestion control, uploading stations, receive window."""

    name: str
    cc: str
    n: int
    rwnd_bytes: int

    @classmethod
    def parse(cls, name: str, default_rwnd: int) -> Case:
        parts = name.split("-")
        if len(parts) not in (2, 3) or parts[0] not in ("reno", "cubic") or not parts[1].isdigit():
            raise ValueError(
                f"case {name!r}: expected <reno|cubic>-<stations>[-<window>k], e.g. cubic-5-64k"
            )
        rwnd = default_rwnd
        if len(parts) == 3:
            if not parts[2].endswith("k") or not parts[2][:-1].isdigit():
                raise ValueError(f"case {name!r}: the window is written like 64k (KiB)")
            rwnd = int(parts[2][:-1]) * 1024
        n = int(parts[1])
        if n < 1:
            raise ValueError(f"case {name!r}: at least one station")
        return cls(name, parts[0], n, rwnd)


def coorp_scenario(case: Case, starts_ns: list[int] | None = None, loss: Loss = Loss()
                   ) -> Scenario:  # fmt: skip
    """The case as a coorp scenario. With ``starts_ns`` connection ``i`` starts at
    ``starts_ns[i]``; without, the scenario has no flows and :func:`run_coorp` opens
    each connection with a handshake. ``loss``: SACK, and the stations' queue bound (the
    ring and a FIFO kernel queue of the rest, tail drop)."""
    tcp: dict[str, Any] = {
        "sender": case.cc,
        "receive_window_bytes": case.rwnd_bytes,
        "delayed_ack_us": 40_000,
        "min_rto_us": 200_000,
        # ns-3 3.44's receiver acknowledges the first data segment at once and
        # then every second one (TcpSocketBase::ProcessSynRcvd sets
        # m_delAckCount = m_delAckMaxCount), Linux's the first 16.
        "quickacks": NS3_QUICKACKS,
    }
    if loss.sack:  # (off: the default, so that a coorp without the field runs too)
        tcp["sack"] = True
    hw_queue: dict[str, Any] = {}
    if loss.kernel_packets is not None:
        hw_queue = {"kernel_queue_packets": loss.kernel_packets, "kernel_queue_fifo": True}
    flows = (
        [
            {
                "kind": "bulk",
                "name": f"up{i}",
                "src": f"sta{i}",
                "dst": "ap",
                "start_us": starts_ns[i] / 1000,
            }
            for i in range(case.n)
        ]
        if starts_ns is not None
        else []
    )
    return parse_scenario(
        {
            "name": f"tcp-{case.name}",
            "packet_bytes": PACKET_BYTES,
            "phy": {"width_mhz": 80, "spatial_streams": 2, "guard_interval": "long"},
            "mac": {"retry_policy": "ns3"},
            "links": {"mode": "fixed", "mcs": 7},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(case.n)],
            "flows": flows,
            "tcp": tcp,
            **({"hw_queue": hw_queue} if hw_queue else {}),
        }
    )


def _handshakes(sim: Simulation, case: Case, starts: list[int]) -> None:
    """Open each connection as ns-3's applications do, all at time 0: a SYN from the
    station, a SYN-ACK from the AP when it arrives, the window's first segments when
    that arrives (``starts[i]`` records when). ns-3's third handshake segment, a 40-byte
    ACK that leaves in the A-MPDU of the first data, is left out."""

    def open_(i: int) -> None:
        syn = sim.flow(f"syn{i}", f"sta{i}", "ap", BE, bulk=False)
        synack = sim.flow(f"synack{i}", "ap", f"sta{i}", BE, bulk=False)
        up = sim.flow(f"up{i}", f"sta{i}", "ap", BE, bulk=True)

        def established(_msg: Any) -> None:
            starts[i] = sim.now_ns
            sim.start_transfer(up, None)

        def send_synack(_msg: Any) -> None:
            sim.send_packet(synack, SYN_IP_BYTES, established, lambda _m: send_synack(_m))

        # A segment the MAC gives up on is sent again at once: ns-3's MAC does not drop
        # frames under a Block Ack agreement at its retry limit (docs/validation.md).
        def send_syn(_msg: Any = None) -> None:
            sim.send_packet(syn, SYN_IP_BYTES, send_synack, send_syn)

        send_syn()

    for i in range(case.n):
        open_(i)


def run_coorp(
    case: Case, warmup_s: float, duration_s: float, seed: int, starts_ns: list[int] | None,
    hystart: str = "on", loss: Loss = Loss(),
) -> dict[str, Any]:  # fmt: skip
    """Throughput after the warm-up; each connection's (time, cwnd) from its start; the
    losses and the recoveries (:func:`coorp_losses`). With ``starts_ns`` connection
    ``i`` starts at ``starts_ns[i]``; without, all open at time 0 with a handshake
    (:func:`_handshakes`)."""
    sc = coorp_scenario(case, starts_ns, loss)
    sc = sc.model_copy(update={"tcp": sc.tcp.model_copy(update={"hystart": hystart == "on"})})
    sim = Simulation(sc, seed=seed, trace=True)
    starts = list(starts_ns) if starts_ns is not None else [-1] * case.n
    if starts_ns is None:
        _handshakes(sim, case, starts)
    flows = [sim.flows[f"up{i}"] for i in range(case.n)]
    at_warmup: list[int] = []
    warm_ns = round(warmup_s * 1e9)
    sim.call_at(warm_ns, lambda: at_warmup.extend(f.delivered_bytes for f in flows))
    t0 = time.perf_counter()
    res = sim.run(warm_ns + round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    delivered = sum(f.delivered_bytes for f in flows) - sum(at_warmup)
    traces = []
    for i in range(case.n):
        tr = res.tcp[f"up{i}"]["cwnd_trace"]
        traces.append([(starts[i], 10)] + [(t, w) for t, w, _ in tr])
    return {
        "mbps": delivered * 8 / duration_s / 1e6,
        "wall_s": wall,
        "starts_ns": starts,
        "traces": traces,
        "stats": {k: {s: v for s, v in t.items() if s != "cwnd_trace"} for k, t in res.tcp.items()},
        "losses": coorp_losses(sim, res.tcp, case.n, sc.hw_queue),
    }


def coorp_losses(sim: Simulation, tcp: dict[str, Any], n: int, hw: HwQueueConfig
                 ) -> dict[str, Any]:  # fmt: skip
    """Over the whole run: the stations' kernel queue drops (the AP's apart), the MAC's
    (retry limit), and per connection its retransmitted segments, fast recoveries and
    retransmission timeouts."""
    stas = [sim.stations[f"sta{i}"] for i in range(n)]
    ups = [tcp[f"up{i}"] for i in range(n)]
    ring_and_kernel = (
        None if hw.kernel_queue_packets is None else hw.capacity_packets + hw.kernel_queue_packets
    )
    return {
        "queue_limit_packets": ring_and_kernel,
        "drops": sum(st.kernel_drops for st in stas),
        "ap_drops": sim.stations["ap"].kernel_drops,
        "mac_drops": sum(st.dropped_packets - st.kernel_drops for st in stas),
        "retransmits": [u["retransmits"] for u in ups],
        "fast_recoveries": [u["fast_recoveries"] for u in ups],
        "timeouts": [u["timeouts"] for u in ups],
    }


_TRACE_CPP = """
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/wifi-module.h"
#include <algorithm>
#include <string>
#include <vector>
namespace coorp_tcp {
std::vector<std::vector<int64_t>> t, w;
// Per connection: retransmitted segments, entries into fast recovery, RTO expiries.
std::vector<int64_t> retx, recov, rto;
// Per node (0: the AP): packets the traffic control layer dropped at a stopped device
// queue, that AC_BE's MAC queue refused when full, that the MAC gave up on.
std::vector<int64_t> tcDrop, queueDrop, macDrop;
void Cwnd(int idx, uint32_t, uint32_t cwnd) {
    t[idx].push_back(ns3::Simulator::Now().GetNanoSeconds());
    w[idx].push_back(cwnd);
}
void Retx(int idx, ns3::Ptr<const ns3::Packet>, const ns3::TcpHeader&, const ns3::Address&,
          const ns3::Address&, ns3::Ptr<const ns3::TcpSocketBase>) {
    ++retx[idx];
}
void Cong(int idx, ns3::TcpSocketState::TcpCongState_t,
          ns3::TcpSocketState::TcpCongState_t state) {
    if (state == ns3::TcpSocketState::CA_RECOVERY) ++recov[idx];
}
// TcpSocketBase::ReTxTimeout doubles the RTO (at most 60 s) at each expiry; every other
// change sets it from the RTT estimate.
void Rto(int idx, ns3::Time before, ns3::Time after) {
    if (after > before && after == std::min(before + before, ns3::Seconds(60))) ++rto[idx];
}
void TcDrop(int node, ns3::Ptr<const ns3::Packet>) { ++tcDrop[node]; }
void QueueDrop(int node, ns3::Ptr<const ns3::WifiMpdu>) { ++queueDrop[node]; }
void MacDrop(int node, ns3::Ptr<const ns3::Packet>) { ++macDrop[node]; }
bool Connect(int n) {
    t.assign(n, {});
    w.assign(n, {});
    retx.assign(n, 0);
    recov.assign(n, 0);
    rto.assign(n, 0);
    tcDrop.assign(n + 1, 0);
    queueDrop.assign(n + 1, 0);
    macDrop.assign(n + 1, 0);
    bool ok = true;
    using ns3::Config::ConnectWithoutContextFailSafe;
    using ns3::MakeBoundCallback;
    for (int i = 0; i < n; ++i) {
        std::string sock = "/NodeList/" + std::to_string(i + 1) +
                           "/$ns3::TcpL4Protocol/SocketList/0/";
        ns3::Config::ConnectWithoutContext(sock + "CongestionWindow", MakeBoundCallback(&Cwnd, i));
        ok &= ConnectWithoutContextFailSafe(sock + "Retransmission", MakeBoundCallback(&Retx, i));
        ok &= ConnectWithoutContextFailSafe(sock + "CongState", MakeBoundCallback(&Cong, i));
        ok &= ConnectWithoutContextFailSafe(sock + "RTO", MakeBoundCallback(&Rto, i));
    }
    for (int k = 0; k <= n; ++k) {
        std::string node = "/NodeList/" + std::to_string(k);
        std::string mac = node + "/DeviceList/*/$ns3::WifiNetDevice/Mac/";
        ok &= ConnectWithoutContextFailSafe(node + "/$ns3::TrafficControlLayer/TcDrop",
                                            MakeBoundCallback(&TcDrop, k));
        ok &= ConnectWithoutContextFailSafe(mac + "BE_Txop/Queue/DropBeforeEnqueue",
                                            MakeBoundCallback(&QueueDrop, k));
        ok &= ConnectWithoutContextFailSafe(mac + "MacTxDrop", MakeBoundCallback(&MacDrop, k));
    }
    return ok;
}
// What AC_BE's MAC queue of a WiFi device holds at most (packets).
uint32_t BeQueueLimit(ns3::Ptr<ns3::NetDevice> dev) {
    auto wifi = ns3::DynamicCast<ns3::WifiNetDevice>(dev);
    return wifi->GetMac()->GetTxopQueue(ns3::AC_BE)->GetMaxSize().GetValue();
}
}
"""


def run_ns3(
    ns: Any, case: Case, warmup_s: float, duration_s: float, seed: int, hystart: bool,
    loss: Loss = Loss(),
) -> dict[str, Any]:  # fmt: skip
    import cppyy

    if not hasattr(cppyy.gbl, "coorp_tcp"):
        cppyy.cppdef(_TRACE_CPP)
    tr = cppyy.gbl.coorp_tcp
    t_build = time.perf_counter()
    ns.RngSeedManager.SetSeed(1)
    ns.RngSeedManager.SetRun(seed)
    socket = "ns3::TcpLinuxReno" if case.cc == "reno" else "ns3::TcpCubic"
    defaults = {
        "ns3::TcpL4Protocol::SocketType": ns.StringValue(socket),
        "ns3::TcpSocket::SegmentSize": ns.UintegerValue(NS3_MSS),
        # The same window in segments as coorp's (payload bytes per segment differ).
        "ns3::TcpSocket::RcvBufSize": ns.UintegerValue(case.rwnd_bytes // MSS * NS3_MSS),
        "ns3::TcpSocket::SndBufSize": ns.UintegerValue(8 * case.rwnd_bytes),
        "ns3::TcpCubic::HyStart": ns.BooleanValue(hystart),
        "ns3::TcpSocket::InitialCwnd": ns.UintegerValue(10),
        "ns3::TcpSocket::DelAckCount": ns.UintegerValue(2),
        "ns3::TcpSocket::DelAckTimeout": ns.TimeValue(ns.MilliSeconds(40)),
        "ns3::TcpSocketBase::MinRto": ns.TimeValue(ns.MilliSeconds(200)),
        "ns3::TcpSocketBase::ClockGranularity": ns.TimeValue(ns.MilliSeconds(1)),
        "ns3::TcpSocketBase::Sack": ns.BooleanValue(loss.sack),
        "ns3::TcpSocketBase::Timestamp": ns.BooleanValue(False),
        "ns3::WifiMacQueue::MaxDelay": ns.TimeValue(ns.Seconds(1000.0)),
        # Set either way: a default stays set for the rest of the process.
        "ns3::WifiMacQueue::MaxSize": ns.StringValue(
            f"{loss.queue_packets or NS3_MAC_QUEUE_DEFAULT}p"
        ),
    }
    for key, value in defaults.items():
        ns.Config.SetDefault(key, value)
    ap = ns.NodeContainer()
    ap.Create(1)
    stas = ns.NodeContainer()
    stas.Create(case.n)
    channel = ns.YansWifiChannelHelper.Default()
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(channel.Create())
    phy.Set("ChannelSettings", ns.StringValue("{42, 80, BAND_5GHZ, 0}"))
    phy.Set("Antennas", ns.UintegerValue(2))
    phy.Set("MaxSupportedTxSpatialStreams", ns.UintegerValue(2))
    phy.Set("MaxSupportedRxSpatialStreams", ns.UintegerValue(2))
    wifi = ns.WifiHelper()
    wifi.SetStandard(ns.WIFI_STANDARD_80211ac)
    wifi.SetRemoteStationManager(
        "ns3::ConstantRateWifiManager",
        "DataMode", ns.StringValue("VhtMcs7"),
        "ControlMode", ns.StringValue("OfdmRate24Mbps"),
    )  # fmt: skip
    mac = ns.WifiMacHelper()
    ssid = ns.Ssid("coorp")
    ampdu = ns.UintegerValue(1_048_575)
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu)
    sta_devs = wifi.Install(phy, mac, stas)
    mac.SetType("ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu)
    ap_devs = wifi.Install(phy, mac, ap)
    queue_limit = int(tr.BeQueueLimit(sta_devs.Get(0)))
    ap_if = place_and_address(ns, case.n, ap, stas, ap_devs, sta_devs)
    # No queue disc (assigning addresses installed fq_codel): the segments wait in the
    # WiFi MAC queue (500 packets, more than the window, unless --queue-packets), as they
    # wait in coorp's kernel queue and ring; nothing is dropped unless it is full.
    tch = ns.TrafficControlHelper()
    tch.Uninstall(ap_devs)
    tch.Uninstall(sta_devs)
    ns.NeighborCacheHelper().PopulateNeighborCache()
    _warm_up_block_ack(ns, case.n, ap, stas, ap_if)
    port = 9
    any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
    sinks = ns.PacketSinkHelper("ns3::TcpSocketFactory", any_addr).Install(ap.Get(0))
    sinks.Start(ns.Seconds(0.0))
    dst = ns.InetSocketAddress(ap_if.GetAddress(0), port).ConvertTo()
    bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", dst)
    bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
    bulk.SetAttribute("SendSize", ns.UintegerValue(NS3_MSS))
    apps = bulk.Install(stas)
    apps.Start(ns.Seconds(NS3_APP_START_S))
    # The sockets exist once the applications have started: trace their windows then.
    ns.Simulator.Stop(ns.Seconds(NS3_APP_START_S + 1e-6))
    ns.Simulator.Run()
    if not tr.Connect(case.n):
        raise RuntimeError("ns-3: a TCP, traffic control or WiFi MAC trace did not connect")
    ns.Simulator.Stop(ns.Seconds(warmup_s - ns.Simulator.Now().GetSeconds()))  # relative
    ns.Simulator.Run()
    sink = ns.DynamicCast[ns.PacketSink](sinks.Get(0))
    rx0 = int(sink.GetTotalRx())
    startup = time.perf_counter() - t_build
    t0 = time.perf_counter()
    ns.Simulator.Stop(ns.Seconds(duration_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    rx1 = int(sink.GetTotalRx())
    traces = []
    app_start = round(NS3_APP_START_S * 1e9)
    for i in range(case.n):
        ts, ws = list(tr.t[i]), list(tr.w[i])
        traces.append([(t - app_start, w // NS3_MSS) for t, w in zip(ts, ws, strict=True)])
    stations = range(1, case.n + 1)
    losses = {
        "queue_limit_packets": queue_limit,
        "drops": sum(tr.tcDrop[k] + tr.queueDrop[k] for k in stations),
        "ap_drops": int(tr.tcDrop[0] + tr.queueDrop[0]),
        "tc_drops": [int(x) for x in tr.tcDrop],
        "queue_drops": [int(x) for x in tr.queueDrop],
        "mac_drops": sum(tr.macDrop[k] for k in stations),
        "retransmits": [int(x) for x in tr.retx],
        "fast_recoveries": [int(x) for x in tr.recov],
        "timeouts": [int(x) for x in tr.rto],
    }
    ns.Simulator.Destroy()
    return {
        "losses": losses,
        "mbps": (rx1 - rx0) * 8 / duration_s / 1e6 * PACKET_BYTES / NS3_MSS,
        "wall_s": wall,
        "startup_s": startup,
        # When each connection sent its first segment (established: cwnd set), from
        # the applications' start: coorp's connections start at the same instants.
        "starts_ns": [t[0][0] if t else 0 for t in traces],
        "traces": traces,
    }


def _warm_up_block_ack(ns: Any, n: int, ap: Any, stas: Any, ap_if: Any) -> None:
    """A few UDP datagrams each way between the AP and every station half a second before
    the connections open: ns-3 sets up each Block Ack agreement (ADDBA) with the first
    data of a link, which coorp's channel has from the start."""
    port = 10
    any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
    servers = ns.PacketSinkHelper("ns3::UdpSocketFactory", any_addr)
    sinks = servers.Install(ap.Get(0))
    sinks.Add(servers.Install(stas))
    sinks.Start(ns.Seconds(0.0))
    for i in range(n):
        sta = stas.Get(i)
        sta_addr = sta.GetObject[ns.Ipv4]().GetAddress(1, 0).GetLocal()
        for dst, src in ((ap_if.GetAddress(0), sta), (sta_addr, ap.Get(0))):
            client = ns.UdpClientHelper(ns.InetSocketAddress(dst, port).ConvertTo())
            client.SetAttribute("MaxPackets", ns.UintegerValue(16))
            client.SetAttribute("Interval", ns.TimeValue(ns.MicroSeconds(50)))
            client.SetAttribute("PacketSize", ns.UintegerValue(1000))
            apps = client.Install(src)
            apps.Start(ns.Seconds(NS3_APP_START_S - 0.5 + 0.01 * i))


# -- comparing the traces ----------------------------------------------------------------------
def sample(trace: list[tuple[int, int]], until_ns: int, cap: int) -> list[int]:
    """The step function ``trace`` (time, cwnd) every ``SAMPLE_NS`` up to ``until_ns``,
    capped at ``cap`` segments."""
    out: list[int] = []
    j = 0
    value = trace[0][1] if trace else 0
    for k in range(until_ns // SAMPLE_NS + 1):
        t = k * SAMPLE_NS
        while j < len(trace) and trace[j][0] <= t:
            value = trace[j][1]
            j += 1
        out.append(min(value, cap))
    return out


def reach_ms(samples: list[int], cap: int) -> float | None:
    for k, v in enumerate(samples):
        if v >= cap:
            return k * SAMPLE_NS / 1e6
    return None


def compare_traces(ours: dict[str, Any], theirs: dict[str, Any], rwnd_bytes: int,
                   trace_ms: float) -> dict[str, Any]:  # fmt: skip
    """Mean relative difference of the windows (each capped at the receive window): per
    connection from its own first segment, and of their sum from the applications'
    start (what several senders offer together)."""
    cap = max(rwnd_bytes // MSS, 1)
    until = round(trace_ms * 1e6)
    per: list[dict[str, Any]] = []
    diffs: list[float] = []
    total_a = [0] * (until // SAMPLE_NS + 1)
    total_b = [0] * (until // SAMPLE_NS + 1)
    for a, b, sa0, sb0 in zip(ours["traces"], theirs["traces"], ours["starts_ns"],
                              theirs["starts_ns"], strict=True):  # fmt: skip
        sa = sample([(t - sa0, w) for t, w in a], until, cap)
        sb = sample([(t - sb0, w) for t, w in b], until, cap)
        d = [abs(x - y) / y for x, y in zip(sa, sb, strict=True) if y > 0]
        diffs.extend(d)
        per.append({
            "mean_rel_diff": sum(d) / len(d) if d else None,
            "coorp_reach_ms": reach_ms(sa, cap), "ns3_reach_ms": reach_ms(sb, cap),
        })  # fmt: skip
        for k, (x, y) in enumerate(zip(sample(a, until, cap), sample(b, until, cap), strict=True)):
            total_a[k] += x
            total_b[k] += y
    agg = [abs(x - y) / y for x, y in zip(total_a, total_b, strict=True) if y > 0]
    return {
        "cap_segments": cap,
        "mean_rel_diff": sum(diffs) / len(diffs) if diffs else None,
        "aggregate_mean_rel_diff": sum(agg) / len(agg) if agg else None,
        "connections": per,
    }


def mean_window(run: dict[str, Any], until_ns: int, cap: int) -> list[float]:
    """The mean over connections of the capped window, from the applications' start."""
    curves = [sample(t, until_ns, cap) for t in run["traces"]]
    return [sum(col) / len(curves) for col in zip(*curves, strict=True)]


def compare_seeds(runs: list[dict[str, Any]], rwnd_bytes: int, trace_ms: float) -> dict[str, Any]:
    """Over the seeds: the per-connection difference (mean of each seed's), and the
    difference of the mean window curves (the expected window per connection, from the
    applications' start: what contention order does not decide)."""
    cap = max(rwnd_bytes // MSS, 1)
    until = round(trace_ms * 1e6)
    per = [r["cwnd"]["mean_rel_diff"] for r in runs if r["cwnd"]["mean_rel_diff"] is not None]
    a = [mean_window(r["coorp"], until, cap) for r in runs]
    b = [mean_window(r["ns3"], until, cap) for r in runs]
    ma = [sum(col) / len(a) for col in zip(*a, strict=True)]
    mb = [sum(col) / len(b) for col in zip(*b, strict=True)]
    d = [abs(x - y) / y for x, y in zip(ma, mb, strict=True) if y > 0]
    interval, self_diff = seed_noise(a, b)
    return {
        "cap_segments": cap,
        "mean_rel_diff": sum(per) / len(per) if per else None,
        "mean_window_rel_diff": sum(d) / len(d) if d else None,
        "mean_window_interval": interval,
        "ns3_self_rel_diff": self_diff,
        "coorp_mean_window": ma,
        "ns3_mean_window": mb,
        "coorp_reach_ms": reach_ms([round(x) for x in ma], cap),
        "ns3_reach_ms": reach_ms([round(x) for x in mb], cap),
    }


#: Resamples for the mean window difference's interval, and random halvings of ns-3's
#: seeds for its own spread; a fixed generator keeps the report reproducible.
RESAMPLES = 2000
HALVINGS = 50


def _curve_diff(a: Any, b: Any) -> float:
    """Mean of ``|a - b| / b`` over the samples where ``b > 0`` (two mean curves)."""
    import numpy as np

    keep = b > 0
    return float(np.mean(np.abs(a[keep] - b[keep]) / b[keep])) if keep.any() else float("nan")


def seed_noise(ours: list[list[float]], theirs: list[list[float]]
               ) -> tuple[list[float] | None, float | None]:  # fmt: skip
    """How much of the mean window difference the seeds alone explain.

    * The 95% interval of the difference of the two mean curves, resampling the seeds
      (paired: a resample takes seed ``k`` on both sides, percentile bootstrap).
    * ns-3 against itself: the same metric between two disjoint random halves of its
      seeds (mean over ``HALVINGS`` halvings) — what two sets of ``n/2`` ns-3 seeds
      differ by; two sets of ``n`` differ by about ``1/√2`` of it.

    (None, None) with fewer than 4 seeds."""
    import numpy as np

    n = len(theirs)
    if n < 4:
        return None, None
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    rng = np.random.default_rng(0)
    boot = [
        _curve_diff(a[idx].mean(axis=0), b[idx].mean(axis=0))
        for idx in rng.integers(0, n, size=(RESAMPLES, n))
    ]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    halves = []
    for _ in range(HALVINGS):
        perm = rng.permutation(n)
        halves.append(_curve_diff(b[perm[: n // 2]].mean(axis=0), b[perm[n // 2 :]].mean(axis=0)))
    return [float(lo), float(hi)], float(np.mean(halves))


#: Student's t at 97.5% for 1..30 degrees of freedom (1.96 beyond).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def mean_ci95(xs: list[float]) -> tuple[float, float | None]:
    """The mean and the half-width of its 95% interval (Student's t; None for one value)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, None
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return mean, t * (var / n) ** 0.5


def summarize_losses(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's runs of a case: the throughput's mean and 95% half-width over the seeds,
    and the mean per seed of each count (summed over the connections)."""
    mbps, half = mean_ci95([r["mbps"] for r in runs])
    out: dict[str, Any] = {"mbps": mbps, "mbps_ci95": half}
    out["queue_limit_packets"] = runs[0]["losses"]["queue_limit_packets"]
    for key in ("drops", "ap_drops", "mac_drops", "retransmits", "fast_recoveries", "timeouts"):
        per_seed = [r["losses"][key] for r in runs]
        out[key] = sum(x if isinstance(x, int) else sum(x) for x in per_seed) / len(runs)
    return out


def loss_table(results: list[dict[str, Any]], loss: Loss) -> Table:
    """Per case and side: throughput ± 95%, and drops, retransmissions, fast recoveries,
    timeouts per seed."""
    bound = (
        f"{loss.queue_packets} packets per station (coorp: ring {RING_PACKETS} + kernel "
        f"{loss.kernel_packets})"
        if loss.queue_packets is not None
        else f"unbounded (ns-3: {NS3_MAC_QUEUE_DEFAULT} packets)"
    )
    table = Table(title=f"Losses and recovery, SACK {'on' if loss.sack else 'off'}, queue {bound}")
    for col in ("case", "side", "Mb/s ± 95%", "queue limit", "drops", "retransmits",
                "fast recoveries", "timeouts", "AP drops", "MAC drops"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("case", "side") else "right")
    for r in results:
        for side, name in (("coorp", "coorp"), ("ns3", "ns-3")):
            s = r["losses"][side]
            if s is None:
                continue
            half = "" if s["mbps_ci95"] is None else f" ± {s['mbps_ci95']:.1f}"
            limit = s["queue_limit_packets"]
            table.add_row(
                r["case"], name, f"{s['mbps']:.1f}{half}", "-" if limit is None else str(limit),
                *(f"{s[k]:.1f}" for k in ("drops", "retransmits", "fast_recoveries", "timeouts",
                                          "ap_drops", "mac_drops")),
            )  # fmt: skip
    return table


def figure(path: Path, results: list[dict[str, Any]], trace_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [r for r in results if r["cwnd"] is not None]
    if not cases:
        return
    fig, axes = plt.subplots(1, len(cases), figsize=(3.2 * len(cases), 3.0), squeeze=False)
    for ax, r in zip(axes[0], cases, strict=True):
        c = r["cwnd"]
        xs = [k * SAMPLE_NS / 1e6 for k in range(len(c["ns3_mean_window"]))]
        ax.plot(xs, c["ns3_mean_window"], color="0.5", label="ns-3")
        ax.plot(xs, c["coorp_mean_window"], color="C0", label="coorp")
        ax.axhline(c["cap_segments"], color="k", lw=0.6, ls=":")
        ax.set_ylim(0, c["cap_segments"] * 1.15)
        ax.set_title(f"{r['case']} ({len(r['runs'])} seeds)", fontsize=9)
        ax.set_xlabel("ms since the applications start")
    axes[0][0].set_ylabel("window per connection, segments")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated <cc>-<n>[-<kib>k]")
    ap.add_argument("--rwnd", type=int, default=262_144, help="receive window bytes (default)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds before the measurement")
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds")
    ap.add_argument("--trace-ms", type=float, default=40.0, help="trace comparison span, ms")
    ap.add_argument("--seed", type=int, default=1, help="the first seed")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per case (means over them)")
    ap.add_argument(
        "--hystart", choices=("on", "off"), default="off",
        help="CUBIC's HyStart on both sides (off by default: see the module docstring)",
    )  # fmt: skip
    ap.add_argument(
        "--starts", choices=("handshake", "ns3"), default="handshake",
        help="coorp's connections open with a SYN and SYN-ACK over the channel at the "
        "applications' start, as ns-3's do (default), or start at the instants ns-3's "
        "sent their first segment",
    )  # fmt: skip
    ap.add_argument(
        "--sack", choices=("on", "off"), default="off",
        help="SACK on both sides (off by default: ns-3's off, coorp's [tcp] sack not set)",
    )  # fmt: skip
    ap.add_argument(
        "--queue-packets", type=int, metavar="N",
        help="each station holds at most N packets per access category, tail drop: ns-3's "
        f"WifiMacQueue::MaxSize, coorp's ring ({RING_PACKETS}) and a FIFO kernel queue of "
        f"N - {RING_PACKETS} (default: ns-3's {NS3_MAC_QUEUE_DEFAULT}, coorp unbounded)",
    )  # fmt: skip
    ap.add_argument("--no-ns3", action="store_true", help="skip ns-3 even if importable")
    ap.add_argument("--json", type=Path, help='write {"rows": [{case, coorp_mbps, ns3_mbps}]}')
    ap.add_argument("--details", type=Path, help="write every number and trace here")
    ap.add_argument("--figure", type=Path, help="plot the cwnd traces here (PNG)")
    args = ap.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    try:
        cases = [Case.parse(c.strip(), args.rwnd) for c in args.cases.split(",") if c.strip()]
    except ValueError as exc:
        console.print(f"error: {escape(str(exc))}")
        return 2
    if args.warmup <= 0 or args.duration <= 0 or args.trace_ms <= 0 or args.seeds < 1:
        console.print("error: --warmup, --duration, --trace-ms and --seeds must be > 0")
        return 2
    loss = Loss(sack=args.sack == "on", queue_packets=args.queue_packets)
    try:
        coorp_scenario(cases[0], None, loss)
    except (ValueError, ScenarioError) as exc:  # the bound; a coorp without [tcp] sack
        console.print(f"error: {escape(str(exc))}")
        return 2
    load_before = os.getloadavg()
    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and not args.no_ns3:
        console.print(escape(INSTALL_HINT), style="yellow")
        console.print(escape(f"({why})"), style="dim")
    results: list[dict[str, Any]] = []
    seeds = list(range(args.seed, args.seed + args.seeds))
    for case in cases:
        runs = []
        for seed in seeds:
            theirs = None
            if ns is not None:
                theirs = run_ns3(ns, case, NS3_APP_START_S + args.warmup, args.duration,
                                 seed, args.hystart == "on", loss)  # fmt: skip
            starts = theirs["starts_ns"] if theirs is not None and args.starts == "ns3" else None
            ours = run_coorp(case, args.warmup, args.duration, seed, starts, args.hystart, loss)
            cwnd = (
                compare_traces(ours, theirs, case.rwnd_bytes, args.trace_ms)
                if theirs is not None
                else None
            )
            runs.append({"seed": seed, "coorp": ours, "ns3": theirs, "cwnd": cwnd})
        ns3_mbps = [r["ns3"]["mbps"] for r in runs if r["ns3"] is not None]
        results.append({
            "case": case.name, "cc": case.cc, "n": case.n, "rwnd_bytes": case.rwnd_bytes,
            "coorp_mbps": sum(r["coorp"]["mbps"] for r in runs) / len(runs),
            "ns3_mbps": sum(ns3_mbps) / len(ns3_mbps) if ns3_mbps else None,
            "coorp_wall_s": sum(r["coorp"]["wall_s"] for r in runs),
            "ns3_wall_s": sum(r["ns3"]["wall_s"] for r in runs) if ns3_mbps else None,
            "cwnd": compare_seeds(runs, case.rwnd_bytes, args.trace_ms) if ns3_mbps else None,
            "losses": {
                "coorp": summarize_losses([r["coorp"] for r in runs]),
                "ns3": summarize_losses([r["ns3"] for r in runs]) if ns3_mbps else None,
            },
            "runs": runs,
        })  # fmt: skip
        console.print(f"[dim]done: {case.name}[/dim]")
    table = Table(
        title=f"TCP over 802.11ac (80 MHz 2x2 MCS 7), {args.duration:g} s after {args.warmup:g} s"
    )
    for col in ("case", "coorp Mb/s", "ns-3 Mb/s", "coorp / ns-3", "cwnd diff per conn.",
                "mean window diff (95%)", "ns-3 halves", "reach rwnd ms coorp / ns-3",
                "coorp wall s", "ns-3 wall s"):  # fmt: skip
        table.add_column(col, justify="left" if col == "case" else "right")

    def pct(x: float | None, sign: str = "") -> str:
        return "-" if x is None else f"{100 * x:{sign}.1f}%"

    def interval(c: dict[str, Any]) -> str:
        iv = c["mean_window_interval"]
        return "" if iv is None else f" ({pct(iv[0])}–{pct(iv[1])})"

    for r in results:
        c = r["cwnd"]
        table.add_row(
            r["case"],
            f"{r['coorp_mbps']:.1f}",
            "-" if r["ns3_mbps"] is None else f"{r['ns3_mbps']:.1f}",
            "-" if r["ns3_mbps"] is None else pct(r["coorp_mbps"] / r["ns3_mbps"] - 1, "+"),
            "-" if c is None else pct(c["mean_rel_diff"]),
            "-" if c is None else pct(c["mean_window_rel_diff"]) + interval(c),
            "-" if c is None else pct(c["ns3_self_rel_diff"]),
            "-" if c is None else f"{c['coorp_reach_ms']} / {c['ns3_reach_ms']}",
            f"{r['coorp_wall_s']:.2f}",
            "-" if r["ns3_wall_s"] is None else f"{r['ns3_wall_s']:.1f}",
        )
    console.print(table)
    console.print(loss_table(results, loss))
    load_after = os.getloadavg()
    console.print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {"case": r["case"], "coorp_mbps": r["coorp_mbps"], "ns3_mbps": r["ns3_mbps"]}
            for r in results
        ]
        args.json.write_text(json.dumps({"rows": rows}, indent=2))
        console.print(f"wrote {args.json}")
    if args.details:
        args.details.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": " ".join(["python benchmarks/tcp_crosscheck.py", *sys.argv[1:]]),
            "ns3_version": ns3_version() if ns is not None else None,
            "ns3_import_s": import_s if ns is not None else None,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "trace_ms": args.trace_ms,
            "starts": args.starts,
            "sack": loss.sack,
            "queue_packets": loss.queue_packets,
            "coorp_kernel_queue_packets": loss.kernel_packets,
            "coorp_ring_packets": RING_PACKETS,
            "seeds": seeds,
            "results": results,
        }
        args.details.write_text(json.dumps(doc))
        console.print(f"wrote {args.details}")
    if args.figure:
        figure(args.figure, results, args.trace_ms)
        console.print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
