"""The simulation: builds stations, links and the channel from a scenario, drives traffic.

:class:`Simulation` is also the API the workload layer and the policies use: create flows,
send datagram messages, start bulk transfers, install driver hooks, schedule callbacks.
Randomness comes from one ``numpy.random.SeedSequence`` per run, split into independent
streams (one per station's backoff, one per traffic flow, one for packet errors), so two
policies run with the same seed see the same traffic.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from coorp._accel import mypyc_attr
from coorp._errors import UsageError
from coorp.scenario import (
    AccessCategory,
    AmpduGrouping,
    BulkFlow,
    DatagramFlow,
    HwQueueMode,
    RtoEstimator,
    Scenario,
    TcpSender,
    parse_scenario,
)
from coorp.sim.congestion import CONGESTION_CONTROLS, Cubic, TcpParams
from coorp.sim.driver import AdmitAll, DriverHooks
from coorp.sim.events import PRIO_CONTROL, PRIO_TRAFFIC, Event, EventLoop
from coorp.sim.links import LinkTable
from coorp.sim.mac import Channel, Receiver
from coorp.sim.packets import IP_HEADER_BYTES, TCP_ACK_BYTES, FlowState, Message, Packet
from coorp.sim.results import SimResult
from coorp.sim.station import BulkTransfer, Station
from coorp.sim.tcp import ACK_STEP, TcpConnection
from coorp.sim.timing import ExchangeTiming, edca_params
from coorp.units import NS_PER_US, s

__all__ = ["Simulation", "simulate"]

_UDP_HEADER_BYTES: Final = 8
#: numpy's generator and bit generator classes (final names: C statics when compiled).
_GENERATOR: Final = np.random.Generator
_PCG64: Final = np.random.PCG64


@mypyc_attr(allow_interpreted_subclasses=True)
class Simulation(Receiver):
    """One run of one scenario with one seed."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        source: str = "<scenario>",
        trace: bool = False,
    ) -> None:
        self.scenario = scenario
        #: ``scenario.packet_bytes``, read per message (a model's field: a dict lookup).
        self._packet_bytes = scenario.packet_bytes
        self.seed = scenario.seed if seed is None else seed
        if self.seed < 0:
            raise UsageError(f"seed must be >= 0, got {self.seed}")
        self.loop = EventLoop()
        # A scenario built without validation (model_construct, model_copy(update=...))
        # is checked here like a loaded one: the simulator never runs one that would not
        # load (ScenarioError naming ``source``).
        parse_scenario(scenario.model_dump(), source=source)
        edca = edca_params(scenario.mac)
        self.timing = ExchangeTiming(scenario.phy, ba_window=scenario.mac.max_ampdu_mpdus)
        self.links = LinkTable(scenario, source)
        self._seeds = np.random.SeedSequence(self.seed)
        self.channel = Channel(
            self.loop, self.timing, scenario.mac, self.links,
            rng=self._py_rng("packet-errors"),
            receiver=self, trace=trace,
        )  # fmt: skip
        self._pid = 0
        self.stations: dict[str, Station] = {}
        for i, cfg in enumerate(scenario.stations):
            st = Station(
                i, cfg.name, cfg.position_m, loop=self.loop, mode=scenario.hw_queue.mode,
                capacity=scenario.hw_queue.capacity_packets, edca=edca,
                packet_bytes=scenario.packet_bytes,
                rng=self._py_rng(f"backoff:{cfg.name}"),
            )  # fmt: skip
            st.channel = self.channel
            st.bulk_burst = scenario.mac.max_ampdu_mpdus
            st.kernel_limit = scenario.hw_queue.kernel_queue_packets or 0
            st.fifo = scenario.hw_queue.kernel_queue_fifo
            st.group_ls = (
                scenario.mac.ampdu_grouping is AmpduGrouping.PER_RECEIVER_TID
                and scenario.hw_queue.mode is HwQueueMode.SHARED
            )
            st._alloc_pids = self._alloc_pids
            self.stations[cfg.name] = st
        #: Every contention domain's medium (one without ``[fleet]``).
        self.channels: list[Channel] = [self.channel]
        #: A fleet's cells and moving robots (``coorp.sim.cells``: contention domains,
        #: associations, hand-overs), or None for one BSS.
        self.cells: Any = None
        self.motion: Any = None
        if scenario.fleet is not None:
            self._build_cells(trace)
        self.flows: dict[str, FlowState] = {}
        #: Generated TCP-ack flows: name -> the bulk flow they acknowledge.
        self._ack_flows: dict[str, str] = {}
        self.messages: list[Message] = []
        self.wall_s = 0.0
        #: TCP connections by bulk flow name (``[tcp] sender``; none without the model).
        self.tcp: dict[str, TcpConnection] = {}
        self._tcp_params: TcpParams | None = None
        self._trace = trace
        tcp = scenario.tcp
        if tcp.sender is not TcpSender.NONE:
            self._tcp_params = TcpParams(
                initial_window=tcp.initial_window_segments,
                receive_window_bytes=tcp.receive_window_bytes,
                delayed_ack_ns=round(tcp.delayed_ack_us * NS_PER_US),
                initial_rto_ns=round(tcp.initial_rto_us * NS_PER_US),
                min_rto_ns=round(tcp.min_rto_us * NS_PER_US),
                max_rto_ns=round(tcp.max_rto_us * NS_PER_US),
                granularity_ns=round(tcp.clock_granularity_us * NS_PER_US),
                slow_start_after_idle=tcp.slow_start_after_idle,
                quickacks=tcp.quickacks,
                gro_segments=tcp.gro_segments,
                sack=tcp.sack,
                rto_linux=tcp.rto_estimator is RtoEstimator.LINUX,
                loss_probe=tcp.loss_probe,
                comp_sack_nr=tcp.comp_sack_nr,
            )
        for f in scenario.flows:
            self._install(f)

    def _build_cells(self, trace: bool) -> None:
        from coorp.sim.cells import Cells, Motion

        self.cells = Cells(self, self._py_rng, trace=trace)
        self.channels = list(self.cells.channels.values())
        self.motion = Motion(self, self.cells)
        self.motion.begin()

    # -- randomness ----------------------------------------------------------------------
    def _stream_seed(self, name: str) -> int:
        # Streams are keyed by name, not creation order, so adding a flow to a scenario
        # does not change the random numbers every other flow sees.
        key = [ord(c) for c in name]
        return int(np.random.SeedSequence([self.seed, *key]).generate_state(2, np.uint64)[0])

    def _py_rng(self, name: str) -> random.Random:
        return random.Random(self._stream_seed(name))

    def rng(self, name: str) -> np.random.Generator:
        """An independent numpy generator for ``name`` (e.g. a workload's jitter).

        ``Generator(PCG64(seed))``: what ``np.random.default_rng(seed)`` makes, without
        its argument dispatch (two thirds of its cost; a fleet makes two per robot)."""
        return _GENERATOR(_PCG64(self._stream_seed(name)))

    def _next_pid(self) -> int:
        self._pid += 1
        return self._pid

    def _alloc_pids(self, k: int) -> int:
        """``k`` consecutive packet ids; returns the first."""
        first = self._pid + 1
        self._pid += k
        return first

    # -- API for workloads and policies ---------------------------------------------------
    @property
    def now_ns(self) -> int:
        return self.loop.now_ns

    def station(self, name: str) -> Station:
        try:
            return self.stations[name]
        except KeyError:
            raise UsageError(
                f"unknown station {name!r}; stations: {sorted(self.stations)}"
            ) from None

    def set_hooks(self, station: str, hooks: DriverHooks) -> None:
        self.station(station).hooks = hooks

    def flow(
        self,
        name: str,
        src: str,
        dst: str,
        ac: AccessCategory,
        *,
        bulk: bool,
        tcp_acks: bool = True,
        repair_ns: int | None = None,
    ) -> FlowState:
        """Get or create the flow ``name`` from ``src`` to ``dst``.

        ``repair_ns`` (datagram flows): the messages travel on a reliable transport that
        resends a fragment the MAC dropped about ``repair_ns`` after the drop (a
        NACK-driven repair, as DDS RELIABLE does); ``None``: best effort, a dropped
        fragment loses its message. The delay is drawn uniformly from [repair_ns / 2,
        3 repair_ns / 2], like the randomised response delays of real transports:
        stations that lost fragments in one collision must not all repair in the same
        slot and collide again, forever.
        """
        f = self.flows.get(name)
        if f is not None:
            self._check_same_flow(f, src, dst, ac, bulk)
            return f
        ack_name = f"{name}:ack"
        if bulk and tcp_acks and ack_name in self.flows:
            raise UsageError(
                f"bulk flow {name!r} with TCP acks: its ack flow would be named {ack_name!r}, "
                "which is already a flow; rename one of them (or pass tcp_acks=False)"
            )
        f = FlowState(name, self.station(src), self.station(dst), ac, bulk)
        if repair_ns is not None:
            if bulk or repair_ns < 0:
                raise UsageError(
                    f"flow {name!r}: repair_ns={repair_ns} needs a datagram flow and >= 0"
                )
            f.repair_ns = repair_ns
            f.repair_rng = self._py_rng(f"repair:{name}")
        self.flows[name] = f
        if bulk and tcp_acks:
            ack = FlowState(ack_name, f.dst, f.src, AccessCategory.BE, bulk=False)
            f.ack_flow = ack
            f.ack_every = ACK_STEP
            ack.gate_acks = True
            self.flows[ack_name] = ack
            self._ack_flows[ack_name] = name
            if self._tcp_params is not None:
                self._connect(f, ack, self._tcp_params)
        return f

    def _connect(self, f: FlowState, ack: FlowState, params: TcpParams) -> None:
        """A TCP connection for bulk flow ``f`` (the TCP model is on)."""
        sender = self.scenario.tcp.sender
        cc = Cubic(self.scenario.tcp.hystart) if sender is TcpSender.CUBIC else None
        conn = TcpConnection(
            f, ack, params, cc if cc is not None else CONGESTION_CONTROLS[sender.value](),
            loop=self.loop, packet_bytes=self.scenario.packet_bytes,
            alloc_pids=self._alloc_pids, trace=self._trace,
        )  # fmt: skip
        f.tcp = ack.tcp = conn
        self.tcp[f.name] = conn

    def _check_same_flow(
        self, f: FlowState, src: str, dst: str, ac: AccessCategory, bulk: bool
    ) -> None:
        """``flow()`` returns an existing flow only if it is the one asked for."""
        owner = self._ack_flows.get(f.name)
        if owner is not None:
            raise UsageError(
                f"flow {f.name!r} is the TCP-ack flow of bulk flow {owner!r}; choose another name"
            )
        if (f.src.name, f.dst.name, f.ac, f.bulk) != (src, dst, ac, bulk):
            kind = "bulk" if f.bulk else "datagram"
            raise UsageError(
                f"flow {f.name!r} already exists as a {kind} flow {f.src.name} -> "
                f"{f.dst.name} in {f.ac.value}; asked for "
                f"{'bulk' if bulk else 'datagram'} {src} -> {dst} in {ac.value}"
            )

    def call_at(self, time_ns: int, callback: Callable[..., Any], *args: Any) -> Event:
        return self.loop.schedule(time_ns, PRIO_TRAFFIC, callback, args)

    def call_control_at(self, time_ns: int, callback: Callable[..., Any], *args: Any) -> Event:
        return self.loop.schedule(time_ns, PRIO_CONTROL, callback, args)

    def send_message(
        self,
        flow: FlowState,
        size_bytes: int,
        on_delivered: Callable[[Message], None] | None = None,
    ) -> Message:
        """Hand a datagram message to ``flow.src`` now: UDP/IP fragments, LS path."""
        per_frag = self._packet_bytes - IP_HEADER_BYTES
        total = size_bytes + _UDP_HEADER_BYTES
        n = max(1, -(-total // per_frag))  # (math.ceil of the quotient, in integers)
        msg = Message(len(self.messages), flow, size_bytes, self.loop.now_ns, n, on_delivered)
        self.messages.append(msg)
        packets = []
        for k in range(n):
            body = per_frag if k < n - 1 else total - per_frag * (n - 1)
            packets.append(Packet(self._next_pid(), flow, body + IP_HEADER_BYTES, message=msg))
        flow.sent_packets += n
        st = flow.src
        hooks = st.hooks
        if type(hooks) is not AdmitAll:  # (plain EDCA's hears nothing: no call per send)
            hooks.on_ls_send(st, flow.name, self.loop.now_ns)
        st.send_ls(packets)
        return msg

    def send_packet(
        self,
        flow: FlowState,
        ip_bytes: int,
        on_delivered: Callable[[Message], None] | None = None,
        on_lost: Callable[[Message], None] | None = None,
        handle: int = -1,
    ) -> Message:
        """Hand one IP packet of ``ip_bytes`` to ``flow.src`` now, as it is (one MPDU,
        no fragmentation): the priority queue of its category, then the NIC ring.

        For packets from outside the model (``coorp.emulate``: real programs' packets).
        The packet is a message of one fragment: ``on_delivered`` when its MPDU is
        acknowledged, ``on_lost`` when the MAC drops it; ``handle`` becomes its
        ``msg_id``. Unlike :meth:`send_message` it is not kept in ``messages`` (an
        emulator sends millions) and the station's hooks do not hear of it as a
        periodic LS send.
        """
        if not 0 < ip_bytes <= self.scenario.packet_bytes:
            raise UsageError(
                f"send_packet: ip_bytes = {ip_bytes}; allowed: 1 to the scenario's "
                f"packet_bytes ({self.scenario.packet_bytes})"
            )
        msg = Message(handle, flow, ip_bytes, self.loop.now_ns, 1, on_delivered)
        msg.on_lost = on_lost
        flow.sent_packets += 1
        flow.src.send_ls([Packet(self._next_pid(), flow, ip_bytes, message=msg)])
        return msg

    def start_transfer(
        self,
        flow: FlowState,
        total_bytes: int | None,
        on_complete: Callable[[BulkTransfer, int], None] | None = None,
        gated: bool = True,
    ) -> BulkTransfer:
        """Start a bulk transfer on ``flow`` (``None`` bytes: saturating, never ends).

        ``gated = False``: traffic the station's driver hooks do not coordinate; it
        never asks them and their pauses do not hold it (``BulkTransfer.gated``).
        """
        if not flow.bulk:
            raise UsageError(f"flow {flow.name!r} is not a bulk flow")
        if not gated and flow.ack_flow is not None:
            flow.ack_flow.gate_acks = False  # traffic outside the team: its acks too
        t = BulkTransfer(flow, total_bytes, on_complete, gated)
        if flow.tcp is not None:
            flow.tcp.add_transfer(t, self.loop.now_ns)  # its window decides when
        else:
            flow.src.add_transfer(t)
        return t

    # -- delivery ------------------------------------------------------------------------
    def delivered(self, p: Packet, pid: int, k: int, now: int) -> None:
        """Packets ``pid .. pid + k - 1`` of run ``p`` were acknowledged at ``now``.

        Equivalent to delivering them one by one: a batch is cut wherever a transfer's
        completion callback must run, and TCP acknowledgements go out as one run unless
        the receiver's hooks watch every packet one call at a time (then one by one, as
        individual sends). Hooks that take runs (``RunHooks``) get them as one run: it
        changes nothing, since between two refills the receiver's driver admits no bulk
        packet (every refill ends with its bulk queue empty, paused or its ring full,
        and whatever changes that refills at once), so nothing would have come between
        the acknowledgements sent one by one.
        """
        f = p.flow
        conn = f.tcp
        if conn is not None:
            if not f.bulk:
                conn.on_acks(p, pid, k, now)
            elif f.ack_flow is not None and f.dst.per_packet and f.dst.run_hooks is None:
                for q in range(pid, pid + k):  # acknowledged one by one, as below
                    conn.on_data(p, q, 1, now)
            else:
                conn.on_data(p, pid, k, now)
            return
        size = p.ip_bytes
        msg = p.message
        if msg is not None:
            f.delivered_packets += 1
            f.delivered_bytes += size
            msg.remaining -= 1
            if msg.remaining == 0 and not msg.lost:
                msg.delivered_ns = now
                # Called once: dropped now, so that what it holds (a fleet's callbacks
                # are partials holding loop records) is freed at once, not kept with the
                # message table to the end of the run (a smaller, warmer heap).
                cb = msg.on_delivered
                msg.on_delivered = msg.on_lost = None
                if cb is not None:
                    cb(msg)
            return
        t = p.transfer
        if not isinstance(t, BulkTransfer):
            f.delivered_packets += k
            f.delivered_bytes += k * size
            return
        ack = f.ack_flow
        if ack is not None and ack.src.per_packet and ack.src.run_hooks is None:
            for _ in range(k):
                self._delivered_bulk(f, t, size, 1, now)
            return
        if t.on_complete is None or t.total_bytes is None:
            self._delivered_bulk(f, t, size, k, now)
            return
        while k:
            # Deliver up to the packet that completes the transfer; the callback runs
            # after it (and after every later one, as one by one).
            need = t.total_bytes - t.delivered_bytes
            n = 1 if need <= 0 else min(k, -(-need // size)) if size > 0 else k
            self._delivered_bulk(f, t, size, n, now)
            k -= n

    def _delivered_bulk(self, f: FlowState, t: BulkTransfer, size: int, n: int, now: int) -> None:
        f.delivered_packets += n
        f.delivered_bytes += n * size
        t.delivered_bytes += n * size
        ack = f.ack_flow
        if ack is not None:
            every = f.ack_every
            u = f.unacked + n
            m = u // every
            f.unacked = u - m * every
            if m:
                ack.sent_packets += m
                ack.src.send_ls([Packet(self._alloc_pids(m), ack, TCP_ACK_BYTES, count=m)])
        total = t.total_bytes
        if total is not None and t.delivered_bytes >= total and t.on_complete is not None:
            t.on_complete(t, now)

    def dropped(self, p: Packet, now: int) -> None:
        msg = p.message
        if msg is not None:
            f = p.flow
            if f.repair_rng is not None:
                # Not a periodic send: the policy's on_ls_send hook does not see it.
                f.retransmitted_packets += 1
                f.sent_packets += 1
                again = Packet(self._next_pid(), f, p.ip_bytes, message=msg)
                r = f.repair_ns
                delay = r // 2 + f.repair_rng.randint(0, r)
                self.call_at(now + delay, f.src.send_ls, [again])
            elif not msg.lost:
                msg.lost = True
                cb = msg.on_lost  # called once, dropped (as on delivery)
                msg.on_delivered = msg.on_lost = None
                if cb is not None:
                    cb(msg)
        elif p.bulk:
            conn = p.flow.tcp
            if conn is None:
                p.src.requeue_bulk_bytes(p)  # no TCP model: the bytes are sent again
            else:  # the segment is lost: its sender finds out from the ACKs
                conn.on_mac_drop(p.pid - 1, now)  # the MAC has moved p.pid past it
            p.src.refill()

    # -- scenario traffic -----------------------------------------------------------------
    def _install(self, f: DatagramFlow | BulkFlow) -> None:
        start = round(f.start_us * NS_PER_US)
        if isinstance(f, BulkFlow):
            flow = self.flow(f.name, f.src, f.dst, f.category, bulk=True, tcp_acks=f.tcp_acks)
            self.call_at(start, self.start_transfer, flow, f.total_bytes)
            return
        flow = self.flow(f.name, f.src, f.dst, f.category, bulk=False)
        if f.times_us is not None:
            for t_us in sorted(f.times_us):
                self.call_at(round(t_us * NS_PER_US), self.send_message, flow, f.size_bytes)
            return
        assert f.period_us is not None
        period = round(f.period_us * NS_PER_US)
        jitter = round(f.jitter_us * NS_PER_US)
        rng = self.rng(f"flow:{f.name}")
        self.call_at(start, self._periodic, flow, f.size_bytes, start, period, jitter, rng, 0)

    def _periodic(
        self, flow: FlowState, size: int, start: int, period: int, jitter: int,
        rng: np.random.Generator, k: int,
    ) -> None:  # fmt: skip
        self.send_message(flow, size)
        now = self.loop.now_ns
        nominal = start + (k + 1) * period
        t = nominal + (round(rng.normal(0.0, jitter)) if jitter else 0)
        self.call_at(max(t, now), self._periodic, flow, size, start, period, jitter, rng, k + 1)

    # -- running -------------------------------------------------------------------------
    def run(
        self, duration_ns: int | None = None, on_progress: Callable[[int], None] | None = None
    ) -> SimResult:
        """Run until ``duration_ns`` (default: the scenario's duration) and collect results."""
        until = s(self.scenario.duration_s) if duration_ns is None else duration_ns
        if until <= 0:
            raise UsageError(f"duration must be > 0 ns, got {until}")
        t0 = time.perf_counter()
        # What exists before the run (the interpreter's imports, the scenario, the
        # set-up) outlives it: the cyclic collector need not walk all of it again at
        # each full collection during the run (one walked the whole heap: up to a
        # tenth of a gated policy's run). Not where the process froze objects itself.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            self.loop.run(until, on_progress)
        finally:
            if freeze:
                gc.unfreeze()
        self.wall_s = time.perf_counter() - t0
        return SimResult.collect(self, until)


def simulate(
    scenario: Scenario,
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    trace: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> SimResult:
    """Build and run one simulation; the one-call API."""
    return Simulation(scenario, seed=seed, trace=trace).run(duration_ns, on_progress)
