"""Cross-check coorp's trigger-based UL OFDMA scheduler against ns-3's round robin one.

The same saturated 802.11ax uplink in both: N stations on a 1 m circle around one AP,
80 MHz, 2 spatial streams, a fixed HE-MCS, control frames at 24 Mb/s, AC_BE, A-MPDUs of
up to ``--mpdus`` MPDUs (ns-3's MpduBufferSize on both ends), one saturating UDP source
per station. The AP's scheduler:

* ns-3 3.44: ``RrMultiUserScheduler`` (NStations 4, EnableUlOfdma, EnableBsrp only with
  ``--bsrp``, AccessReqInterval ``--interval``), SpectrumWifiPhy (ns-3 receives TB PPDUs only on
  the spectrum PHY), MU EDCA with AIFSN 0 for every AC (EDCA disabled) and the largest
  MU EDCA timer (2.088 s): after its first TB PPDU a station sends only when triggered;
* coorp: :class:`coorp.sim.UlOfdma` with the same settings (4 users, BSRP or not, the
  same access interval, the same MU EDCA), its defaults everywhere else.

Without BSRP both APs trigger a station whose queue they do not know for a 500-byte PSDU
(ns-3's UlPsduSize) and learn its queue from the QoS Control of what it sends. With
``--bsrp`` ns-3 3.44 polls and never sends a Basic trigger on an uplink-only channel: AC_BE
has no TXOP limit, so every exchange it starts (the one a SIFS after the BSRP responses
too, with ``ContinueTxopAfterBsrp``) is an initial frame to ``QosFrameExchangeManager``,
and ``RrMultiUserScheduler::SelectTxFormat`` answers an initial frame with no downlink
data by another BSRP trigger; coorp's AP sends the Basic trigger after its BSRP.

``--no-ofdma`` adds a column each of both without the scheduler (plain EDCA, SU PPDUs).

Where the configurations differ, by construction (docs/validation.md): ns-3 times HE
PPDUs its own way (8 µs per HE-LTF, one BCC tail, no LDPC extra symbol), answers a BSRP
trigger with 8 QoS Nulls (coorp: one, carrying the whole report), and sizes a Basic
trigger's TB PPDU for a saturated station at aPPDUMaxTime even when the Block Ack window
fills it sooner (the station pads the rest); coorp's AP sizes it for at most one window
of MPDUs. With a 256-MPDU window at these rates the window is never the limit.

    python benchmarks/ns3_ofdma_crosscheck.py --n 4,8 --mcs 7,11 --duration 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coorp.scenario import Scenario, parse_scenario
from coorp.sim import Simulation, UlOfdma, UlOfdmaConfig
from ns3_crosscheck import (
    IP_UDP_HEADER_BYTES,
    NS3_APP_START_S,
    import_ns3,
    ns3_version,
    place_and_address,
)

INSTALL_HINT = (
    "ns-3 is not importable here: install its Python bindings with "
    "pip install 'coorp[ns3]'. Showing coorp only."
)
MU_EDCA_TIMER_US = 2_088_960
#: ns-3 sends trigger frames (broadcast RA) at its lowest basic rate; Acks, BlockAcks and
#: the multi-STA BlockAck at the control rate, 24 Mb/s here, as coorp's basic rate.
NS3_TRIGGER_RATE_MBPS = 6


@dataclass(frozen=True)
class Config:
    n: int
    mcs: int
    ofdma: bool = True
    mpdus: int = 256
    gi_ns: int = 1600
    payload_bytes: int = 1500
    interval_us: int = 100
    bsrp: bool = False


def coorp_scenario(cfg: Config) -> Scenario:
    return parse_scenario(
        {
            "name": f"ul-ofdma-{cfg.n}-{cfg.mcs}",
            "packet_bytes": cfg.payload_bytes,
            "phy": {
                "standard": "ax",
                "width_mhz": 80,
                "spatial_streams": 2,
                "he_guard_interval_ns": cfg.gi_ns,
            },
            "mac": {"retry_policy": "ns3", "max_ampdu_mpdus": cfg.mpdus},
            "hw_queue": {"capacity_packets": max(128, 2 * cfg.mpdus)},
            "links": {"mode": "fixed", "mcs": cfg.mcs},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(cfg.n)],
            "flows": [
                {"kind": "bulk", "name": f"up{i}", "src": f"sta{i}", "dst": "ap", "tcp_acks": False}
                for i in range(cfg.n)
            ],
        }
    )


def run_coorp(cfg: Config, duration_s: float, seed: int = 1) -> dict[str, Any]:
    sc = coorp_scenario(cfg)
    sim = Simulation(sc, seed=seed)
    sched = None
    if cfg.ofdma:
        sched = UlOfdma(
            sim, "ap", [f"sta{i}" for i in range(cfg.n)],
            UlOfdmaConfig(max_users=4, access_interval_ns=cfg.interval_us * 1000,
                          mu_edca_timer_ns=MU_EDCA_TIMER_US * 1000, bsrp=cfg.bsrp,
                          trigger_rate_mbps=NS3_TRIGGER_RATE_MBPS),
        )  # fmt: skip
    # Warm-up as in ns-3: the first 0.5 s are not counted.
    warm = 500_000_000
    sim.loop.run(warm)
    before = sum(sim.flows[f"up{i}"].delivered_bytes for i in range(cfg.n))
    if sched is not None:
        s0 = sched.summary()
    t0 = time.perf_counter()
    res = sim.run(warm + round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    after = sum(res.flows[f"up{i}"].delivered_bytes for i in range(cfg.n))
    out: dict[str, Any] = {"mbps": (after - before) * 8 / duration_s / 1e6, "wall_s": wall}
    if sched is not None:
        # Counted over the measured window only, as the ns-3 trace is.
        s = {k: v - s0[k] for k, v in sched.summary().items() if isinstance(v, int)}
        cascades = s["basic_triggers"]
        out["basic_triggers_per_s"] = cascades / duration_s
        data_tbs = max(cascades * sched.n_users, 1)
        out["tb_ms"] = (s["tb_airtime_ns"] - 0) / max(s["tb_ppdus"] / sched.n_users, 1) / 1e6
        out["mpdus_per_tb"] = s["mpdus"] / data_tbs
    return out


_TRACE_CPP = """
#include "ns3/core-module.h"
#include "ns3/wifi-module.h"
namespace coorp_ofdma {
bool on = false;
uint64_t basic = 0, bsrp = 0, tb = 0, tbNs = 0, tbMpdus = 0, ulLenNs = 0;
void Tx(std::string ctx, ns3::WifiConstPsduMap psdus, ns3::WifiTxVector txv, double) {
    if (!on) return;
    const ns3::WifiMacHeader& h = psdus.begin()->second->GetHeader(0);
    if (h.IsTrigger()) {
        ns3::CtrlTriggerHeader trig;
        psdus.begin()->second->GetPayload(0)->PeekHeader(trig);
        if (trig.IsBasic()) {
            basic++;
            ulLenNs += ns3::HePhy::ConvertLSigLengthToHeTbPpduDuration(
                trig.GetUlLength(), trig.GetHeTbTxVector(trig.begin()->GetAid12()),
                ns3::WIFI_PHY_BAND_5GHZ).GetNanoSeconds();
        }
        if (trig.IsBsrp()) bsrp++;
    }
    if (txv.GetPreambleType() == ns3::WIFI_PREAMBLE_HE_TB) {
        tb++;
        for (const auto& [id, psdu] : psdus) {
            if (psdu->GetHeader(0).IsQosData() && psdu->GetHeader(0).HasData())
                tbMpdus += psdu->GetNMpdus();
        }
        tbNs += ns3::WifiPhy::CalculateTxDuration(psdus, txv, ns3::WIFI_PHY_BAND_5GHZ)
                    .GetNanoSeconds();
    }
}
void Start() {
    basic = bsrp = tb = tbNs = tbMpdus = ulLenNs = 0;
    ns3::Config::Connect("/NodeList/*/DeviceList/*/$ns3::WifiNetDevice/Phy/PhyTxPsduBegin",
                         ns3::MakeCallback(&Tx));
    on = true;
}
}
"""


def run_ns3(ns: Any, cfg: Config, duration_s: float, seed: int = 1) -> dict[str, Any]:
    import cppyy

    if not hasattr(cppyy.gbl, "coorp_ofdma"):
        cppyy.cppdef(_TRACE_CPP)
    trace = cppyy.gbl.coorp_ofdma
    t_build = time.perf_counter()
    ns.RngSeedManager.SetSeed(1)
    ns.RngSeedManager.SetRun(seed)
    ns.Config.SetDefault("ns3::WifiMacQueue::MaxDelay", ns.TimeValue(ns.Seconds(1000.0)))
    # Stations report their queue in the QoS Control field of every QoS data frame, as
    # coorp's do (ns-3's default reports it in QoS Nulls only: its AP then forgets a
    # saturated station's queue after BsrLifetime and polls it with a 500-byte trigger).
    ns.Config.SetDefault("ns3::QosFrameExchangeManager::SetQueueSize", ns.BooleanValue(True))
    # With BSRP: continue the TXOP a SIFS after the BSRP exchange (AC_BE has no TXOP
    # limit), as coorp's cascade does (see the module docstring for what ns-3 does then).
    ns.Config.SetDefault(
        "ns3::HeFrameExchangeManager::ContinueTxopAfterBsrp", ns.BooleanValue(cfg.bsrp)
    )
    ap = ns.NodeContainer()
    ap.Create(1)
    stas = ns.NodeContainer()
    stas.Create(cfg.n)

    channel = ns.CreateObject[ns.MultiModelSpectrumChannel]()
    channel.AddPropagationLossModel(ns.CreateObject[ns.LogDistancePropagationLossModel]())
    phy = ns.SpectrumWifiPhyHelper()
    phy.SetChannel(channel)
    phy.Set("ChannelSettings", ns.StringValue("{42, 80, BAND_5GHZ, 0}"))
    phy.Set("Antennas", ns.UintegerValue(2))
    phy.Set("MaxSupportedTxSpatialStreams", ns.UintegerValue(2))
    phy.Set("MaxSupportedRxSpatialStreams", ns.UintegerValue(2))

    wifi = ns.WifiHelper()
    wifi.SetStandard(ns.WIFI_STANDARD_80211ax)
    gi = ns.TimeValue(ns.NanoSeconds(cfg.gi_ns))
    if cfg.ofdma:
        # One call: ConfigHeOptions replaces the options of an earlier call.
        timer = ns.TimeValue(ns.MicroSeconds(MU_EDCA_TIMER_US))
        zero = ns.UintegerValue(0)  # AIFSN 0: EDCA disabled while the timer runs
        wifi.ConfigHeOptions(
            "GuardInterval", gi,
            "MuBeAifsn", zero, "MuBkAifsn", zero, "MuViAifsn", zero, "MuVoAifsn", zero,
            "BeMuEdcaTimer", timer, "BkMuEdcaTimer", timer, "ViMuEdcaTimer", timer,
            "VoMuEdcaTimer", timer,
        )  # fmt: skip
    else:
        wifi.ConfigHeOptions("GuardInterval", gi)
    wifi.SetRemoteStationManager(
        "ns3::ConstantRateWifiManager",
        "DataMode", ns.StringValue(f"HeMcs{cfg.mcs}"),
        "ControlMode", ns.StringValue("OfdmRate24Mbps"),
    )  # fmt: skip
    mac = ns.WifiMacHelper()
    ssid = ns.Ssid("coorp")
    buf = ns.UintegerValue(cfg.mpdus)
    ampdu = ns.UintegerValue(6_500_631)
    mac.SetType(
        "ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "MpduBufferSize", buf,
        "BE_MaxAmpduSize", ampdu,
    )  # fmt: skip
    sta_devs = wifi.Install(phy, mac, stas)
    if cfg.ofdma:
        mac.SetMultiUserScheduler(
            "ns3::RrMultiUserScheduler",
            "NStations", ns.UintegerValue(4),
            "EnableUlOfdma", ns.BooleanValue(True),
            "EnableBsrp", ns.BooleanValue(cfg.bsrp),
            "AccessReqInterval", ns.TimeValue(ns.MicroSeconds(cfg.interval_us)),
        )  # fmt: skip
    mac.SetType(
        "ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid), "MpduBufferSize", buf,
        "BE_MaxAmpduSize", ampdu, "EnableBeaconJitter", ns.BooleanValue(False),
    )  # fmt: skip
    ap_devs = wifi.Install(phy, mac, ap)

    ap_if = place_and_address(ns, cfg.n, ap, stas, ap_devs, sta_devs)

    port = 9
    any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
    sink_apps = ns.PacketSinkHelper("ns3::UdpSocketFactory", any_addr).Install(ap.Get(0))
    sink_apps.Start(ns.Seconds(0.0))
    udp_bytes = cfg.payload_bytes - IP_UDP_HEADER_BYTES
    # Each source offers more than the whole channel's HE rate: a standing backlog.
    per_sta = 2 * 1201.0 / cfg.n
    rate = ns.DataRate(f"{per_sta * udp_bytes / cfg.payload_bytes:.3f}Mbps")
    dst = ns.InetSocketAddress(ap_if.GetAddress(0), port).ConvertTo()
    onoff = ns.OnOffHelper("ns3::UdpSocketFactory", dst)
    onoff.SetConstantRate(rate, udp_bytes)
    src_apps = onoff.Install(stas)
    src_apps.Start(ns.Seconds(NS3_APP_START_S))

    start = NS3_APP_START_S + 0.5
    ns.Simulator.Stop(ns.Seconds(start))
    ns.Simulator.Run()
    sink = ns.DynamicCast[ns.PacketSink](sink_apps.Get(0))
    rx0 = int(sink.GetTotalRx())
    startup = time.perf_counter() - t_build
    trace.Start()
    t0 = time.perf_counter()
    ns.Simulator.Stop(ns.Seconds(duration_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    trace.on = False
    rx1 = int(sink.GetTotalRx())
    ns.Simulator.Destroy()
    packets = (rx1 - rx0) / udp_bytes
    out: dict[str, Any] = {
        "mbps": packets * cfg.payload_bytes * 8 / duration_s / 1e6,
        "wall_s": wall,
        "startup_s": startup,
    }
    if cfg.ofdma:
        out["basic_triggers_per_s"] = int(trace.basic) / duration_s
        out["bsrp_triggers_per_s"] = int(trace.bsrp) / duration_s
        out["tb_ms"] = int(trace.ulLenNs) / max(int(trace.basic), 1) / 1e6
        out["mpdus_per_tb"] = int(trace.tbMpdus) / max(int(trace.basic) * cfg.n, 1)
    return out


def _pct(x: float, ref: float) -> str:
    return f"{x:.1f} ({100 * (x / ref - 1):+.1f}%)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", default="4,8", help="comma-separated station counts")
    ap.add_argument("--mcs", default="7,11", help="comma-separated HE-MCS")
    ap.add_argument("--duration", type=float, default=3.0, help="measured simulated seconds")
    ap.add_argument("--mpdus", type=int, default=256, help="Block Ack window (both ends)")
    ap.add_argument(
        "--interval", type=int, default=100,
        help="AccessReqInterval, µs (ns-3's AP contends only when it expires, see --help)",
    )  # fmt: skip
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--bsrp", action="store_true", help="BSRP before each Basic trigger (see the docstring)"
    )
    ap.add_argument("--no-ofdma", action="store_true", help="also run both without OFDMA")
    ap.add_argument("--no-ns3", action="store_true", help="skip ns-3 even if importable")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and not args.no_ns3:
        console.print(escape(INSTALL_HINT), style="yellow")
        console.print(escape(f"({why})"), style="dim")
    rows = []
    modes = [True, False] if args.no_ofdma else [True]
    for n in [int(x) for x in args.n.split(",")]:
        for mcs in [int(x) for x in args.mcs.split(",")]:
            row: dict[str, Any] = {"n": n, "mcs": mcs}
            for ofdma in modes:
                cfg = Config(
                    n, mcs, ofdma=ofdma, mpdus=args.mpdus, interval_us=args.interval,
                    bsrp=args.bsrp,
                )  # fmt: skip
                key = "ofdma" if ofdma else "edca"
                row[f"coorp_{key}"] = run_coorp(cfg, args.duration, args.seed)
                row[f"ns3_{key}"] = run_ns3(ns, cfg, args.duration, args.seed) if ns else None
                row["config"] = asdict(cfg)
            rows.append(row)
            console.print(f"[dim]done: N={n} HE-MCS {mcs}[/dim]")
    table = Table(
        title=f"Saturated UL, 80 MHz 2x2 HE, 1.6 µs GI, {args.mpdus}-MPDU window, "
        f"{args.duration:g} s simulated: UL OFDMA (round robin, 4 users, "
        f"{'BSRP' if args.bsrp else 'no BSRP'})"
    )
    cols = ["N", "HE-MCS", "ns-3 OFDMA Mb/s", "coorp OFDMA Mb/s", "ns-3 Basic TF/s",
            "coorp Basic TF/s", "ns-3 TB ms", "coorp TB ms"]  # fmt: skip
    if args.no_ofdma:
        cols += ["ns-3 EDCA Mb/s", "coorp EDCA Mb/s"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        c, n3 = r["coorp_ofdma"], r["ns3_ofdma"]
        cells = [
            str(r["n"]), str(r["mcs"]),
            "-" if n3 is None else f"{n3['mbps']:.1f}",
            f"{c['mbps']:.1f}" if n3 is None else _pct(c["mbps"], n3["mbps"]),
            "-" if n3 is None else f"{n3['basic_triggers_per_s']:.0f}",
            f"{c['basic_triggers_per_s']:.0f}",
            "-" if n3 is None else f"{n3['tb_ms']:.3f}",
            f"{c['tb_ms']:.3f}",
        ]  # fmt: skip
        if args.no_ofdma:
            ce, ne = r["coorp_edca"], r["ns3_edca"]
            cells += [
                "-" if ne is None else f"{ne['mbps']:.1f}",
                f"{ce['mbps']:.1f}" if ne is None else _pct(ce["mbps"], ne["mbps"]),
            ]
        table.add_row(*cells)
    console.print(table)
    console.print("Percentages: coorp against ns-3 in the same configuration.")
    if ns is not None:
        console.print(f"ns-3 {ns3_version()}: import {import_s:.1f} s.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "ns3_version": ns3_version() if ns is not None else None,
            "command": " ".join(["python benchmarks/ns3_ofdma_crosscheck.py", *sys.argv[1:]]),
            "rows": rows,
        }, indent=2))  # fmt: skip
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
