"""The emulator process: ``python -m coorp.emulate._serve CONFIG.json``.

Started by :class:`coorp.emulate.Emulation` with the stations' TUN descriptors
inherited (``pass_fds``), so the real-time loop has a process and an interpreter lock of
its own, apart from whatever the caller runs. It prints ``ready`` when the loop starts,
one status line a second on stderr when asked, and writes its report (JSON) and traces
when it stops: at the configured duration, on SIGTERM or SIGINT, or when its parent dies
(``PR_SET_PDEATHSIG``: a killed ``coorp emulate`` does not leave it running).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from coorp._manifest import write_json
from coorp.emulate._air import Air
from coorp.emulate._pump import Pump
from coorp.emulate._trace import FrameLog, write_traces
from coorp.scenario import parse_scenario

__all__ = ["main", "report_of"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl
        os.kill(os.getpid(), signal.SIGTERM)


def report_of(air: Air, pump: Pump, extra: dict[str, Any]) -> dict[str, Any]:
    """The run's report (what ``Emulation.stop`` returns as :class:`EmulationReport`)."""
    st = pump.stats
    c = air.counters
    lag = st.frame_lag.summary()
    held = lag.p99_ms <= 1.0
    names = air.names
    return {
        "scenario": air.scenario.name,
        "seed": air.sim.seed,
        "ap": air.ap_name,
        "stations": names,
        "addresses": air.addresses,
        "wall_s": round(st.wall_s, 6),
        "sim_s": air.now_ns / 1e9,
        "cpu_s": round(st.cpu_s, 6),
        "cpu_system_s": round(st.cpu_system_s, 6),
        "frames_in": st.frames_in,
        "frames_out": st.frames_out,
        "bytes_out": st.bytes_out,
        "write_errors": st.write_errors,
        "gro": pump.gro,
        "gro_writes": st.gro_writes,
        "gro_frames": st.gro_frames,
        "turns": st.turns,
        "frame_lag": lag.as_dict(),
        "wake_lag": st.wake_lag.summary().as_dict(),
        "realtime_held": held,
        "verdict": (
            f"real time held: frame lag p99 {lag.p99_ms:.3f} ms <= 1 ms, {lag.late} of "
            f"{lag.count} frames late by > 1 ms"
            if held
            else f"REAL TIME NOT HELD: the host could not keep up (frame lag p99 "
            f"{lag.p99_ms:.3f} ms > 1 ms, max {lag.max_ms:.3f} ms, {lag.late} of "
            f"{lag.count} frames late by > 1 ms)"
        ),
        "per_station": {
            n: {
                "sent_packets": c.sent_packets[i],
                "sent_bytes": c.sent_bytes[i],
                "queue_drops": c.queue_drops[i],
                "mac_lost": c.mac_lost[i],
                "rx_frames": c.rx_frames[i],
                "rx_bytes": c.rx_bytes[i],
            }
            for i, n in enumerate(names)
        },
        "no_route": c.no_route,
        "malformed": c.malformed,
        "relayed": c.relayed,
        "by_ac": dict(c.by_ac),
        "channel": {
            "exchanges": air.sim.channel.stats.exchanges,
            "collisions": air.sim.channel.stats.collisions,
            "busy_ns": air.sim.channel.stats.busy_ns,
        },
        **extra,
    }


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    _die_with_parent(int(cfg["parent"]))
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scenario = parse_scenario(cfg["scenario"], source=cfg.get("source", "<scenario>"))
    trace_dir = cfg.get("trace_dir")
    air = Air(
        scenario, seed=cfg.get("seed"), ap=cfg.get("ap"), subnet=cfg["subnet"],
        queue_packets=int(cfg["queue_packets"]), background=bool(cfg.get("background")),
        record_arrivals=bool(cfg.get("record_arrivals")), trace=trace_dir is not None,
    )  # fmt: skip
    log = FrameLog() if trace_dir is not None else None
    air.log = log
    pump = Pump(air, [int(fd) for fd in cfg["fds"]], trace_writes=trace_dir is not None,
                gro=bool(cfg.get("gro")))  # fmt: skip
    rt = int(cfg.get("rt_priority", 0))
    rt_note = None
    if rt > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt))
        except OSError as exc:
            rt_note = f"SCHED_FIFO {rt} refused: {exc}"
            print(f"emulate: warning: {rt_note}", file=sys.stderr, flush=True)
    cpu = cfg.get("cpu")
    cpu_note = None
    if cpu is not None:  # the stations' receive processing runs on the other CPUs
        try:
            os.sched_setaffinity(0, {int(cpu)})
        except OSError as exc:
            cpu_note = f"pinning to CPU {cpu} refused: {exc}"
            print(f"emulate: warning: {cpu_note}", file=sys.stderr, flush=True)
    status = bool(cfg.get("status"))
    series: list[dict[str, Any]] = []
    c = air.counters

    def on_second(p: Pump, now: int) -> None:
        w = p.window.summary()
        series.append({"t_ns": air.now_ns, "rx_bytes": list(c.rx_bytes),
                       "sent_packets": list(c.sent_packets), "lag_p99_ms": w.p99_ms,
                       "frames": w.count, "late": w.late})  # fmt: skip
        if status:
            mbps = 0.0
            if len(series) > 1:
                a, b = series[-2], series[-1]
                mbps = (sum(b["rx_bytes"]) - sum(a["rx_bytes"])) * 8e3 / (b["t_ns"] - a["t_ns"])
            warn = "" if w.p99_ms <= 1.0 else "  <- cannot keep up"
            print(f"emulate: t={now / 1e9:6.1f} s  air {mbps:7.1f} Mb/s  frames {w.count:6d}/s  "
                  f"lag p99 {w.p99_ms:6.3f} ms  late {w.late}{warn}", file=sys.stderr,
                  flush=True)  # fmt: skip

    load_start = os.getloadavg()
    print("ready", flush=True)
    duration = cfg.get("duration_s")
    pump.run(None if duration is None else round(float(duration) * 1e9),
             stop=lambda: stopping, on_second=on_second)  # fmt: skip
    on_second(pump, air.now_ns)
    extra: dict[str, Any] = {
        "load_start": load_start, "load_end": os.getloadavg(), "cores": os.cpu_count(),
        "rt_priority": rt, "rt_note": rt_note, "cpu": cpu, "rps_cpus": cfg.get("rps_cpus"),
        "cpu_note": cpu_note, "series": series,
    }  # fmt: skip
    if trace_dir is not None:
        files = write_traces(Path(trace_dir), air, log, pump.stats.writes)
        extra["trace_files"] = [str(p) for p in files]
    report = report_of(air, pump, extra)
    write_json(Path(cfg["report"]), report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
