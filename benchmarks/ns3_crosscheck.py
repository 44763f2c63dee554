"""Cross-check coorp's channel simulator against ns-3 and Bianchi's model.

The same saturated 802.11ac uplink in all three: N stations, each sending IP packets of
``--payload`` bytes as fast as the channel allows to one access point, 80 MHz, 2 spatial
streams, long guard interval, a fixed VHT MCS, control frames at 24 Mb/s, AC_BE with the
standard EDCA parameters (AIFSN 3, CWmin 15, CWmax 1023, no TXOP limit), A-MPDU
aggregation (up to 64 MPDUs / 1 048 575 bytes) or none, basic access or RTS/CTS.

* ns-3 (Python bindings of the PyPI wheel ``ns3``, ``pip install 'coorp[ns3]'``):
  YansWifiChannel with the default log-distance loss, stations on a 1 m circle around
  the AP (no PHY errors), ConstantRateWifiManager, one OnOff UDP source per station at
  twice its fair share of the model's throughput (a backlog builds within a few ms and
  never drains), a PacketSink at the AP. ns-3 always uses its own BlockAckReq retry
  behaviour, so the coorp and Bianchi columns use ``retry_policy = "ns3"``.
* coorp: :func:`coorp.sim.simulate` on the equivalent scenario (bulk flows, no TCP acks).
* Bianchi: :func:`coorp.analysis.saturation_throughput`.

Throughput is delivered IP bytes (UDP payload + 28) per second in every column. Wall
times are per simulated second; ns-3's start-up (import + building the topology +
association + warm-up) is reported separately. Without ns-3 the script prints how to
install it and still shows the coorp and Bianchi columns (exit status 0).

    python benchmarks/ns3_crosscheck.py --n 1,5,10 --duration 2 --json results/ns3.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coorp.analysis import saturation_throughput
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import simulate

IP_UDP_HEADER_BYTES = 28
#: ns-3 stations need to associate before traffic flows; sources start here.
NS3_APP_START_S = 1.0
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

    @property
    def variant(self) -> str:
        return f"{'ampdu' if self.aggregation else 'single'}-{'rts' if self.rts else 'basic'}"

    @classmethod
    def from_variant(cls, n: int, variant: str, **kw: Any) -> Config:
        agg, access = variant.split("-")
        return cls(n=n, aggregation=agg == "ampdu", rts=access == "rts", **kw)


def coorp_scenario(cfg: Config) -> Scenario:
    mac: dict[str, Any] = {"retry_policy": cfg.retry_policy}
    if not cfg.aggregation:
        mac["edca"] = {"BE": {"aggregation": False}}
    if cfg.rts:
        mac["rts_threshold_bytes"] = 0
    return parse_scenario(
        {
            "name": f"saturation-{cfg.variant}-{cfg.n}",
            "packet_bytes": cfg.payload_bytes,
            "phy": {"width_mhz": 80, "spatial_streams": 2, "guard_interval": "long"},
            "mac": mac,
            "links": {"mode": "fixed", "mcs": cfg.mcs},
            "stations": [{"name": "ap"}] + [{"name": f"sta{i}"} for i in range(cfg.n)],
            "flows": [
                {"kind": "bulk", "name": f"up{i}", "src": f"sta{i}", "dst": "ap", "tcp_acks": False}
                for i in range(cfg.n)
            ],
        }
    )


def bianchi_mbps(cfg: Config) -> float:
    sc = coorp_scenario(cfg)
    return saturation_throughput(
        cfg.n, payload_bytes=cfg.payload_bytes, mcs=cfg.mcs, phy=sc.phy, mac=sc.mac
    ).throughput_mbps


@dataclass(frozen=True)
class Run:
    mbps: float
    wall_s: float  # around the measured window only
    simulated_s: float
    startup_s: float = 0.0  # ns-3: topology + association + warm-up


def run_coorp(cfg: Config, duration_s: float, seed: int = 1) -> Run:
    sc = coorp_scenario(cfg)
    t0 = time.perf_counter()
    res = simulate(sc, seed=seed, duration_ns=round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    mbps = sum(res.flows[f"up{i}"].throughput_mbps for i in range(cfg.n))
    return Run(mbps, wall, duration_s)


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


def run_ns3(
    ns: Any, cfg: Config, duration_s: float, *, warmup_s: float = 0.5, seed: int = 1
) -> Run:
    """Build the topology, associate, warm up, then time ``Simulator.Run`` over the window."""
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

    wifi = ns.WifiHelper()
    wifi.SetStandard(ns.WIFI_STANDARD_80211ac)
    wifi.SetRemoteStationManager(
        "ns3::ConstantRateWifiManager",
        "DataMode", ns.StringValue(f"VhtMcs{cfg.mcs}"),
        "ControlMode", ns.StringValue("OfdmRate24Mbps"),
        "RtsCtsThreshold", ns.UintegerValue(0 if cfg.rts else 4_692_480),
    )  # fmt: skip
    mac = ns.WifiMacHelper()
    ssid = ns.Ssid("coorp")
    ampdu = ns.UintegerValue(1_048_575 if cfg.aggregation else 0)
    mac.SetType("ns3::StaWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu)
    sta_devs = wifi.Install(phy, mac, stas)
    mac.SetType("ns3::ApWifiMac", "Ssid", ns.SsidValue(ssid), "BE_MaxAmpduSize", ampdu)
    ap_devs = wifi.Install(phy, mac, ap)

    mobility = ns.MobilityHelper()
    pos = ns.ListPositionAllocator()
    pos.Add(ns.Vector(0.0, 0.0, 0.0))
    for i in range(cfg.n):
        a = 2 * math.pi * i / cfg.n
        pos.Add(ns.Vector(math.cos(a), math.sin(a), 0.0))
    mobility.SetPositionAllocator(pos)
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel")
    mobility.Install(ap)
    mobility.Install(stas)

    stack = ns.InternetStackHelper()
    stack.Install(ap)
    stack.Install(stas)
    addresses = ns.Ipv4AddressHelper()
    addresses.SetBase(ns.Ipv4Address("10.1.0.0"), ns.Ipv4Mask("255.255.0.0"))
    ap_if = addresses.Assign(ap_devs)
    addresses.Assign(sta_devs)

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

    t0 = time.perf_counter()
    ns.Simulator.Stop(ns.Seconds(duration_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - t0
    rx1 = int(sink.GetTotalRx())
    ns.Simulator.Destroy()
    packets = (rx1 - rx0) / udp_bytes
    return Run(packets * cfg.payload_bytes * 8 / duration_s / 1e6, wall, duration_s, startup)


# -- the table ----------------------------------------------------------------------------------
def _pct(x: float | None, ref: float) -> str:
    return "" if x is None else f" ({100 * (x / ref - 1):+.1f}%)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", default="1,5,10", help="comma-separated station counts")
    ap.add_argument("--duration", type=float, default=2.0, help="measured simulated seconds")
    ap.add_argument("--warmup", type=float, default=0.5, help="ns-3 warm-up after sources start")
    ap.add_argument("--variants", default="ampdu-basic,single-basic", help=f"any of {VARIANTS}")
    ap.add_argument("--mcs", type=int, default=7)
    ap.add_argument("--payload", type=int, default=1500, help="IP packet bytes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-ns3", action="store_true", help="skip ns-3 even if importable")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    ns_list = [int(x) for x in args.n.split(",") if x.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=132)  # keep the table readable when piped or logged

    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and not args.no_ns3:
        console.print(escape(INSTALL_HINT), style="yellow")
        console.print(escape(f"({why})"), style="dim")

    rows: list[dict[str, Any]] = []
    for variant in variants:
        for n in ns_list:
            cfg = Config.from_variant(n, variant, mcs=args.mcs, payload_bytes=args.payload)
            model = bianchi_mbps(cfg)
            ours = run_coorp(cfg, args.duration, args.seed)
            theirs = (
                run_ns3(ns, cfg, args.duration, warmup_s=args.warmup, seed=args.seed)
                if ns
                else None
            )
            rows.append(
                {
                    **asdict(cfg),
                    "variant": variant,
                    "bianchi_mbps": model,
                    "coorp_mbps": ours.mbps,
                    "coorp_wall_s": ours.wall_s,
                    "ns3_mbps": theirs.mbps if theirs else None,
                    "ns3_wall_s": theirs.wall_s if theirs else None,
                    "ns3_startup_s": theirs.startup_s if theirs else None,
                    "simulated_s": args.duration,
                }
            )
            console.print(f"[dim]done: {variant} N={n}[/dim]")

    table = Table(
        title=f"Saturated uplink, 80 MHz 2x2 VHT MCS {args.mcs}, {args.payload} B packets, "
        f"{args.duration:g} s simulated (retry policy: ns3)"
    )
    for col in (
        "variant",
        "N",
        "Bianchi Mb/s",
        "coorp Mb/s",
        "ns-3 Mb/s",
        "coorp wall s",
        "ns-3 wall s",
    ):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for r in rows:
        table.add_row(
            r["variant"],
            str(r["n"]),
            f"{r['bianchi_mbps']:.1f}",
            f"{r['coorp_mbps']:.1f}{_pct(r['coorp_mbps'], r['bianchi_mbps'])}",
            "-"
            if r["ns3_mbps"] is None
            else f"{r['ns3_mbps']:.1f}{_pct(r['ns3_mbps'], r['bianchi_mbps'])}",
            f"{r['coorp_wall_s']:.2f}",
            "-" if r["ns3_wall_s"] is None else f"{r['ns3_wall_s']:.2f}",
        )
    console.print(table)
    if ns is not None:
        console.print(
            f"ns-3 {ns3_version()}: import {import_s:.1f} s; per-run start-up (build, association, "
            f"{args.warmup:g} s warm-up) shown in the JSON as ns3_startup_s."
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "ns3_version": ns3_version() if ns is not None else None,
            "ns3_import_s": import_s if ns is not None else None,
            "command": " ".join(["python benchmarks/ns3_crosscheck.py", *sys.argv[1:]]),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
