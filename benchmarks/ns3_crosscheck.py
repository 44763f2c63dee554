"""Cross-check coorp's channel simulator against ns-3 and Bianchi's model.

The same saturated uplink in all three: N stations, each sending IP packets of
``--payload`` bytes as fast as the channel allows to one access point, 80 MHz, 2 spatial
streams, a fixed MCS, control frames at 24 Mb/s, AC_BE with the standard EDCA parameters
(AIFSN 3, CWmin 15, CWmax 1023, no TXOP limit), A-MPDU aggregation (up to 64 MPDUs /
1 048 575 bytes) or none, basic access or RTS/CTS. ``--standard ac`` (default): 802.11ac,
VHT PPDUs, long guard interval; ``--standard ax``: 802.11ax, HE SU PPDUs, HE-MCS 0-11,
guard interval ``--gi`` ns (800 default; ns-3's own default is 3200, so it is set).

* ns-3 (Python bindings of the PyPI wheel ``ns3``, ``pip install 'coorp[ns3]'``):
  YansWifiChannel with the default log-distance loss, stations on a 1 m circle around
  the AP (no PHY errors), ConstantRateWifiManager, one OnOff UDP source per station at
  twice its fair share of the model's throughput (a backlog builds within a few ms and
  never drains), a PacketSink at the AP. ns-3 always uses its own BlockAckReq retry
  behaviour, so the coorp and Bianchi columns use ``retry_policy = "ns3"``.
* coorp: :func:`coorp.sim.simulate` on the equivalent scenario (bulk flows, no TCP acks).
* Bianchi: :func:`coorp.analysis.saturation_throughput`.

Two things in ns-3 differ from coorp and its model by construction (docs/validation.md):
ns-3 3.44 leaves VHT-SIG-B out of VHT SU PPDUs (4 µs less per data PPDU) and times HE
PPDUs its own way (8 µs per HE-LTF whatever the GI, BCC-style symbol count without the
LDPC extra symbol: ``ns3_data_ns``), and what a
station does after overhearing a collision depends in ns-3 on the SINR at which it hears
it (no sync: AIFS; sync and error: EIFS), where coorp has everyone wait out the missing
response. ``--ns3-rx`` runs ns-3 with other PHY settings that pin down that rule (``nav``
reproduces coorp's for basic access, ``aifs`` Bianchi's original ``T_c = DATA + DIFS``),
each next to the model with ns-3's airtime and that rule (``model (...)`` columns).
``--ns3-trace`` counts ns-3's exchanges and collisions from its PHY traces.

Throughput is delivered IP bytes (UDP payload + 28) per second in every column. Wall
times are per simulated second; ns-3's start-up (import + building the topology +
association + warm-up) is reported separately. Without ns-3 the script prints how to
install it and still shows the coorp and Bianchi columns (exit status 0).

    python benchmarks/ns3_crosscheck.py --n 1,5,10 --duration 2 --json results/ns3.json
    python benchmarks/ns3_crosscheck.py --variants single-basic --n 10,40 \\
        --ns3-rx default,nav,aifs --ns3-trace
    python benchmarks/ns3_crosscheck.py --standard ax --mcs 11 --n 1,5,10,20

``--mixed-destinations`` runs another comparison instead (issue 36): senders whose UDP
flows go to several receivers (an AP serving 2 to 16 stations, the AP beside uplinks,
a station sending to two peers in an IBSS), so that their queue holds interleaved
destinations and the A-MPDUs are built per receiver and TID. coorp runs its per-AC
rings (ns-3's model: one MAC queue per access category, 500 packets as ns-3's
``WifiMacQueue``) with ``mac.ampdu_grouping = "per_receiver_tid"``; the table adds
``consecutive`` (coorp before issue 36) and, with ``--rings per_ac,shared``, the shared
FIFO ring, for information. ``--json`` writes exactly ``{"rows": [{"case",
"coorp_mbps", "ns3_mbps"}]}`` for the cross-checked rows.

    python benchmarks/ns3_crosscheck.py --mixed-destinations --duration 5 --json x.json
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coorp.analysis import ampdu_size, saturation_throughput, slot_throughput
from coorp.phy import ACK_BYTES, SIFS_NS, SLOT_NS, HeMode, legacy_duration_ns
from coorp.scenario import AccessCategory, RetryPolicy, Scenario, parse_scenario
from coorp.sim import Simulation, simulate
from coorp.sim.timing import ExchangeTiming, aifs_ns, edca_params, mpdu_bytes, psdu_bytes

IP_UDP_HEADER_BYTES = 28
#: ns-3 stations need to associate before traffic flows; sources start here.
NS3_APP_START_S = 1.0
#: ``--ns3-rx aifs``: a preamble-detection threshold above every SINR a collision can give a
#: station here (<= 33 dB: colliders 0.16 m and 2 m away at N = 40, path-loss exponent 3)
#: and below the SNR of every lone frame (>= 48 dB).
NS3_AIFS_PD_THRESHOLD_DB = 40.0
INSTALL_HINT = (
    "ns-3 is not importable here: install its Python bindings with\n"
    "    pip install 'coorp[ns3]'        (the PyPI wheel 'ns3', ~0.5 GB, Linux x86-64)\n"
    "preferably in a separate virtualenv. Showing coorp and Bianchi only."
)
VARIANTS = ("ampdu-basic", "ampdu-rts", "single-basic", "single-rts")


@dataclass(frozen=True)
class Config:
    """One channel configuration, shared by the three columns."""

    n: int
    aggregation: bool = True
    rts: bool = False
    mcs: int = 7
    payload_bytes: int = 1500
    retry_policy: str = "ns3"
    standard: str = "ac"
    gi_ns: int = 800  # HE only
    mpdus: int = 64  # MPDUs per A-MPDU: the Block Ack window (up to 256 with HE)

    @property
    def variant(self) -> str:
        return f"{'ampdu' if self.aggregation else 'single'}-{'rts' if self.rts else 'basic'}"

    @classmethod
    def from_variant(cls, n: int, variant: str, **kw: Any) -> Config:
        agg, access = variant.split("-")
        return cls(n=n, aggregation=agg == "ampdu", rts=access == "rts", **kw)


def coorp_scenario(cfg: Config) -> Scenario:
    mac: dict[str, Any] = {"retry_policy": cfg.retry_policy, "max_ampdu_mpdus": cfg.mpdus}
    if not cfg.aggregation:
        mac["edca"] = {"BE": {"aggregation": False}}
    if cfg.rts:
        mac["rts_threshold_bytes"] = 0
    return parse_scenario(
        {
            "name": f"saturation-{cfg.variant}-{cfg.n}",
            "packet_bytes": cfg.payload_bytes,
            "phy": _phy(cfg),
            "mac": mac,
            # A ring that holds two full A-MPDUs (the default 128 packets would cap one
            # at 128 MPDUs with a 256-MPDU window).
            "hw_queue": {"capacity_packets": max(128, 2 * cfg.mpdus)},
            "links": {"mode": "fixed", "mcs": cfg.mcs},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(cfg.n)],
            "flows": [
                {"kind": "bulk", "name": f"up{i}", "src": f"sta{i}", "dst": "ap", "tcp_acks": False}
                for i in range(cfg.n)
            ],
        }
    )


def _phy(cfg: Config) -> dict[str, Any]:
    if cfg.standard == "ax":
        return {"standard": "ax", "width_mhz": 80, "spatial_streams": 2,
                "he_guard_interval_ns": cfg.gi_ns}  # fmt: skip
    return {"width_mhz": 80, "spatial_streams": 2, "guard_interval": "long"}


def bianchi_mbps(cfg: Config) -> float:
    sc = coorp_scenario(cfg)
    return saturation_throughput(
        cfg.n, payload_bytes=cfg.payload_bytes, mcs=cfg.mcs, phy=sc.phy, mac=sc.mac
    ).throughput_mbps


#: ns-3 3.44 leaves VHT-SIG-B (4 µs) out of VHT SU PPDUs (802.11-2016 21.3.2 and the TXTIME
#: of 21.4.3 have it in every VHT PPDU): each data PPDU is 4 µs shorter there than in coorp.
NS3_VHT_SU_SHORTER_NS = 4_000
#: EIFS - DIFS = SIFS + an Ack at the lowest mandatory rate, 6 Mb/s (802.11-2016 10.3.2.3.7).
EIFS_MINUS_DIFS_NS = SIFS_NS + legacy_duration_ns(ACK_BYTES, 6)
#: After an RTS that no CTS follows, a station that set its NAV from the RTS resets it after
#: NAVTimeout = 2 SIFS + CTS + aRxPHYStartDelay + 2 slots (802.11-2016 10.3.2.4); ns-3 uses
#: the 20 µs non-HT preamble + header for aRxPHYStartDelay.
NAV_TIMEOUT_EXTRA_NS = SIFS_NS + 20_000 + 2 * SLOT_NS  # beyond coorp's SIFS + CTS


def ns3_data_ns(cfg: Config, timing: ExchangeTiming, psdu: int) -> int:
    """How long ns-3 3.44 takes to send a data PPDU of ``psdu`` bytes.

    VHT: coorp's minus VHT-SIG-B. HE (``HePhy``, ``HtPhy::GetPayloadDuration``): L-STF +
    L-LTF 16 µs, L-SIG + RL-SIG 8, HE-SIG-A 8, HE-STF 4, 8 µs per HE-LTF whatever the
    guard interval (its "TODO extract from TxVector"), then ``ceil((16 + 8 L + 6) /
    N_DBPS)`` symbols - one BCC tail, no LDPC extra symbol, no packet extension - with
    N_DBPS from ns-3's per-stream rate ``ceil(N_SD · bits · R / T_SYM)`` (b/s)."""
    if cfg.standard != "ax":
        return timing.data_ns(psdu, cfg.mcs) - NS3_VHT_SU_SHORTER_NS
    mode = timing.mode(cfg.mcs)
    assert isinstance(mode, HeMode)
    # OfdmPhy::CalculateDataRate, in the same double arithmetic.
    bits = mode.coded_bits_per_symbol // (mode.nss * 980)
    rate = mode.coding_rate
    per_stream_bps = math.ceil(
        (1e9 / mode.symbol_ns) * 980 * bits * (rate.numerator / rate.denominator)
    )
    n_dbps = mode.nss * per_stream_bps * mode.symbol_ns / 1e9
    n_sym = math.ceil((16 + 8 * psdu + 6) / n_dbps)
    return 36_000 + 8_000 * mode.nss + n_sym * mode.symbol_ns


#: The model matching each ``--ns3-rx`` setting: how long a collision keeps the others off.
RX_MODEL_COLLISION = {"nav": "nav", "aifs": "aifs", "eifs": "eifs"}


def model_mbps(cfg: Config, *, ns3_airtime: bool = False, collision: str = "coorp") -> float:
    """Bianchi's model on raw durations (``slot_throughput``), as ``saturation_throughput``
    builds them, optionally with ns-3's VHT PPDU airtime and another collision length:

    * ``coorp``: everyone waits out the missing response (``timing.failure_ns``) + AIFS;
    * ``nav``: the same for basic access (the Duration of a data frame covers SIFS + Ack);
      after an RTS, its NAVTimeout: ``RTS + 2 SIFS + CTS + 20 µs + 2 slots`` + AIFS;
    * ``aifs``: the first PPDU (data, RTS or BAR) + AIFS - Bianchi's original
      ``T_c = H + P + DIFS``: nobody decoded anything, nobody waits for a response;
    * ``eifs``: the first PPDU + EIFS - DIFS + AIFS, what a station that received a
      colliding frame in error does (the senders time out ~15 µs earlier; ignored).

    With ``ns3_airtime=False`` and ``collision="coorp"`` it is ``bianchi_mbps``."""
    sc = coorp_scenario(cfg)
    phy, mac = sc.phy, sc.mac
    params = edca_params(mac)[AccessCategory.BE]
    timing = ExchangeTiming(phy, ba_window=mac.max_ampdu_mpdus)
    k = ampdu_size(cfg.payload_bytes, cfg.mcs, phy, mac)
    psdu = psdu_bytes([mpdu_bytes(cfg.payload_bytes)] * k)
    rts = psdu > mac.rts_threshold_bytes
    block_ack = params.aggregation and k > 1
    data = ns3_data_ns(cfg, timing, psdu) if ns3_airtime else timing.data_ns(psdu, cfg.mcs)
    aifs = aifs_ns(params.aifsn)
    ns3 = block_ack and mac.retry_policy is RetryPolicy.NS3 and not rts
    first = timing.rts_ns if rts else data
    after = {"coorp": None, "nav": None, "aifs": 0, "eifs": EIFS_MINUS_DIFS_NS}[collision]
    bar = timing.bar_exchange_ns() + aifs
    if after is None:
        t_c = timing.failure_ns(data, block_ack=block_ack, rts=rts) + aifs
        if collision == "nav" and rts:
            t_c += NAV_TIMEOUT_EXTRA_NS
        bar_c = bar
    else:
        t_c = first + after + aifs
        bar_c = timing.bar_ns + after + aifs
    r = slot_throughput(
        cfg.n,
        slot_ns=SLOT_NS,
        t_success_ns=timing.success_ns(data, block_ack=block_ack, rts=rts) + aifs,
        t_collision_ns=t_c,
        cw_min=params.cw_min,
        cw_max=params.cw_max,
        retry_limit=mac.retry_limit + 1 if ns3 else mac.retry_limit,
        payload_bits=8 * cfg.payload_bytes * k,
        bar_success_ns=bar if ns3 else None,
        bar_collision_ns=bar_c if ns3 else None,
    )
    return r.throughput_mbps


@dataclass(frozen=True)
class Run:
    mbps: float
    wall_s: float  # around the measured window only
    simulated_s: float
    startup_s: float = 0.0  # ns-3: topology + association + warm-up
    exchanges: int = 0  # coorp: channel exchanges started (ns-3: see Ns3Trace)
    collisions: int = 0


def run_coorp(cfg: Config, duration_s: float, seed: int = 1) -> Run:
    sc = coorp_scenario(cfg)
    t0 = time.perf_counter()
    res = simulate(sc, seed=seed, duration_ns=round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    mbps = sum(res.flows[f"up{i}"].throughput_mbps for i in range(cfg.n))
    return Run(mbps, wall, duration_s, 0.0, res.channel.exchanges, res.channel.collisions)


# -- ns-3 -------------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_stderr() -> Iterator[Path]:
    """cppyy prints harmless JIT warnings ("Failed to materialize symbols") on fd 2 while
    the bindings load; park them in a file, shown only if the import fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False) as log:
        os.dup2(log.fileno(), 2)
        try:
            yield Path(log.name)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def import_ns3() -> tuple[Any | None, float, str]:
    """``(ns module or None, import seconds, reason if not importable)``."""
    t0 = time.perf_counter()
    with _quiet_stderr() as log:
        try:
            from ns import ns

            ns.Simulator.Now()  # force the core library to load
        except Exception as exc:  # ImportError, or cppyy failing to load the libraries
            detail = log.read_text(errors="replace").strip().splitlines()[-5:]
            return None, time.perf_counter() - t0, f"{type(exc).__name__}: {exc} {detail}"
    with contextlib.suppress(OSError):
        log.unlink()
    return ns, time.perf_counter() - t0, ""


def ns3_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ns3")
    except PackageNotFoundError:
        return "unknown"


_TRACE_CPP = """
#include "ns3/core-module.h"
#include "ns3/wifi-module.h"
#include <map>
#include <string>
#include <vector>
namespace coorp_trace {
bool on = false;
std::vector<int64_t> start, end, node, first;  // every PPDU sent; first: opens an exchange
std::map<int, uint64_t> drops;                  // AP: PHY drop reason -> count
uint64_t staRxErrors = 0;                       // stations: PPDUs received in error (EIFS)
int NodeOf(const std::string& ctx) { return std::stoi(ctx.substr(ctx.find("/NodeList/") + 10)); }
void Tx(std::string ctx, ns3::WifiConstPsduMap psdus, ns3::WifiTxVector txv, double) {
    if (!on) return;
    const ns3::WifiMacHeader& h = psdus.begin()->second->GetHeader(0);
    ns3::Time now = ns3::Simulator::Now();
    start.push_back(now.GetNanoSeconds());
    end.push_back((now + ns3::WifiPhy::CalculateTxDuration(psdus, txv, ns3::WIFI_PHY_BAND_5GHZ))
                      .GetNanoSeconds());
    node.push_back(NodeOf(ctx));
    first.push_back(h.IsQosData() || h.IsData() || h.IsRts() || h.IsBlockAckReq());
}
void Drop(std::string ctx, ns3::Ptr<const ns3::WifiPpdu>, ns3::WifiPhyRxfailureReason r) {
    if (on && NodeOf(ctx) == 0) drops[(int)r]++;
}
void RxError(std::string ctx, ns3::Ptr<const ns3::Packet>, double) {
    if (on && NodeOf(ctx) != 0) staRxErrors++;
}
void Start() {
    start.clear(); end.clear(); node.clear(); first.clear(); drops.clear(); staRxErrors = 0;
    const std::string dev = "/NodeList/*/DeviceList/*/$ns3::WifiNetDevice/Phy/";
    ns3::Config::Connect(dev + "PhyTxPsduBegin", ns3::MakeCallback(&Tx));
    ns3::Config::Connect(dev + "PhyRxPpduDrop", ns3::MakeCallback(&Drop));
    ns3::Config::Connect(dev + "State/RxError", ns3::MakeCallback(&RxError));
    on = true;
}
uint64_t DropCount(int reason) { return drops[reason]; }
}
"""


class Ns3Trace:
    """Counts exchanges and collisions in ns-3 from its PHY traces, over the measured window.

    An exchange is a maximal set of station-initiated PPDUs (data, RTS or BlockAckReq; node
    0, the AP, only answers) whose airtimes overlap; a collision is one with more than one.
    ``staggered`` collisions are those whose PPDUs did not all start within 1 µs (a station
    started while another's PPDU was already on the air). ``after_collision_us`` histograms
    the idle time from the end of a collision's last PPDU to the next exchange, minus AIFS.
    """

    def __init__(self, ns: Any) -> None:
        import cppyy

        if not hasattr(cppyy.gbl, "coorp_trace"):
            cppyy.cppdef(_TRACE_CPP)
        self.ns = ns
        self.cpp = cppyy.gbl.coorp_trace

    def start(self) -> None:
        self.cpp.Start()

    def summary(self) -> dict[str, Any]:
        t = self.cpp
        t.on = False
        ppdus = sorted(zip(t.start, t.end, t.node, t.first, strict=True))
        # A PPDU a SIFS after one of the AP's (the data after a CTS) continues an exchange.
        answers = sorted(end + SIFS_NS for _, end, node, _ in ppdus if node == 0)
        clusters: list[list[tuple[int, int]]] = []  # (start, end) of each PPDU
        last_end = -1
        for start, end, node, first in ppdus:
            if node == 0 or not first:
                continue
            i = bisect.bisect_left(answers, start - 1000)
            if i < len(answers) and answers[i] < start + 1000:
                continue
            if clusters and start < last_end:
                clusters[-1].append((start, end))
                last_end = max(last_end, end)
            else:
                clusters.append([(start, end)])
                last_end = end
        collisions = [c for c in clusters if len(c) > 1]
        gaps: dict[float, int] = {}
        for c, nxt in itertools.pairwise(clusters):
            if len(c) > 1:
                us = round((nxt[0][0] - max(e for _, e in c) - aifs_ns(3)) / 1000, 1)
                gaps[us] = gaps.get(us, 0) + 1
        top = sorted(gaps.items(), key=lambda kv: -kv[1])[:6]
        return {
            "exchanges": len(clusters),
            "collisions": len(collisions),
            "staggered": sum(1 for c in collisions if c[-1][0] - c[0][0] >= 1000),
            "ap_preamble_detect_failures": int(t.DropCount(int(self.ns.PREAMBLE_DETECT_FAILURE))),
            "sta_rx_errors": int(t.staRxErrors),
            "after_collision_us": [[us, k] for us, k in top],
        }


#: How the stations' PHYs treat an overheard collision (``--ns3-rx``). A station that
#: sent one of the colliding frames always waits out its AckTimeout (SIFS + slot + 20 µs).
NS3_RX = {
    "default": "ns-3 as shipped: ThresholdPreambleDetectionModel (4 dB); a station whose SINR "
    "is below 4 dB never syncs (no EIFS), one above it syncs, fails and uses EIFS",
    "eifs": "no preamble detection model: every station syncs to a colliding frame, fails and "
    "defers EIFS (SIFS + 6 Mb/s Ack + AIFS)",
    "aifs": "preamble detection threshold 40 dB after warm-up: no station syncs to a colliding "
    "frame; all resume after AIFS (Bianchi's original T_c = DATA + DIFS)",
    "nav": "stations decode one colliding frame (no preamble detection, error-free) and defer "
    "by its Duration: SIFS + Ack after a data frame (coorp's and the model's common T_c), "
    "NAVTimeout after an RTS; the AP decodes none",
}

_ERROR_FREE_CPP = """
#include "ns3/wifi-module.h"
namespace coorp_xc {
/** Every chunk succeeds: stations decode whatever they sync to, interference or not. */
class ErrorFreeRateModel : public ns3::ErrorRateModel {
  public:
    static ns3::TypeId GetTypeId() {
        static ns3::TypeId tid = ns3::TypeId("coorp_xc::ErrorFreeRateModel")
            .SetParent<ns3::ErrorRateModel>().AddConstructor<ErrorFreeRateModel>();
        return tid;
    }
  private:
    double DoGetChunkSuccessRate(ns3::WifiMode, const ns3::WifiTxVector&, double, uint64_t,
                                 uint8_t, ns3::WifiPpduField, uint16_t) const override {
        return 1.0;
    }
};
void SetErrorFree(ns3::NetDeviceContainer devs) {
    for (uint32_t i = 0; i < devs.GetN(); ++i) {
        auto dev = ns3::DynamicCast<ns3::WifiNetDevice>(devs.Get(i));
        dev->GetPhy()->SetErrorRateModel(ns3::CreateObject<ErrorFreeRateModel>());
    }
}
}
"""


def _set_error_free(ns: Any, devs: Any) -> None:
    import cppyy

    if not hasattr(cppyy.gbl, "coorp_xc"):
        cppyy.cppdef(_ERROR_FREE_CPP)
    cppyy.gbl.coorp_xc.SetErrorFree(devs)


def place_and_address(ns: Any, n: int, ap: Any, stas: Any, ap_devs: Any, sta_devs: Any) -> Any:
    """The AP at the origin and ``n`` stations on a 1 m circle around it (fixed), IPv4 on
    every node (10.1.0.0/16, the AP first), fixed random streams; the AP's interfaces."""
    mobility = ns.MobilityHelper()
    pos = ns.ListPositionAllocator()
    pos.Add(ns.Vector(0.0, 0.0, 0.0))
    for i in range(n):
        a = 2 * math.pi * i / n
        pos.Add(ns.Vector(math.cos(a), math.sin(a), 0.0))
    mobility.SetPositionAllocator(pos)
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    mobility.Install(ap)
    mobility.Install(stas)

    stack = ns.InternetStackHelper()
    stack.Install(ap)
    stack.Install(stas)
    # Fixed random streams: otherwise ns-3 numbers them in creation order across the whole
    # process, and a run's result would depend on the runs before it.
    used = ns.WifiHelper.AssignStreams(sta_devs, 0)
    used += ns.WifiHelper.AssignStreams(ap_devs, used)
    stack.AssignStreams(stas, used)
    addresses = ns.Ipv4AddressHelper()
    addresses.SetBase(ns.Ipv4Address("10.1.0.0"), ns.Ipv4Mask("255.255.0.0"))
    ap_if = addresses.Assign(ap_devs)
    addresses.Assign(sta_devs)
    return ap_if


def run_ns3(
    ns: Any,
    cfg: Config,
    duration_s: float,
    *,
    warmup_s: float = 0.5,
    seed: int = 1,
    rx: str = "default",
    frame_capture: bool = False,
    on_measure: Callable[[], None] | None = None,
) -> Run:
    """Build the topology, associate, warm up, then time ``Simulator.Run`` over the window.

    ``rx`` picks how the stations' PHYs treat a collision they overhear (see ``NS3_RX``);
    ``frame_capture=True`` adds ns-3's SimpleFrameCaptureModel; ``on_measure`` is called
    once, just before the measured window (e.g. to start a probe)."""
    if rx not in NS3_RX:
        raise ValueError(f"unknown ns-3 rx setting {rx!r}; choose from {', '.join(NS3_RX)}")
    t_build = time.perf_counter()
    ns.RngSeedManager.SetSeed(1)
    ns.RngSeedManager.SetRun(seed)
    # A saturated queue holds packets for longer than the default 500 ms lifetime; expiring
    # them would only add drops, not change the channel, but keep the backlog honest.
    ns.Config.SetDefault("ns3::WifiMacQueue::MaxDelay", ns.TimeValue(ns.Seconds(1000.0)))
    ap = ns.NodeContainer()
    ap.Create(1)
    stas = ns.NodeContainer()
    stas.Create(cfg.n)

    channel = ns.YansWifiChannelHelper.Default()
    phy = ns.YansWifiPhyHelper()
    phy.SetChannel(channel.Create())
    phy.Set("ChannelSettings", ns.StringValue("{42, 80, BAND_5GHZ, 0}"))
    phy.Set("Antennas", ns.UintegerValue(2))
    phy.Set("MaxSupportedTxSpatialStreams", ns.UintegerValue(2))
    phy.Set("MaxSupportedRxSpatialStreams", ns.UintegerValue(2))
    if frame_capture:
        phy.SetFrameCaptureModel("ns3::SimpleFrameCaptureModel")
    if rx in ("eifs", "nav"):
        phy.DisablePreambleDetectionModel()  # "nav": the AP gets it back below

    wifi = ns.WifiHelper()
    if cfg.standard == "ax":
        wifi.SetStandard(ns.WIFI_STANDARD_80211ax)
        wifi.ConfigHeOptions("GuardInterval", ns.TimeValue(ns.NanoSeconds(cfg.gi_ns)))
    else:
        wifi.SetStandard(ns.WIFI_STANDARD_80211ac)
    data_mode = f"{'He' if cfg.standard == 'ax' else 'Vht'}Mcs{cfg.mcs}"
    wifi.SetRemoteStationManager(
        "ns3::ConstantRateWifiManager",
        "DataMode", ns.StringValue(data_mode),
        "ControlMode", ns.StringValue("OfdmRate24Mbps"),
        "RtsCtsThreshold", ns.UintegerValue(0 if cfg.rts else 4_692_480),
    )  # fmt: skip
    mac = ns.WifiMacHelper()
    ssid = ns.Ssid("coorp")
    ampdu = ns.UintegerValue(1_048_575 if cfg.aggregation else 0)
    # The Block Ack window: ns-3 caps MpduBufferSize (default 1024) at the standard's
    # largest, 64 for VHT and 256 for HE; set it so that both sides aggregate alike.
    buf = ns.UintegerValue(cfg.mpdus)
    mac.SetType(
        "ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu,
        "MpduBufferSize", buf,
    )  # fmt: skip
    sta_devs = wifi.Install(phy, mac, stas)
    if rx == "nav":
        # Every station decodes the first frame of a collision (no preamble detection,
        # error-free reception) and defers by its Duration field (SIFS + Ack after a data
        # frame; after an RTS, until its NAVTimeout); the AP keeps ns-3's default PHY and
        # decodes none of them.
        _set_error_free(ns, sta_devs)
        phy.SetPreambleDetectionModel("ns3::ThresholdPreambleDetectionModel")
    mac.SetType(
        "ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu,
        "MpduBufferSize", buf,
    )  # fmt: skip
    ap_devs = wifi.Install(phy, mac, ap)

    ap_if = place_and_address(ns, cfg.n, ap, stas, ap_devs, sta_devs)

    port = 9
    any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
    sink_apps = ns.PacketSinkHelper("ns3::UdpSocketFactory", any_addr).Install(ap.Get(0))
    sink_apps.Start(ns.Seconds(0.0))
    udp_bytes = cfg.payload_bytes - IP_UDP_HEADER_BYTES
    # Offered load: twice each station's fair share of the model's saturation throughput
    # (far above the share in practice) - enough for a standing backlog without flooding
    # ns-3 with packet-generation events.
    share_mbps = bianchi_mbps(cfg) / cfg.n
    rate = ns.DataRate(f"{max(2.0 * share_mbps, 1.0) * udp_bytes / cfg.payload_bytes:.3f}Mbps")
    dst = ns.InetSocketAddress(ap_if.GetAddress(0), port).ConvertTo()
    onoff = ns.OnOffHelper("ns3::UdpSocketFactory", dst)
    onoff.SetConstantRate(rate, udp_bytes)
    src_apps = onoff.Install(stas)
    src_apps.Start(ns.Seconds(NS3_APP_START_S))

    start = NS3_APP_START_S + warmup_s
    ns.Simulator.Stop(ns.Seconds(start))
    ns.Simulator.Run()
    sink = ns.DynamicCast[ns.PacketSink](sink_apps.Get(0))
    rx0 = int(sink.GetTotalRx())
    startup = time.perf_counter() - t_build

    if rx == "aifs":
        # Raised only now: during association it would also hide frames that the default
        # threshold lets through, and association then stalls at N = 40.
        ns.Config.Set(
            "/NodeList/*/DeviceList/*/$ns3::WifiNetDevice/Phy/PreambleDetectionModel/"
            "$ns3::ThresholdPreambleDetectionModel/Threshold",
            ns.DoubleValue(NS3_AIFS_PD_THRESHOLD_DB),
        )
    if on_measure is not None:
        on_measure()
    t0 = time.perf_counter()
    ns.Simulator.Stop(ns.Seconds(duration_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    rx1 = int(sink.GetTotalRx())
    ns.Simulator.Destroy()
    packets = (rx1 - rx0) / udp_bytes
    return Run(packets * cfg.payload_bytes * 8 / duration_s / 1e6, wall, duration_s, startup)


# -- mixed destinations (issue 36) -------------------------------------------------------------
@dataclass(frozen=True)
class MixedCase:
    """Saturated UDP flows ``(src, dst)`` between nodes ``0 .. nodes - 1``: node 0 is the
    AP and the others its stations, or with ``adhoc`` every node an IBSS station."""

    name: str
    nodes: int
    flows: tuple[tuple[int, int], ...]
    adhoc: bool = False

    def node_name(self, i: int) -> str:
        return f"sta{i}" if self.adhoc else ("ap" if i == 0 else f"sta{i - 1}")


def _downlink(n: int) -> tuple[tuple[int, int], ...]:
    return tuple((0, i) for i in range(1, n + 1))


MIXED_CASES = {
    c.name: c
    for c in (
        MixedCase("ap-to-2", 3, _downlink(2)),
        MixedCase("ap-to-4", 5, _downlink(4)),
        MixedCase("ap-to-8", 9, _downlink(8)),
        MixedCase("ap-to-16", 17, _downlink(16)),
        MixedCase("ap-to-4+4-up", 5, _downlink(4) + tuple((i, 0) for i in range(1, 5))),
        MixedCase("sta-to-2-peers", 3, ((0, 1), (0, 2)), adhoc=True),
    )
}
#: ns-3's WifiMacQueue holds 500 packets per access category (its MaxSize default);
#: coorp's per-AC ring gets as many, so that both aggregate from queues of one size.
MIXED_QUEUE_PACKETS = 500
MIXED_RINGS = ("per_ac", "shared")


def mixed_offered_mbps(case: MixedCase, cfg: Config) -> float:
    """Each flow offers twice its share of a lone sender's saturation throughput (in IP
    bytes per second): every queue stays backlogged."""
    return 2.0 * bianchi_mbps(replace(cfg, n=1)) / len(case.flows)


def mixed_scenario(case: MixedCase, cfg: Config, grouping: str, ring: str) -> Scenario:
    period_us = cfg.payload_bytes * 8 / mixed_offered_mbps(case, cfg)
    return parse_scenario(
        {
            "name": f"mixed-{case.name}",
            "packet_bytes": cfg.payload_bytes,
            "phy": _phy(cfg),
            "mac": {"retry_policy": cfg.retry_policy, "max_ampdu_mpdus": cfg.mpdus,
                    "ampdu_grouping": grouping},
            "hw_queue": {"mode": ring, "capacity_packets": MIXED_QUEUE_PACKETS},
            "links": {"mode": "fixed", "mcs": cfg.mcs},
            "stations": [{"name": case.node_name(i)} for i in range(case.nodes)],
            "flows": [
                {"kind": "datagram", "name": f"f{k}", "src": case.node_name(a),
                 "dst": case.node_name(b), "category": "BE",
                 "size_bytes": cfg.payload_bytes - IP_UDP_HEADER_BYTES,
                 "period_us": period_us, "start_us": float(k)}
                for k, (a, b) in enumerate(case.flows)
            ],
        }
    )  # fmt: skip


def run_coorp_mixed(
    case: MixedCase, cfg: Config, grouping: str, ring: str, duration_s: float, warmup_s: float,
    seed: int = 1,
) -> Run:  # fmt: skip
    """Delivered IP bytes of every flow over ``duration_s`` after ``warmup_s``."""
    sim = Simulation(mixed_scenario(case, cfg, grouping, ring), seed=seed)
    warm = round(warmup_s * 1e9)
    sim.run(warm)
    before = sum(f.delivered_bytes for f in sim.flows.values())
    t0 = time.perf_counter()
    res = sim.run(warm + round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    got = sum(f.delivered_bytes for f in sim.flows.values()) - before
    return Run(got * 8 / duration_s / 1e6, wall, duration_s, 0.0, res.channel.exchanges,
               res.channel.collisions)  # fmt: skip


def run_ns3_mixed(
    ns: Any, case: MixedCase, cfg: Config, duration_s: float, *, warmup_s: float = 0.5,
    seed: int = 1,
) -> Run:  # fmt: skip
    """The same flows in ns-3 (default PHY, ``WifiMacQueue`` of 500 packets, the default
    FCFS queue scheduler), one PacketSink per flow; IP bytes over the measured window."""
    t_build = time.perf_counter()
    ns.RngSeedManager.SetSeed(1)
    ns.RngSeedManager.SetRun(seed)
    ns.Config.SetDefault("ns3::WifiMacQueue::MaxDelay", ns.TimeValue(ns.Seconds(1000.0)))
    first = ns.NodeContainer()
    first.Create(1)
    rest = ns.NodeContainer()
    rest.Create(case.nodes - 1)
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
        "DataMode", ns.StringValue(f"VhtMcs{cfg.mcs}"),
        "ControlMode", ns.StringValue("OfdmRate24Mbps"),
        "RtsCtsThreshold", ns.UintegerValue(4_692_480),
    )  # fmt: skip
    mac = ns.WifiMacHelper()
    ampdu = ns.UintegerValue(1_048_575)
    buf = ns.UintegerValue(cfg.mpdus)
    if case.adhoc:
        mac.SetType("ns3::AdhocWifiMac", "BE_MaxAmpduSize", ampdu, "MpduBufferSize", buf)
        rest_devs = wifi.Install(phy, mac, rest)
        first_devs = wifi.Install(phy, mac, first)
    else:
        ssid = ns.Ssid("coorp")
        mac.SetType(
            "ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu,
            "MpduBufferSize", buf,
        )  # fmt: skip
        rest_devs = wifi.Install(phy, mac, rest)
        mac.SetType(
            "ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu,
            "MpduBufferSize", buf,
        )  # fmt: skip
        first_devs = wifi.Install(phy, mac, first)
    place_and_address(ns, case.nodes - 1, first, rest, first_devs, rest_devs)

    def ipv4(i: int) -> Any:
        node = first.Get(0) if i == 0 else rest.Get(i - 1)
        return node.GetObject[ns.Ipv4]().GetAddress(1, 0).GetLocal()

    def node(i: int) -> Any:
        return first.Get(0) if i == 0 else rest.Get(i - 1)

    udp_bytes = cfg.payload_bytes - IP_UDP_HEADER_BYTES
    rate = mixed_offered_mbps(case, cfg) * udp_bytes / cfg.payload_bytes
    sinks = []
    for k, (a, b) in enumerate(case.flows):
        port = 9 + k
        any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        apps = ns.PacketSinkHelper("ns3::UdpSocketFactory", any_addr).Install(node(b))
        apps.Start(ns.Seconds(0.0))
        sinks.append(ns.DynamicCast[ns.PacketSink](apps.Get(0)))
        dst = ns.InetSocketAddress(ipv4(b), port).ConvertTo()
        onoff = ns.OnOffHelper("ns3::UdpSocketFactory", dst)
        onoff.SetConstantRate(ns.DataRate(f"{rate:.3f}Mbps"), udp_bytes)
        src = onoff.Install(node(a))
        src.Start(ns.Seconds(NS3_APP_START_S + 1e-6 * k))  # coorp's flow k starts at k µs

    start = NS3_APP_START_S + warmup_s
    ns.Simulator.Stop(ns.Seconds(start))
    ns.Simulator.Run()
    rx0 = sum(int(sk.GetTotalRx()) for sk in sinks)
    startup = time.perf_counter() - t_build
    t0 = time.perf_counter()
    ns.Simulator.Stop(ns.Seconds(duration_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    rx1 = sum(int(sk.GetTotalRx()) for sk in sinks)
    ns.Simulator.Destroy()
    packets = (rx1 - rx0) / udp_bytes
    return Run(packets * cfg.payload_bytes * 8 / duration_s / 1e6, wall, duration_s, startup)


def mixed_main(args: argparse.Namespace, console: Console) -> int:
    """``--mixed-destinations``: coorp (per receiver and TID, and as before) against ns-3."""
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    rings = [r.strip() for r in args.rings.split(",") if r.strip()]
    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and not args.no_ns3:
        console.print(escape(INSTALL_HINT), style="yellow")
        console.print(escape(f"({why})"), style="dim")
    cfg = Config(n=1, mcs=args.mcs, payload_bytes=args.payload)
    table = Table(
        title=f"Mixed destinations: saturated UDP, 80 MHz 2x2 VHT MCS {args.mcs}, "
        f"{args.payload} B packets, {args.duration:g} s after {args.warmup:g} s "
        f"(retry policy: ns3; queue {MIXED_QUEUE_PACKETS} packets)"
    )
    for col in ("case", "flows", "coorp ring", "coorp per receiver/TID Mb/s",
                "coorp consecutive Mb/s", "ns-3 Mb/s", "coorp / ns-3", "coorp wall s",
                "ns-3 wall s"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("case", "coorp ring") else "right")
    rows: list[dict[str, Any]] = []
    for name in names:
        case = MIXED_CASES[name]
        ref = (
            run_ns3_mixed(ns, case, cfg, args.duration, warmup_s=args.warmup, seed=args.seed)
            if ns is not None
            else None
        )
        for ring in rings:
            new = run_coorp_mixed(case, cfg, "per_receiver_tid", ring, args.duration,
                                  args.warmup, args.seed)  # fmt: skip
            old = run_coorp_mixed(case, cfg, "consecutive", ring, args.duration, args.warmup,
                                  args.seed)  # fmt: skip
            gap = "-" if ref is None else f"{100 * (new.mbps / ref.mbps - 1):+.1f}%"
            table.add_row(
                case.name, " ".join(f"{case.node_name(a)}>{case.node_name(b)}"
                                    for a, b in case.flows[:4])
                + (" ..." if len(case.flows) > 4 else ""),
                ring, f"{new.mbps:.1f}", f"{old.mbps:.1f}",
                "-" if ref is None else f"{ref.mbps:.1f}", gap, f"{new.wall_s:.2f}",
                "-" if ref is None else f"{ref.wall_s:.2f}",
            )  # fmt: skip
            if ring == "per_ac":  # ns-3's model: the rows the cross-check is about
                rows.append({"case": case.name, "coorp_mbps": new.mbps,
                             "ns3_mbps": None if ref is None else ref.mbps})  # fmt: skip
        console.print(f"[dim]done: {name}[/dim]")
    console.print(table)
    console.print(
        "per_ac: coorp's per-AC ring, ns-3's model (the cross-check); shared: coorp's shared "
        "FIFO ring, which the NIC does not reorder (information: ns-3 has no such ring)."
    )
    if ns is not None:
        console.print(f"ns-3 {ns3_version()}: import {import_s:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows}, indent=2))
        console.print(f"wrote {args.json}")
    return 0


# -- the table ----------------------------------------------------------------------------------
def _pct(x: float | None, ref: float) -> str:
    return "" if x is None else f" ({100 * (x / ref - 1):+.1f}%)"


def model_collision_share(cfg: Config) -> float:
    """The model's share of exchanges that are collisions, ``1 - P_s``."""
    sc = coorp_scenario(cfg)
    r = saturation_throughput(
        cfg.n, payload_bytes=cfg.payload_bytes, mcs=cfg.mcs, phy=sc.phy, mac=sc.mac
    )
    return 1 - r.p_success


def _trace_table(rows: list[dict[str, Any]], rx_list: list[str]) -> Table:
    t = Table(title="Collisions: share of exchanges (coorp and model vs ns-3 traces)")
    for col in (
        "variant", "N", "model", "coorp", "ns-3 setting", "ns-3 exchanges", "ns-3",
        "staggered", "AP preamble misses", "STA RX errors / coll.", "after coll.: us-AIFS x count",
    ):  # fmt: skip
        t.add_column(col, justify="left" if col in ("variant", "ns-3 setting") else "right")
    for r in rows:
        for rx in rx_list:
            tr = r["ns3"][rx]["trace"]
            if not tr:
                continue
            t.add_row(
                r["variant"],
                str(r["n"]),
                f"{r['model_collision_share']:.3f}",
                f"{r['coorp_collisions'] / max(r['coorp_exchanges'], 1):.3f}",
                rx,
                str(tr["exchanges"]),
                f"{tr['collisions'] / max(tr['exchanges'], 1):.3f}",
                str(tr["staggered"]),
                str(tr["ap_preamble_detect_failures"]),
                f"{tr['sta_rx_errors'] / max(tr['collisions'], 1):.1f}",
                " ".join(f"{us:g}x{k}" for us, k in tr["after_collision_us"][:4]),
            )
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", default="1,5,10", help="comma-separated station counts")
    ap.add_argument("--duration", type=float, default=2.0, help="measured simulated seconds")
    ap.add_argument("--warmup", type=float, default=0.5, help="ns-3 warm-up after sources start")
    ap.add_argument("--variants", default="ampdu-basic,single-basic", help=f"any of {VARIANTS}")
    ap.add_argument("--mcs", type=int, default=7)
    ap.add_argument(
        "--standard", choices=("ac", "ax"), default="ac", help="802.11ac (VHT) or 802.11ax (HE)"
    )
    ap.add_argument("--gi", type=int, default=800, help="HE guard interval, ns (800, 1600, 3200)")
    ap.add_argument(
        "--mpdus", type=int, default=64, help="MPDUs per A-MPDU, both sides (<= 64; <= 256 with ax)"
    )
    ap.add_argument("--payload", type=int, default=1500, help="IP packet bytes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--ns3-rx",
        default="default",
        help="comma-separated ns-3 PHY settings, one ns-3 column each: "
        + "; ".join(f"{k}: {v}" for k, v in NS3_RX.items()),
    )
    ap.add_argument(
        "--ns3-frame-capture",
        action="store_true",
        help="add ns-3's SimpleFrameCaptureModel (5 dB margin) to every PHY",
    )
    ap.add_argument(
        "--ns3-trace",
        action="store_true",
        help="count ns-3's exchanges and collisions from its PHY traces (a second table)",
    )
    ap.add_argument("--no-ns3", action="store_true", help="skip ns-3 even if importable")
    ap.add_argument(
        "--mixed-destinations",
        action="store_true",
        help="the mixed-destination comparison (A-MPDUs per receiver and TID) instead",
    )
    ap.add_argument(
        "--cases",
        default=",".join(MIXED_CASES),
        help=f"--mixed-destinations: comma-separated, any of {', '.join(MIXED_CASES)}",
    )
    ap.add_argument(
        "--rings",
        default="per_ac",
        help="--mixed-destinations: coorp ring modes, per_ac (the cross-check) and/or shared",
    )
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument(
        "--from-json", type=Path, help="print the tables of a saved --json file; run nothing"
    )
    args = ap.parse_args(argv)
    if args.mixed_destinations:
        for c in args.cases.split(","):
            if c.strip() and c.strip() not in MIXED_CASES:
                ap.error(f"unknown case {c.strip()!r}; choose from {', '.join(MIXED_CASES)}")
        for r in args.rings.split(","):
            if r.strip() and r.strip() not in MIXED_RINGS:
                ap.error(f"unknown ring {r.strip()!r}; choose from {', '.join(MIXED_RINGS)}")
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        return mixed_main(args, console)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        first = saved["rows"][0]
        args.n = ",".join(str(r["n"]) for r in saved["rows"])
        args.ns3_rx = ",".join(saved["ns3_rx"])
        args.variants = ",".join(dict.fromkeys(r["variant"] for r in saved["rows"]))
        for key in ("mcs", "standard", "mpdus"):
            setattr(args, key, first.get(key, getattr(args, key)))
        args.gi, args.payload = first.get("gi_ns", args.gi), first["payload_bytes"]
        args.duration, args.no_ns3, args.json = first["simulated_s"], True, None
    ns_list = [int(x) for x in args.n.split(",") if x.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    rx_list = [r.strip() for r in args.ns3_rx.split(",") if r.strip()]
    for r in rx_list:
        if r not in NS3_RX:
            ap.error(f"unknown --ns3-rx {r!r}; choose from {', '.join(NS3_RX)}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # keep the table readable when piped or logged

    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and not args.no_ns3 and args.from_json is None:
        console.print(escape(INSTALL_HINT), style="yellow")
        console.print(escape(f"({why})"), style="dim")

    rows: list[dict[str, Any]] = []
    for variant, n in (
        [] if args.from_json is not None else [(v, n) for v in variants for n in ns_list]
    ):
        if True:  # one run per (variant, N)
            cfg = Config.from_variant(
                n, variant, mcs=args.mcs, payload_bytes=args.payload, standard=args.standard,
                gi_ns=args.gi, mpdus=args.mpdus,
            )  # fmt: skip
            model = bianchi_mbps(cfg)
            ours = run_coorp(cfg, args.duration, args.seed)
            ns3: dict[str, dict[str, Any]] = {}
            for rx in rx_list:
                # The model for this ns-3 setting: ns-3's airtime, its collision length.
                ref = (
                    model_mbps(cfg, ns3_airtime=True, collision=RX_MODEL_COLLISION[rx])
                    if rx in RX_MODEL_COLLISION
                    else None
                )
                trace = Ns3Trace(ns) if ns and args.ns3_trace else None
                run = (
                    run_ns3(
                        ns,
                        cfg,
                        args.duration,
                        warmup_s=args.warmup,
                        seed=args.seed,
                        rx=rx,
                        frame_capture=args.ns3_frame_capture,
                        on_measure=trace.start if trace else None,
                    )
                    if ns
                    else None
                )
                ns3[rx] = {
                    "model_mbps": ref,
                    "mbps": run.mbps if run else None,
                    "wall_s": run.wall_s if run else None,
                    "startup_s": run.startup_s if run else None,
                    "trace": trace.summary() if trace else None,
                }
            first = ns3[rx_list[0]] if rx_list else {}
            rows.append(
                {
                    **asdict(cfg),
                    "variant": variant,
                    "bianchi_mbps": model,
                    "coorp_mbps": ours.mbps,
                    "coorp_wall_s": ours.wall_s,
                    "coorp_exchanges": ours.exchanges,
                    "coorp_collisions": ours.collisions,
                    "model_collision_share": model_collision_share(cfg),
                    # The first --ns3-rx setting, under the keys older JSON files have.
                    "ns3_mbps": first.get("mbps"),
                    "ns3_wall_s": first.get("wall_s"),
                    "ns3_startup_s": first.get("startup_s"),
                    "ns3": ns3,
                    "simulated_s": args.duration,
                }
            )
            console.print(f"[dim]done: {variant} N={n}[/dim]")
    if args.from_json is not None:
        rows = saved["rows"]

    phy_txt = (
        f"HE-MCS {args.mcs}, {args.gi} ns GI" if args.standard == "ax" else (f"VHT MCS {args.mcs}")
    )
    table = Table(
        title=f"Saturated uplink, 80 MHz 2x2 {phy_txt}, {args.payload} B packets, "
        f"up to {args.mpdus} MPDUs, {args.duration:g} s simulated (retry policy: ns3)"
    )
    cols = ["variant", "N", "Bianchi Mb/s", "coorp Mb/s"]
    for rx in rx_list:
        if rx in RX_MODEL_COLLISION:
            cols.append(f"model ({rx}) Mb/s")
        cols.append(f"ns-3 ({rx}) Mb/s")
    cols += [f"coorp / ns-3 ({rx})" for rx in rx_list]
    cols += ["coorp wall s"] + [f"ns-3 ({rx}) wall s" for rx in rx_list]
    for col in cols:
        table.add_column(col, justify="left" if col == "variant" else "right")
    for r in rows:
        cells = [
            r["variant"],
            str(r["n"]),
            f"{r['bianchi_mbps']:.1f}",
            f"{r['coorp_mbps']:.1f}{_pct(r['coorp_mbps'], r['bianchi_mbps'])}",
        ]
        for rx in rx_list:
            x = r["ns3"][rx]
            ref = x["model_mbps"] if x["model_mbps"] is not None else r["bianchi_mbps"]
            if x["model_mbps"] is not None:
                cells.append(f"{ref:.1f}")
            cells.append("-" if x["mbps"] is None else f"{x['mbps']:.1f}{_pct(x['mbps'], ref)}")
        for rx in rx_list:
            m = r["ns3"][rx]["mbps"]
            cells.append("-" if m is None else f"{100 * (r['coorp_mbps'] / m - 1):+.1f}%")
        cells.append(f"{r['coorp_wall_s']:.2f}")
        for rx in rx_list:
            w = r["ns3"][rx]["wall_s"]
            cells.append("-" if w is None else f"{w:.2f}")
        table.add_row(*cells)
    console.print(table)
    if any(x["trace"] for r in rows for x in r["ns3"].values()):
        console.print(_trace_table(rows, rx_list))
    console.print(
        "Percentages: coorp and ns-3 (default) against Bianchi (coorp's airtime and collision "
        "rule); every other ns-3 column against its model (...) column (ns-3's airtime - no "
        "VHT-SIG-B, or its HE timing - and that setting's collision length; see --help)."
    )
    if args.from_json is not None:
        console.print(f"(from {args.from_json}: {saved.get('command', '')})")
    elif ns is not None:
        console.print(
            f"ns-3 {ns3_version()}: import {import_s:.1f} s; per-run start-up (build, association, "
            f"{args.warmup:g} s warm-up) shown in the JSON as startup_s."
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "ns3_version": ns3_version() if ns is not None else None,
            "ns3_import_s": import_s if ns is not None else None,
            "ns3_rx": {rx: NS3_RX[rx] for rx in rx_list},
            "ns3_frame_capture": args.ns3_frame_capture,
            "command": " ".join(["python benchmarks/ns3_crosscheck.py", *sys.argv[1:]]),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
