"""The emulator's anchors beside the simulator (benchmarks/emulate.py ``--sections anchors``):
round-trip times of a small UDP echo, idle and under saturated load, in AC_BE and AC_VO,
against the simulator's one-way access delays of the same packets; and a real TCP
upload's throughput against the simulator's bulk rate for the same station.

Both on crl-5 at 20 MHz 1x1 (its shared NIC rings). The echo client in r1 sends a
64-byte datagram every 20 ms to the leader, which echoes it with the same DSCP; the
load is r2, r3 and r4 saturating their uplinks (real UDP). The simulated RTT is the sum
of the same-percentile one-way latencies of 64-byte datagram flows r1 -> leader and
leader -> r1 in the same category, with the same load as saturated bulk flows.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

import coorp.emulate
from coorp.emulate import Emulation
from coorp.scenario import Scenario, parse_scenario
from coorp.sim import simulate

_BLAST = Path(coorp.emulate.__file__).with_name("_blast.py")

ECHO = """
import socket, sys
tos = int(sys.argv[1]) << 2
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 7000))
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
print("up", flush=True)
while True:
    d, a = s.recvfrom(4096); s.sendto(d, a)
"""

PROBE = """
import json, socket, sys, time
dst, n, dscp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.0)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
rtt = []
for k in range(n):
    t = time.perf_counter()
    s.sendto(k.to_bytes(4, "big") + bytes(60), (dst, 7000))
    try:
        while int.from_bytes(s.recvfrom(4096)[0][:4], "big") != k:
            pass
        rtt.append((time.perf_counter() - t) * 1e3)
    except TimeoutError:
        pass
    time.sleep(0.02)
print(json.dumps(rtt))
"""

TCP_SINK = """
import socket, sys, time, json
warm, dur = float(sys.argv[1]), float(sys.argv[2])
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 7001)); l.listen(1); print("up", flush=True)
c, _ = l.accept(); t0 = time.monotonic(); got = 0; start = None
buf = bytearray(1 << 20)
while True:
    n = c.recv_into(buf)
    if not n:
        break
    now = time.monotonic()
    if now - t0 >= warm:
        if start is None:
            start = now
        got += n
        if now - t0 >= warm + dur:
            break
print(json.dumps({"bytes": got, "seconds": time.monotonic() - start}), flush=True)
"""

TCP_SOURCE = """
import socket, sys, time
dst, secs = sys.argv[1], float(sys.argv[2])
s = socket.create_connection((dst, 7001)); chunk = bytes(1 << 16); end = time.monotonic() + secs
try:
    while time.monotonic() < end:
        s.sendall(chunk)
except OSError:
    pass
"""


def crl5_20() -> Scenario:
    from coorp.scenario import apply_overrides, load_scenario, resolve_scenario

    path = resolve_scenario("crl-5")
    return apply_overrides(
        load_scenario(path), [("phy.width_mhz", 20), ("phy.spatial_streams", 1)], source=str(path)
    )


def _sim_rtt(sc: Scenario, category: str, loaded: bool, seed: int) -> dict[str, float]:
    flows: list[dict[str, Any]] = [
        {"kind": "datagram", "name": "up", "src": "r1", "dst": "leader", "size_bytes": 64,
         "period_us": 20000, "jitter_us": 300, "category": category},
        {"kind": "datagram", "name": "down", "src": "leader", "dst": "r1", "size_bytes": 64,
         "period_us": 20000, "start_us": 7000, "jitter_us": 300, "category": category},
    ]  # fmt: skip
    if loaded:
        flows += [{"kind": "bulk", "name": f"load{r}", "src": r, "dst": "leader",
                   "tcp_acks": False} for r in ("r2", "r3", "r4")]  # fmt: skip
    data = sc.model_dump(mode="json")
    data.update(flows=flows, workload=None, duration_s=6.0)
    res = simulate(parse_scenario(data), seed=seed)
    m = res.messages
    out = {}
    for q in (50, 90, 99):
        lat = [np.percentile(m["latency_ns"][(m["flow"] == f) & (m["latency_ns"] >= 0)], q)
               for f in ("up", "down")]  # fmt: skip
        out[f"p{q}_ms"] = float(sum(lat)) / 1e6
    return out


def _load_argv(em: Emulation, sc: Scenario, pps: float, secs: float) -> list[str]:
    argv = [sys.executable, str(_BLAST), "--pps", str(pps), "--size",
            str(sc.packet_bytes - 28), "--duration", str(secs)]  # fmt: skip
    for r in ("r2", "r3", "r4"):
        argv += ["--flow", f"{em.ns(r)},{em.ns('leader')},{em.addr('leader')}"]
    return argv


def anchors(args: Any, details: dict[str, Any]) -> None:
    sc = crl5_20()
    out: dict[str, Any] = {"scenario": "crl-5 20 MHz 1x1 (shared rings)", "rtt": [], "tcp": {}}
    for loaded in (False, True):
        for category, dscp in (("BE", 0), ("VO", 46)):
            with Emulation(sc, seed=1, rt_priority=args.rt_priority) as em:
                em.start("leader", [sys.executable, "-c", ECHO, str(dscp)]).expect("up", 30)
                load = None
                if loaded:
                    load = em.popen(None, _load_argv(em, sc, 2500.0, 8.0))
                rtt = json.loads(em.run("r1", [sys.executable, "-c", PROBE, "leader", "150",
                                                str(dscp)], timeout=60))  # fmt: skip
                if load is not None:
                    load.kill()
                rep = em.stop()
            sim = [_sim_rtt(sc, category, loaded, s) for s in (1, 2, 3)]
            row = {
                "load": "3 saturated uplinks" if loaded else "idle", "category": category,
                "probes": len(rtt),
                "emulated_p50_ms": float(np.percentile(rtt, 50)),
                "emulated_p90_ms": float(np.percentile(rtt, 90)),
                "simulated_p50_ms": statistics.fmean(s["p50_ms"] for s in sim),
                "simulated_p90_ms": statistics.fmean(s["p90_ms"] for s in sim),
                "lag_p99_ms": rep.lag_p99_ms,
            }  # fmt: skip
            out["rtt"].append(row)
            print(f"anchors rtt {row}", flush=True)
    warm, window = 3.0, 6.0
    with Emulation(sc, seed=1, rt_priority=args.rt_priority) as em:
        sink = em.start("leader", [sys.executable, "-c", TCP_SINK, str(warm), str(window)])
        sink.expect("up", 30)
        em.popen("r1", [sys.executable, "-c", TCP_SOURCE, "leader", str(warm + window + 2)])
        got = json.loads(sink.read_line(warm + window + 30) or "{}")
        rep = em.stop()
    emu_ip = rep.rx_mbps("leader", warm, warm + window)
    data = sc.model_dump(mode="json")
    data.update(flows=[{"kind": "bulk", "name": "up", "src": "r1", "dst": "leader"}],
                workload=None, duration_s=warm + window)  # fmt: skip
    sims = []
    for seed in (1, 2, 3):
        res = simulate(parse_scenario(data), seed=seed)
        sims.append(res.flows["up"].throughput_mbps)
    out["tcp"] = {
        "emulated_ip_mbps": emu_ip,
        "emulated_goodput_mbps": got.get("bytes", 0) * 8 / max(got.get("seconds", 1), 1e-9) / 1e6,
        "simulated_bulk_ip_mbps": statistics.fmean(sims), "lag_p99_ms": rep.lag_p99_ms,
        "note": "simulated: a bulk flow with TCP acks (every 2nd packet) and no congestion "
                "control, over the whole run; emulated: Linux TCP (cubic), IP bytes the "
                "leader's MAC acknowledged in the window, and the socket's goodput",
    }  # fmt: skip
    print(f"anchors tcp {out['tcp']}", flush=True)
    details["anchors"] = out
