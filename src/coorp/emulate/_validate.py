"""The emulator checked against the simulator it wraps: saturated UDP senders, the same
scenario, the same window, emulated and simulated.

:func:`saturation_scenario` is the classic Bianchi setting (an AP and ``n`` stations,
one fixed MCS, per-AC or shared NIC rings); :func:`simulated_saturation` runs the
simulator with ``n`` saturated UDP uplinks (bulk flows without TCP acks, IP packets of
``packet_bytes``); :func:`run_load` runs the emulator with the same stations fed by
:mod:`coorp.emulate._blast` (real UDP sockets in the namespaces, payloads sized to the
same IP packets, offered above what the channel carries so every queue stays backlogged)
and measures the IP bytes the receivers' MACs acknowledged, in the same window of
simulated time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coorp._errors import ConfigurationError
from coorp.emulate._network import GRO_DEFAULT, Emulation, EmulationReport
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import Simulation

__all__ = [
    "LoadResult",
    "run_load",
    "saturation_scenario",
    "simulated_saturation",
    "uplinks",
]

_BLAST = Path(__file__).with_name("_blast.py")
_UDP_IP = 28


def saturation_scenario(
    n: int,
    *,
    width_mhz: int = 20,
    spatial_streams: int = 1,
    mcs: int = 7,
    ring: str = "per_ac",
    capacity_packets: int = 128,
    packet_bytes: int = 1500,
    duration_s: float = 10.0,
    seed: int = 1,
) -> Scenario:
    """An AP and stations ``s1``..``s<n>`` on one channel, every link at ``mcs``; no
    flows (the simulator's run adds them, the emulator's senders are real)."""
    if n < 1:
        raise ValueError(f"n = {n}: at least one sender")
    return parse_scenario({
        "name": f"saturation-{n}-{width_mhz}mhz-{spatial_streams}ss-mcs{mcs}",
        "description": f"{n} saturated uplinks to one AP (emulator validation)",
        "duration_s": duration_s, "seed": seed, "packet_bytes": packet_bytes,
        "phy": {"width_mhz": width_mhz, "spatial_streams": spatial_streams},
        "links": {"mode": "fixed", "mcs": mcs},
        "hw_queue": {"mode": ring, "capacity_packets": capacity_packets},
        "stations": [{"name": "ap"}] + [{"name": f"s{i}"} for i in range(1, n + 1)],
    })  # fmt: skip


def uplinks(scenario: Scenario, ap: str = "ap") -> list[tuple[str, str]]:
    """Every station other than ``ap`` sending to it."""
    return [(s.name, ap) for s in scenario.stations if s.name != ap]


def simulated_saturation(
    scenario: Scenario,
    flows: list[tuple[str, str]],
    *,
    warmup_s: float,
    window_s: float,
    seed: int | None = None,
) -> float:
    """IP Mb/s the simulator delivers on saturated UDP ``flows`` (src, dst) in the
    window ``[warmup_s, warmup_s + window_s]``."""
    sc = scenario.model_copy(update={"flows": []})
    sim = Simulation(sc, seed=seed)
    fs = []
    for src, dst in flows:
        f = sim.flow(f"{src}>{dst}", src, dst, AccessCategory.BE, bulk=True, tcp_acks=False)
        sim.start_transfer(f, None)
        fs.append(f)
    a = round(warmup_s * 1e9)
    b = a + round(window_s * 1e9)
    sim.loop.run(a)
    before = sum(f.delivered_bytes for f in fs)
    sim.loop.run(b)
    return (sum(f.delivered_bytes for f in fs) - before) * 8e3 / (b - a)


@dataclass
class LoadResult:
    """One emulated run under saturated UDP load."""

    mbps: float  # IP bytes the receivers' MACs acknowledged in the window
    app_mbps: float  # UDP payload the receiving sockets got (their own window)
    report: EmulationReport
    blast: dict[str, Any]

    @property
    def ip_app_mbps(self) -> float:
        """The sockets' payload as IP bytes (28 bytes of IP and UDP headers added)."""
        size = self.blast["size"]
        return self.app_mbps * (size + _UDP_IP) / size


def run_load(
    scenario: Scenario,
    flows: list[tuple[str, str]],
    *,
    pps: float,
    warmup_s: float,
    window_s: float,
    seed: int | None = None,
    rt_priority: int = 10,
    dscp: int = 0,
    queue_packets: int = 1000,
    tag: str = "cemu",
    sender_rt_priority: int = 0,
    split_cpus: bool = True,
    gro: bool = GRO_DEFAULT,
) -> LoadResult:
    """Emulate ``scenario`` with one real UDP sender per flow at ``pps`` packets/s of
    ``packet_bytes`` IP packets; the throughput in the window. ``sender_rt_priority``
    runs the senders at that SCHED_FIFO priority (0: ordinary), so that on a busy host
    the load offered is the load asked for."""
    size = scenario.packet_bytes - _UDP_IP
    duration = warmup_s + window_s
    with Emulation(scenario, seed=seed, rt_priority=rt_priority, queue_packets=queue_packets,
                   tag=tag, split_cpus=split_cpus, gro=gro) as em:  # fmt: skip
        argv = [sys.executable, str(_BLAST), "--pps", str(pps), "--size", str(size),
                "--dscp", str(dscp), "--duration", f"{duration + 1.0:.3f}",
                "--warmup", str(warmup_s), "--rt", str(sender_rt_priority)]  # fmt: skip
        for src, dst in flows:
            argv += ["--flow", f"{em.ns(src)},{em.ns(dst)},{em.addr(dst)}"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
        if r.returncode != 0:
            raise ConfigurationError(f"the UDP blaster failed: {r.stderr[-2000:]}")
        blast = json.loads(r.stdout.strip().splitlines()[-1])
        report = em.stop()
    rx = [station for _, station in flows]
    mbps = sum(report.rx_mbps(st, warmup_s, duration) for st in sorted(set(rx)))
    window = blast["window_s"]
    app = sum(blast["rx_payload_bytes"]) * 8 / window / 1e6 if window > 0 else math.nan
    return LoadResult(mbps, app, report, blast)
