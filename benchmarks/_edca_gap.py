"""Why the unmarked loop misses 52% in the simulator and 3-8% on the emulated air
(docs/emulate.md, "The gap, measured"): the queues in front of the NIC, side by side.

The same scenario on both sides: crl-5 with shared NIC rings, four robots each with a
saturating cubic TCP upload to the leader and the MPC loop's 30 Hz perception (12.1 KB
up) and command (1.1 KB down), everything best effort (``benchmarks/_emulate_edca.py``'s
``best effort`` traffic; the emulated ``none`` mode of ``benchmarks/transparent.py
--medium wifi --apps dds``). Each side prints, per seed or repetition and as mean ± 95%
CI: LS misses (perceptions, commands), bulk Mb/s, and what waits where — the AP's
best-effort queue (TCP acks, the commands) and each robot's (its upload), in packets,
sampled every 10 ms; the TCP windows; the kernel-queue drops and their episodes; the
slow starts HyStart ended. Both sides measure the loop's window in the uploads' steady
state: the emulated one starts ~32.2 s after its uploads (``transparent.py``'s warm-up,
30 s by default here, and lead; ``window_after_uploads_s``), the simulator's
``--warmup`` (32.2 s). ``emu --warmup 2`` with ``sim --warmup 4.2`` measure the start-up
instead (docs/emulate.md, "Steady state").

::

    # the simulator (seconds; --set as coorp compare's, e.g. hw_queue.kernel_queue_packets=1000)
    .venv/bin/python benchmarks/_edca_gap.py sim --seeds 5
    # the emulator (root; 5 x (lead + 30 s + 10 s); --emu-queue-packets as coorp emulate's)
    sudo nice -n 10 .venv/bin/python benchmarks/_edca_gap.py emu --repetitions 5 --json F
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from coorp.emulate import GRO_DEFAULT
from coorp.scenario import AccessCategory
from coorp.stats import mean_ci

SAMPLE_NS = 10_000_000
ROBOTS = ["r1", "r2", "r3", "r4"]
#: The IP size of the last fragment of the DDS loop's 12.1 KB perception (Cyclone DDS
#: fragments it into 1500-byte datagrams and this tail; no other frame of the cell has
#: it): the emulator's trace finds each perception's time on the channel by it.
PERCEPTION_TAIL_BYTES = 284
BE = AccessCategory.BE
#: The emulated runs' warm-up by default (``emu --warmup``): the uploads' CUBIC windows
#: are past their start-up (HyStart's exit, the first losses) when the loop's window opens;
#: the simulator's default window starts as long after its uploads (``sim --warmup``).
STEADY_WARMUP_S = 30.0
#: Drops further apart than this start a new overflow episode (``_episodes``).
EPISODE_GAP_NS = 50_000_000


def _ci(xs: list[float]) -> str:
    m = mean_ci(xs)
    return f"{m.mean:.4g} ± {0.0 if math.isnan(m.ci95) else m.ci95:.2g}"


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# -- the simulator -----------------------------------------------------------------------
def sim_seed(seed: int, overrides: list[str], warmup_s: float, window_s: float) -> dict[str, Any]:
    import _emulate_edca as edca
    from coorp.scenario import apply_overrides
    from coorp.sim import Simulation
    from coorp.sim.events import PRIO_CONTROL
    from coorp.sweep import parse_override

    sc = edca.scenario("shared", BE)
    if overrides:
        pairs = [(k, v[0]) for k, v in map(parse_override, overrides)]
        sc = apply_overrides(sc, pairs, source="--set")
    sim = Simulation(sc, seed=seed, trace=True)
    ap = sim.station("leader")
    robots = [sim.station(n) for n in ("r1", "r2", "r3", "r4")]
    conns = [sim.tcp[f"upload-{r.name}"] for r in robots]
    a = round(warmup_s * 1e9)
    b = a + round(window_s * 1e9)
    rows: list[list[float]] = []

    def sample() -> None:
        t = sim.loop.now_ns
        row = [
            float(sum(p.count for p in ap.ls_queues[BE])),
            float(ap.rings[BE].n),
            float(ap.kernel_queued(BE)),
        ]
        for r, c in zip(robots, conns, strict=True):
            segments = (c.sock.remaining_bytes or 0) / sc.packet_bytes
            row += [
                # with a bound the kernel queue's count has the TCP segments already
                float(r.kernel_queued(BE)) if r.kernel_limit else segments + r.kernel_queued(BE),
                float(r.rings[BE].n),
                float(c.cwnd),
                float(c.in_flight()),
                # delivered, not yet acknowledged to the sender: the acks on their way
                # back (and at most a GRO batch or a delayed ack at the receiver)
                float(c.rcv_nxt - c.snd_una),
                float(r.kernel_drops),
            ]
        rows.append(row)
        if t + SAMPLE_NS < b:
            sim.loop.call_at(t + SAMPLE_NS, PRIO_CONTROL, sample)

    sim.loop.call_at(a, PRIO_CONTROL, sample)
    # (segments delivered, acks sent, retransmits, AP's drops, robots' drops) at a and b
    counts: list[tuple[int, ...]] = []  # ... and fast recoveries and timeouts

    def count() -> None:
        counts.append(
            (
                sum(c.flow.delivered_packets for c in conns),
                sum(c.ack_flow.sent_packets for c in conns),
                sum(c.retransmits for c in conns),
                ap.kernel_drops,
                sum(r.kernel_drops for r in robots),
                sum(c.fast_recoveries for c in conns),
                sum(c.timeouts for c in conns),
                sum(c.loss_probes for c in conns),
                sum(c.probe_recoveries for c in conns),
                sum(c.spurious_timeouts for c in conns),
            )
        )

    sim.loop.call_at(a, PRIO_CONTROL, count)
    sim.loop.call_at(b, PRIO_CONTROL, count)
    res = _run_window(sim, conns, a, b)
    res.update(
        _ap_exchanges(
            [(e[0], e[2], e[3], e[5]) for e in sim.channel.stats.trace or []], "leader", a, b
        )
    )
    x = np.array(rows)
    (seg0, ack0, ret0, apd0, rd0, *_) = counts[0]
    seg1, ack1, ret1, apd1, rd1, fr1, to1, lp1, pr1, sp1 = counts[1]
    res["ack_ratio"] = (seg1 - seg0) / max(ack1 - ack0, 1)  # segments per ack, as the emulator's
    robot_q = x[:, 3::6].mean(axis=0)
    return {
        "seed": seed,
        **res,
        "ap_prio_queue": float(x[:, 0].mean()),
        "ap_prio_queue_p95": float(np.percentile(x[:, 0], 95)),
        "ap_ring": float(x[:, 1].mean()),
        "ap_kernel_queue": float(x[:, 2].mean()),
        "robot_kernel_queue": float(robot_q.mean()),
        "robot_ring": float(x[:, 4::6].mean()),
        # kernel queue + ring per robot and sample: what a perception waits behind
        "robot_queue_p50": float(np.percentile(x[:, 3::6] + x[:, 4::6], 50)),
        "robot_queue_p90": float(np.percentile(x[:, 3::6] + x[:, 4::6], 90)),
        "robot_queue_p95": float(np.percentile(x[:, 3::6] + x[:, 4::6], 95)),
        "loss_episodes": _episodes(
            [np.flatnonzero(np.diff(x[:, col]) > 0) * SAMPLE_NS for col in range(8, x.shape[1], 6)]
        ),
        "cwnd": float(x[:, 5::6].mean()),
        "in_flight": float(x[:, 6::6].mean()),
        "acked_data_in_transit": float(x[:, 7::6].mean()),
        # the uploads' whole run (warm-up and window), as the emulator's run_* keys
        "run_fast_recoveries": fr1,
        "run_timeouts": to1,
        "run_retransmits": ret1,
        "run_loss_probes": lp1,
        "run_probe_recoveries": pr1,
        "run_spurious_rtos": sp1,
        **_hystart(
            {
                "hystart_train": sum(getattr(c.cc, "hystart_exits", 0) for c in conns),
                "hystart_delay": 0,
                "hystart_train_cwnd": sum(getattr(c.cc, "hystart_cwnd", 0) for c in conns),
                "hystart_delay_cwnd": 0,
            }
        ),
        # in the window, as the emulator's
        "retransmits": ret1 - ret0,
        "kernel_drops_ap": apd1 - apd0,
        "kernel_drops_robots": rd1 - rd0,
    }


def _episodes(drops: list[Any], gap_ns: int = EPISODE_GAP_NS) -> float:
    """Kernel-queue overflow episodes per robot: each robot's drop instants (ns, sorted)
    grouped where more than ``gap_ns`` apart (one episode: the drops a window's overshoot
    makes before the sender learns of the first), counted and averaged over the robots."""
    n = [int(d.size > 0) + int((np.diff(d) > gap_ns).sum()) for d in map(np.asarray, drops)]
    return float(np.mean(n)) if n else 0.0


def _ap_exchanges(ex: list[Any], ap: str, a: int, b: int) -> dict[str, float]:
    """The AP's share of the successful exchanges in [a, b) and its MPDUs per exchange
    (an A-MPDU of acks and commands: mean, median, share of at most 4): how fast its queue
    drains."""
    mine = [(st, m) for t, col, st, m in ex if a <= t < b and not col and len(st) == 1]
    ap_m = [m[0] for st, m in mine if st[0] == ap]
    return {
        "ap_exchange_share": len(ap_m) / max(len(mine), 1),
        "ap_mpdus_per_exchange": float(np.mean(ap_m)) if ap_m else float("nan"),
        # the AP's A-MPDUs of one receiver's acks: their median, and how many are small
        "ap_mpdus_p50": float(np.median(ap_m)) if ap_m else float("nan"),
        "ap_small_exchanges": float(np.mean(np.array(ap_m) <= 4)) if ap_m else float("nan"),
    }


def _run_window(sim: Any, conns: list[Any], a: int, b: int) -> dict[str, Any]:
    """As ``_emulate_edca.simulate``: bulk in the window (TCP payload, as the emulated
    programs count what they read), LS messages created in it."""
    import _emulate_edca as edca

    uploads = [f for name, f in sim.flows.items() if name.startswith("upload-")]
    sim.loop.run(a)
    before = sum(f.delivered_bytes for f in uploads)
    sim.loop.run(b)
    bulk = (sum(f.delivered_bytes for f in uploads) - before) * 8e3 / (b - a)
    # TCP payload (MSS of each IP packet) as the emulated programs count what they read
    if conns:
        bulk *= conns[0].mss / conns[0].packet_bytes
    m = sim.run(b + 1_000_000_000).messages
    out: dict[str, Any] = {"bulk_mbps": bulk}
    for kind in ("perception", "command"):
        sel = np.array([str(f).startswith(kind) for f in m["flow"]], dtype=bool)
        sel &= (m["created_ns"] >= a) & (m["created_ns"] < b)
        lat = m["latency_ns"][sel] / 1e6
        out[f"{kind}_miss"] = float(((lat > edca.BOUND_MS) | (lat < 0)).sum() / max(sel.sum(), 1))
        out[f"{kind}_p50_ms"] = float(np.percentile(lat[lat >= 0], 50))
    out["ls_miss"] = (out["perception_miss"] + out["command_miss"]) / 2
    return out


def _ack_spread(spread_ns: int, delay_ns: int = 0) -> None:
    """What-if: a GRO receiver's acks for one delivered burst leave ``delay_ns`` after it
    and ``spread_ns`` apart (the first ``delay_ns + spread_ns`` after it), not at its
    instant, as the emulated leader's host takes time to process a burst
    (``TcpConnection._gro_acks`` patched in this process only; needs ``COORP_PURE=1``)."""
    import coorp.sim.tcp as tcp
    from coorp.sim.events import PRIO_MEDIUM

    if not tcp.__file__ or not tcp.__file__.endswith(".py"):
        raise SystemExit("--ack-spread-us needs COORP_PURE=1 (compiled code cannot be patched)")

    def gro_acks(self: Any) -> None:
        seq, k, g, now = self._gro_seq, self._gro_k, self._gro, self.loop.now_ns
        if not k:
            return
        self._gro_k = 0
        full, rest = divmod(k, g)
        if full == 0 and rest + self._pending < 2:
            self._pending += rest
            self._arm_delack(now)
            return
        t0 = now + delay_ns
        at = [(seq + g * (j + 1), t0 + (j + 1) * spread_ns) for j in range(full)]
        if rest >= 2 or (rest == 1 and not full):
            at.append((seq + k, t0 + (full + 1) * spread_ns))
            self._pending = 0
        elif rest == 1:
            self._pending = 1
            self._arm_delack(now)
        else:
            self._pending = 0
        for ackno, t in at:
            self.loop.call_at(t, PRIO_MEDIUM, self._send_acks, ackno, 1, g)

    tcp.TcpConnection._gro_acks = gro_acks  # type: ignore[method-assign]


def _ack_step(k: int) -> None:
    """What-if: the simulator's receivers ack every ``k``-th segment (``ACK_STEP``, patched
    in this process only; needs ``COORP_PURE=1``), as ``_edca_ack_whatif.py``."""
    import coorp.sim.engine as engine
    import coorp.sim.tcp as tcp

    if not tcp.__file__ or not tcp.__file__.endswith(".py"):
        raise SystemExit("--ack-step needs COORP_PURE=1 (compiled constants cannot be patched)")
    tcp.ACK_STEP = k  # type: ignore[misc]
    engine.ACK_STEP = k  # type: ignore[misc]
    defaults = list(tcp.TcpConnection._send_acks.__defaults__ or ())
    defaults[-1] = k
    tcp.TcpConnection._send_acks.__defaults__ = tuple(defaults)


def sim_main(args: argparse.Namespace) -> dict[str, Any]:
    if args.ack_step != 2:
        _ack_step(args.ack_step)
    if args.ack_spread_us or args.ack_delay_us:
        _ack_spread(round(args.ack_spread_us * 1000), round(args.ack_delay_us * 1000))
    t0 = time.time()
    load0 = _load()
    seeds = [sim_seed(s, args.set, args.warmup, args.window) for s in range(1, args.seeds + 1)]
    for s in seeds:
        print(
            "sim",
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()}),
            flush=True,
        )
    spread = f", acks spread {args.ack_spread_us:g} us" if args.ack_spread_us else ""
    spread += f", acks {args.ack_delay_us:g} us late" if args.ack_delay_us else ""
    print(
        f"simulator, shared rings, everything best effort, --set {args.set or '-'}, "
        f"ack every {args.ack_step}{spread}; "
        f"{args.seeds} seeds, {time.time() - t0:.0f} s wall, load {load0:.1f} -> {_load():.1f}"
    )
    for k in seeds[0]:
        if k != "seed":
            print(f"  {k:22s} {_ci([float(s[k]) for s in seeds])}")
    return {"set": args.set, "seeds": seeds, "load": [load0, _load()]}


# -- the emulator --------------------------------------------------------------------------
_CWND = re.compile(r"\bcwnd:(\d+)")
_UNACKED = re.compile(r"\bunacked:(\d+)")
_CC = re.compile(r"^\s+(\w+) wscale", re.M)


#: Linux's TCP counters (``nstat``) per robot namespace, summed over a repetition, against
#: the simulator's ``fast_recoveries``, ``timeouts`` and ``retransmits`` over its run.
_NSTAT = {
    "fast_recoveries": "TcpExtTCPSackRecovery",
    "timeouts": "TcpExtTCPTimeouts",
    "retransmits": "TcpRetransSegs",
    "loss_probes": "TcpExtTCPLossProbes",
    "probe_recoveries": "TcpExtTCPLossProbeRecovery",
    "undos": "TcpExtTCPFullUndo",
    "partial_undos": "TcpExtTCPPartialUndo",
    "dsack_undos": "TcpExtTCPDSACKUndo",
    "spurious_rtos": "TcpExtTCPSpuriousRTOs",
    # CUBIC's HyStart ending slow start without a loss (ack train or delay), and the
    # windows it ended them at (summed)
    "hystart_train": "TcpExtTCPHystartTrainDetect",
    "hystart_delay": "TcpExtTCPHystartDelayDetect",
    "hystart_train_cwnd": "TcpExtTCPHystartTrainCwnd",
    "hystart_delay_cwnd": "TcpExtTCPHystartDelayCwnd",
}


def _hystart(tcp: dict[str, int]) -> dict[str, float]:
    """The run's HyStart exits and their mean window (the simulator's ``Cubic`` counts
    the same: ``hystart_exits``, ``hystart_cwnd``)."""
    n = tcp["hystart_train"] + tcp["hystart_delay"]
    cwnd = tcp["hystart_train_cwnd"] + tcp["hystart_delay_cwnd"]
    return {"run_hystart_exits": n, "run_hystart_cwnd": cwnd / n if n else float("nan")}


def _nstat(net: Any, hosts: list[str]) -> dict[str, int]:
    """The robots' TCP counters of :data:`_NSTAT`, summed (absolute: ``nstat -az``)."""
    out = dict.fromkeys(_NSTAT, 0)
    for h in hosts:
        got = subprocess.run(
            ["ip", "netns", "exec", net.ns(h), "nstat", "-azj", *_NSTAT.values()],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        kernel = json.loads(got or "{}").get("kernel", {})
        for key, name in _NSTAT.items():
            out[key] += int(kernel.get(name, 0))
    return out


def _sample_hosts(net: Any, hosts: list[str], stop: threading.Event, out: list[Any]) -> None:
    """Every second: the upload's cwnd and unacked segments (``ss -ti``) and the TUN
    interface's qdisc (``tc -s qdisc``) in each robot's namespace."""
    while not stop.wait(1.0):
        for h in hosts:
            ns = net.ns(h)
            ss = subprocess.run(
                ["ip", "netns", "exec", ns, "ss", "-tin", "dport", "= :9000"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            cw = [int(x) for x in _CWND.findall(ss)]
            un = [int(x) for x in _UNACKED.findall(ss)]
            tc = subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            out.append(
                {
                    "host": h,
                    "t": time.monotonic(),
                    "cwnd": max(cw, default=0),
                    "unacked": max(un, default=0),
                    "tc": tc,
                    "ss": ss,
                }
            )


def _in_window(mine: list[dict[str, Any]], start: float, window: float) -> list[dict[str, Any]]:
    """The ``ss`` samples of one repetition in its window (``time.monotonic()`` seconds:
    the loop's and the bulk's window, ``start`` to ``start + window``)."""
    return [s for s in mine if start <= s["t"] <= start + window]


def _frames(trace: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq  # the parquet extra, which make native installs

    t = pq.read_table(trace / "frames.parquet")
    return {k: t.column(k).to_numpy() for k in t.column_names}


def trace_queues(trace: Path, windows: list[tuple[int, int]], ap: int) -> list[dict[str, Any]]:
    """Per window: packets in the AP's and the robots' queues (kernel queue, ring and the
    frame on the air: enqueued, not yet delivered or lost), every 10 ms; the AP's small
    frames (acks) apart; the commands' sojourn at the AP and the share the channel alone
    made miss; kernel-queue drops; the emulator's frame lag."""
    f = _frames(trace)
    import pyarrow.parquet as pq

    w = pq.read_table(trace / "writes.parquet", columns=["delivered_ns", "lag_ns"])
    w_at = w.column("delivered_ns").to_numpy()
    w_lag = np.maximum(w.column("lag_ns").to_numpy(), 0)
    src, size = np.asarray(f["src"]), np.asarray(f["bytes"])
    enq, done, outc = np.asarray(f["enq_ns"]), np.asarray(f["done_ns"]), np.asarray(f["outcome"])
    out = []
    for a, b in windows:
        grid = np.arange(a, b, SAMPLE_NS)

        def series(sel: Any, grid: Any = grid) -> Any:
            e = np.sort(enq[sel])
            d = np.sort(done[sel])
            return np.searchsorted(e, grid, "right") - np.searchsorted(d, grid, "right")

        def occ(sel: Any) -> float:
            return float(series(sel).mean())

        queued = outc != 2
        in_w = (enq >= a) & (enq < b)
        cmd_all = (src == ap) & (size > 200) & (size < 1400) & in_w
        cmd = cmd_all & queued
        soj = (done - enq)[cmd_all]
        dropped = outc[cmd_all] == 2
        wl = (w_at >= a) & (w_at < b)
        robots = [s for s in np.unique(src) if s != ap and s >= 0]
        robot_series = np.concatenate([series((src == s) & queued) for s in robots])
        tail = (src != ap) & (size == PERCEPTION_TAIL_BYTES) & in_w
        tail_soj = np.where(outc[tail] == 2, np.inf, (done - enq)[tail])
        out.append(
            {
                "ap_queue": occ((src == ap) & queued),
                "ap_acks_queue": occ((src == ap) & (size <= 100) & queued),
                "robot_queue": float(np.mean([occ((src == s) & queued) for s in robots])),
                "robot_queue_p50": float(np.percentile(robot_series, 50)),
                "robot_queue_p90": float(np.percentile(robot_series, 90)),
                "robot_queue_p95": float(np.percentile(robot_series, 95)),
                "loss_episodes": _episodes(
                    [np.sort(enq[(src == s) & (outc == 2) & in_w]) for s in robots]
                ),
                # A perception's last fragment (its 284-byte tail) waits behind the
                # others: its sojourn is the message's time on the channel.
                "perception_channel_miss": float((tail_soj > 33e6).mean())
                if tail_soj.size
                else None,
                "command_sojourn_p50_ms": float(np.percentile((done - enq)[cmd], 50) / 1e6)
                if cmd.any()
                else None,
                "command_sojourn_p99_ms": float(np.percentile((done - enq)[cmd], 99) / 1e6)
                if cmd.any()
                else None,
                # The channel's share of the commands' misses: dropped at the AP's
                # queue or delivered > 33 ms after they entered it (the middleware's
                # repairs and the hosts' time come on top in the measured misses).
                "command_channel_miss": float((dropped | (soj > 33e6)).mean())
                if cmd_all.any()
                else None,
                "command_queue_drops": float(dropped.mean()) if cmd_all.any() else None,
                # The emulator's frame lag in this window (real time held: p99 <= 1 ms).
                "frame_lag_p99_ms": float(np.percentile(w_lag[wl], 99) / 1e6) if wl.any() else None,
                "frames_late": float((w_lag[wl] > 1_000_000).mean()) if wl.any() else None,
                "queue_drops_ap": int(((src == ap) & (outc == 2) & in_w).sum()),
                "queue_drops_robots": int(((src != ap) & (outc == 2) & in_w).sum()),
                "ack_ratio": float(
                    ((src != ap) & (size >= 1400) & in_w).sum()
                    / max(((src == ap) & (size <= 100) & in_w).sum(), 1)
                ),
            }
        )
    return out


def _dir_miss(row: dict[str, Any], key: str) -> float:
    """One direction's misses in one run: late (> 33 ms) or never received."""
    lat = row.get(key, [])
    expected = row["ls_expected"] / 2
    late = sum(1 for x in lat if x > 33.0)
    return (late + max(expected - len(lat), 0)) / expected if expected else float("nan")


def emu_main(args: argparse.Namespace) -> dict[str, Any]:
    import transparent as tb

    targs = argparse.Namespace(
        robots=4,
        duration=args.window,
        warmup=args.warmup,
        seed=1,
        medium="wifi",
        scenario="crl-5",
        ring="shared",
        rate_mbit=0.0,
        ls_rt_priority=None,
        agent_rt_priority=4,
        timeslice_ms=5000.0,
        agent_scheduling="nice:-10",
        cpu_hog=0,
        lead=3.0,
        emu_queue_packets=args.emu_queue_packets,
        emu_split_cpus=args.split_cpus,
        emu_gro=args.gro,
        sink_rt_priority=args.sink_rt,
    )
    rows: list[dict[str, Any]] = []
    samples: list[Any] = []
    spans: list[tuple[float, float]] = []
    load0 = _load()
    with tempfile.TemporaryDirectory(prefix="coorp-gap-") as tmp:
        targs.emu_trace = args.trace or Path(tmp) / "trace"
        with tb.network(targs, "wifi") as net:
            # --no-sack: Linux's NewReno recovery, the simulator's without [tcp] sack;
            # --no-rack: SACK's scoreboard alone decides losses, as the simulator's with it
            extra = ["net.ipv4.tcp_sack=0"] * args.no_sack + [
                "net.ipv4.tcp_recovery=0"
            ] * args.no_rack
            net.create(sysctls=tb.WIFI_SYSCTLS + extra)
            if args.cc:
                tb.route_congestion_control(net, args.cc, quickack=args.quickack)
            t_start = time.monotonic()
            started_at = net.started_at or t_start  # the emulator's zero (monotonic s)
            qdisc = {
                h: subprocess.run(
                    ["ip", "netns", "exec", net.ns(h), "tc", "qdisc", "show"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
                for h in ("ld", "r1")
            }
            txq = subprocess.run(
                ["ip", "netns", "exec", net.ns("r1"), "ip", "link", "show", "eth0"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            for rep in range(args.repetitions):
                stop = threading.Event()
                th = threading.Thread(target=_sample_hosts, args=(net, ROBOTS, stop, samples))
                th.start()
                t0 = time.monotonic()
                tcp0 = _nstat(net, ROBOTS)
                row = tb.measure(net, Path(tmp), targs, app=args.app, mode="none", medium="wifi")
                tcp1 = _nstat(net, ROBOTS)
                t1 = time.monotonic()
                row["linux_tcp"] = {k: tcp1[k] - tcp0[k] for k in tcp0}
                stop.set()
                th.join()
                spans.append((t0, t1))
                rows.append(row | {"repetition": rep})
                print(f"emu rep {rep}: {tb._line(rep, row)} (load {_load():.1f})", flush=True)
            # its traces are written as it stops: ~10 s per repetition on 2 cores
            report = net.stop(timeout_s=60.0 + 20.0 * args.repetitions).data
        if args.json is not None:  # the runs, kept before the trace is read
            args.json.with_suffix(".runs.json").write_text(
                json.dumps(
                    {
                        "rows": [tb._without_samples(r) for r in rows],
                        "spans": spans,
                        "samples": samples,
                    },
                    default=str,
                )
            )
        # The window of each run in emulator time: the loop's and the bulk's (from the
        # run's start_at_ns), and how long after its uploads started (their active span:
        # over 500 frames of >= 1400 bytes from the robots per 100 ms, the loop alone
        # sends ~110), which the simulator's --warmup should be.
        ap_idx = 0
        f = _frames(targs.emu_trace)
        src, size, enq = np.asarray(f["src"]), np.asarray(f["bytes"]), np.asarray(f["enq_ns"])
        bins = np.bincount((enq[(src != ap_idx) & (size >= 1400)] // 100_000_000).astype(int))
        active = np.flatnonzero(bins > 500)
        starts = [int(active[0])] + [int(x) for i, x in enumerate(active[1:]) if x - active[i] > 10]
        windows = [
            (
                round(row["start_at_ns"] - started_at * 1e9),
                round(row["start_at_ns"] - started_at * 1e9 + args.window * 1e9),
            )
            for row in rows
        ]
        after = [
            next((a / 1e9 - s0 / 10 for s0 in reversed(starts) if s0 / 10 <= a / 1e9), math.nan)
            for a, _ in windows
        ]
        del t_start
        queues = trace_queues(targs.emu_trace, windows, ap_idx)
        import pyarrow.parquet as pq

        x = pq.read_table(targs.emu_trace / "exchanges.parquet").to_pydict()
        ex = [
            (t, col, tuple(st.split(",")), tuple(int(v) for v in m.split(",")))
            for t, col, st, m in zip(
                x["start_ns"], x["collided"], x["stations"], x["mpdus"], strict=True
            )
        ]
        for q, (a, b) in zip(queues, windows, strict=True):
            q.update(_ap_exchanges(ex, "leader", a, b))
    per_rep = []
    for row, q, (t0, t1), lead in zip(rows, queues, spans, after, strict=False):
        mine = [s for s in samples if t0 <= s["t"] <= t1 and s["cwnd"] > 0]
        ccs = sorted({m for s in mine for m in _CC.findall(s["ss"])})
        mine = _in_window(mine, row["start_at_ns"] / 1e9, args.window)
        rec = {
            "ls_miss": tb.pooled([row])["ls_miss_rate"],
            "window_after_uploads_s": lead,
            "bulk_mbps": row["bulk_mbps"],
            "perception_miss": _dir_miss(row, "perception_ms"),
            "command_miss": _dir_miss(row, "command_ms"),
            "linux_cc": ",".join(ccs),
            "linux_cwnd": float(np.mean([s["cwnd"] for s in mine])) if mine else None,
            "linux_unacked": float(np.mean([s["unacked"] for s in mine])) if mine else None,
            # the robots' whole repetition (the uploads' warm-up and window, ~12 s)
            **{f"run_{k}": v for k, v in row["linux_tcp"].items() if "hystart" not in k},
            **_hystart(row["linux_tcp"]),
            **q,
        }
        per_rep.append(rec)
        print(
            "emu",
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()}),
            flush=True,
        )
    print(
        f"emulator, shared rings, {args.app} none, --emu-queue-packets "
        f"{args.emu_queue_packets}, {args.cc or 'host default'} TCP"
        f"{', quickack' * args.quickack}{', no SACK' * args.no_sack}{', no RACK' * args.no_rack}"
        f"{', CPUs not split' * (not args.split_cpus)}"
        f"{', GRO' if args.gro else ', frame by frame'}"
        f"{f', sink at SCHED_FIFO {args.sink_rt}' * bool(args.sink_rt)}; {args.repetitions} "
        f"repetitions, load {load0:.1f} -> {_load():.1f}"
    )
    for k in per_rep[0]:
        vals = [float(r[k]) for r in per_rep if isinstance(r[k], (int, float))]
        if vals:
            print(f"  {k:22s} {_ci(vals)}")
    print("qdisc (leader, r1):", json.dumps(qdisc), "\nr1 link:", txq.strip())
    print(
        "emulator:",
        report.get("verdict"),
        "frame lag",
        json.dumps(report.get("frame_lag")),
        "GRO writes",
        report.get("gro_writes"),
        "carrying",
        report.get("gro_frames"),
        "frames",
    )
    # The emulator's own cost over the whole emulation (CPU per frame written).
    keys = ("cpu_s", "cpu_system_s", "wall_s", "frames_in", "frames_out", "gro", "gro_writes",
            "gro_frames")  # fmt: skip
    cost = {k: report.get(k) for k in keys}
    if cost["cpu_s"] is not None and cost["frames_out"]:
        cost["cpu_us_per_frame"] = cost["cpu_s"] * 1e6 / cost["frames_out"]
        print(f"emulator CPU (tracing included): {cost['cpu_s']:.1f} s "
              f"({cost['cpu_system_s']:.1f} s kernel) in {cost['wall_s']:.0f} s, "
              f"{cost['cpu_us_per_frame']:.2f} µs per frame written")  # fmt: skip
    return {
        "repetitions": per_rep,
        "frame_lag": report.get("frame_lag"),
        "verdict": report.get("verdict"),
        "emulator": cost,
        "qdisc": qdisc,
        "link": txq,
        "load": [load0, _load()],
        "tc_last": [s["tc"] for s in samples[-4:]],
    }


#: Delivery bursts by size (data segments one exchange delivered at once): small, part
#: of an A-MPDU, most of one.
BURST_CLASSES = ((1, 8), (8, 32), (32, 1 << 30))


def ack_batches(frames: Path, leader: int = 0) -> dict[str, Any]:
    """How a TCP receiver acks what the air delivers in bursts, from an emulator's frames
    table (``--trace``): per station sending data (frames of >= 1000 bytes delivered to
    ``leader``), the data delivered at one instant (a burst, one exchange) and the acks
    (frames of <= 120 bytes from ``leader``) enqueued before the next burst — the
    simulator's ``[tcp] gro_segments`` is the segments per ack in a large burst."""
    import pyarrow.parquet as pq

    t = pq.read_table(frames, columns=["src", "final", "bytes", "outcome", "enq_ns", "done_ns"])
    d = {c: t.column(c).to_numpy() for c in t.column_names}
    per: list[dict[str, Any]] = []
    totals = np.zeros((len(BURST_CLASSES), 3))  # bursts, segments, acks
    first_ack: list[float] = []  # after a large burst: its first ack's delay, ns
    for src in sorted(set(d["src"].tolist()) - {leader, -1}):
        data = (d["src"] == src) & (d["final"] == leader) & (d["bytes"] >= 1000)
        data &= d["outcome"] == 0
        acks = (d["src"] == leader) & (d["final"] == src) & (d["bytes"] <= 120)
        if not data.any() or not acks.any():
            continue
        bursts, size = np.unique(d["done_ns"][data], return_counts=True)
        at = np.sort(d["enq_ns"][acks])
        k = np.searchsorted(at, bursts, side="left")
        n_acks = np.diff(np.append(k, len(at)))  # enqueued from this burst to the next
        big = (size >= BURST_CLASSES[-1][0]) & (n_acks > 0)
        first_ack += (at[np.minimum(k[big], len(at) - 1)] - bursts[big]).tolist()
        per_ack = float(size.sum() / max(n_acks.sum(), 1))
        row: dict[str, Any] = {"station": src, "bursts": len(bursts), "segments_per_ack": per_ack}
        for i, (lo, hi) in enumerate(BURST_CLASSES):
            sel = (size >= lo) & (size < hi)
            totals[i] += (sel.sum(), size[sel].sum(), n_acks[sel].sum())
            row[f"segments_per_ack_{lo}_{hi if hi < 1 << 30 else 'up'}"] = (
                float(size[sel].sum() / n_acks[sel].sum()) if n_acks[sel].sum() else None
            )
        per.append(row)
    classes = [
        {"burst": f"{lo}-{hi - 1}" if hi < 1 << 30 else f"{lo}+", "bursts": int(b),
         "segments": int(sg), "acks_per_burst": float(a / b) if b else None,
         "segments_per_ack": float(sg / a) if a else None}
        for (lo, hi), (b, sg, a) in zip(BURST_CLASSES, totals, strict=True)
    ]  # fmt: skip
    # The leader's acks in the order they reached its queue: runs to one receiver (what
    # the AP's shared ring can aggregate; a GRO receiver sends a burst's acks in one run).
    leader_acks = (d["src"] == leader) & (d["bytes"] <= 120)
    order = np.argsort(d["enq_ns"][leader_acks], kind="stable")
    dst = d["final"][leader_acks][order]
    runs = np.diff(np.flatnonzero(np.r_[True, dst[1:] != dst[:-1], True]))
    ack_runs = {
        "mean": float(runs.mean()) if len(runs) else None,
        "p50": float(np.median(runs)) if len(runs) else None,
        "share_in_runs_of_4_up": float(runs[runs >= 4].sum() / runs.sum()) if len(runs) else None,
    }
    delay = np.array(first_ack) / 1e3
    first_ack_us = (
        dict(zip(("p10", "p50", "p90"), np.percentile(delay, [10, 50, 90]).tolist(), strict=True))
        if len(delay)
        else None
    )
    return {"stations": per, "classes": classes, "ack_runs": ack_runs, "first_ack_us": first_ack_us}


def acks_main(args: argparse.Namespace) -> dict[str, Any]:
    out = ack_batches(args.frames, args.leader)
    r = out["ack_runs"]
    share = r["share_in_runs_of_4_up"]
    print(f"the leader's acks in queue order: runs to one receiver of {r['mean']:.2f} (median "
          f"{r['p50']:g}), {share:.0%} of acks in runs of 4 or more")  # fmt: skip
    if out["first_ack_us"]:
        f = out["first_ack_us"]
        print(f"the first ack after a burst of 32+: {f['p50']:.0f} us (p10 {f['p10']:.0f}, "
              f"p90 {f['p90']:.0f})")  # fmt: skip
    for c in out["classes"]:
        print(f"bursts of {c['burst']:>6} segments: {c['bursts']:6d} bursts, "
              f"{c['acks_per_burst'] or 0:.2f} acks each, {c['segments_per_ack'] or 0:.1f} "
              "segments per ack")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="side", required=True)
    s = sub.add_parser("sim")
    s.add_argument("--seeds", type=int, default=5)
    s.add_argument("--set", action="append", default=[], help="scenario override KEY=VALUE")
    s.add_argument("--ack-step", type=int, default=2, help="what-if: ack every K-th segment")
    s.add_argument(
        "--ack-spread-us",
        type=float,
        default=0.0,
        help="what-if (COORP_PURE=1): a GRO receiver's acks of one burst leave this far apart",
    )
    s.add_argument(
        "--ack-delay-us",
        type=float,
        default=0.0,
        help="what-if (COORP_PURE=1): a GRO receiver's acks of one burst leave this late",
    )
    e = sub.add_parser("emu")
    e.add_argument("--repetitions", type=int, default=5)
    e.add_argument("--app", default="dds", choices=("dds", "zenoh"))
    e.add_argument("--emu-queue-packets", type=int, default=1000)
    e.add_argument(
        "--cc",
        default="cubic",
        help="the namespaces' TCP congestion control (the simulator's uploads are "
        "cubic; '' keeps the host's default, bbr on this machine)",
    )
    e.add_argument(
        "--quickack",
        action="store_true",
        help="every receiver acks each segment at once (route option quickack 1); "
        "compare with the simulator's --ack-step 1",
    )
    e.add_argument(
        "--no-split-cpus",
        dest="split_cpus",
        action="store_false",
        help="the emulator not pinned, the receivers' stacks inside its writes (as before "
        "Emulation(split_cpus=True))",
    )
    e.add_argument(
        "--no-sack",
        action="store_true",
        help="the namespaces' TCP without SACK (so without RACK): loss recovery as the "
        "simulator's without [tcp] sack (NewReno)",
    )
    e.add_argument(
        "--no-rack",
        action="store_true",
        help="the namespaces' TCP with SACK but without RACK (net.ipv4.tcp_recovery=0): "
        "losses from the SACK scoreboard alone, as the simulator's with --set tcp.sack=true",
    )
    e.add_argument(
        "--gro",
        action=argparse.BooleanOptionalAction,
        default=GRO_DEFAULT,
        help="the receivers' stacks get each exchange's TCP segments coalesced as a NIC "
        "driver's GRO hands them (coorp emulate --gro, the default; compare with the "
        "simulator's --set tcp.gro_segments=45); --no-gro: one packet per frame",
    )
    e.add_argument(
        "--sink-rt",
        type=int,
        default=0,
        help="the leader's receiving program at this SCHED_FIFO priority (0: ordinary "
        "scheduling): it reads, and so acks, as soon as data is there",
    )
    e.add_argument("--trace", type=Path, default=None, help="keep the emulator's traces here")
    k = sub.add_parser("acks", help="the receivers' acks per delivered burst, from a trace")
    k.add_argument("frames", type=Path, help="frames.parquet of an emu --trace folder")
    k.add_argument("--leader", type=int, default=0, help="the receiving station's index")
    k.add_argument("--json", type=Path, default=None)
    s.add_argument(
        "--warmup",
        type=float,
        default=STEADY_WARMUP_S + 2.2,
        help="the window starts this long after the uploads, as the emulated one does: "
        "transparent.py starts the loop's window its warm-up + 3 s (its lead) after "
        "launching the programs, the uploads' first segments leave ~0.8 s after the launch "
        "(`emu`'s window_after_uploads_s: 32.27 ± 0.09 s over 12 repetitions with "
        "`emu --warmup 30`, 4.24 ± 0.03 s over 36 with 2: then use 4.2)",
    )
    e.add_argument(
        "--warmup",
        type=float,
        default=STEADY_WARMUP_S,
        help="transparent.py's --warmup: the loop's window starts this + ~2.2 s after the "
        "uploads (30: CUBIC's first epochs, which last ~10 s at these windows, are over; "
        "2: the start-up, where the hosts' HyStart and the simulator's differ)",
    )
    for p in (s, e):
        p.add_argument("--window", type=float, default=10.0)
        p.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.side == "emu" and args.quickack and not args.cc:
        ap.error("--quickack needs --cc (both are options of the routes)")
    mains = {"sim": sim_main, "emu": emu_main, "acks": acks_main}
    out = mains[args.side](args)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
