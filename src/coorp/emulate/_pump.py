"""The real-time loop: TUN interfaces in, the emulated channel, TUN interfaces out.

One thread, no busy wait. Each turn it advances the channel to the wall clock (the
simulator's time is the wall clock since the start), writes every frame the channel
delivered by then to its receiver's interface, then sleeps in ``select`` until the
channel's next event is due or a station's interface has packets; packets enter the channel
at the instant of the read pass that got them. Reads go in passes of ``batch`` packets
per interface, each pass stamped with its own instant and preceded by the deliveries
due, until the interfaces are drained, the next event is due or ``read_budget_ns`` is
spent (a TUN device gives one packet per ``read``). With ``gro`` (the default of
:class:`~coorp.emulate.Emulation`) the interfaces carry ``virtio_net_hdr``: a read loses
its header, and the frames one instant delivers to one station are written as a NIC
driver's GRO would hand them up, a flow's in-order TCP segments as one GSO packet
(``coorp.emulate._gro``), so a receiver's stack runs once per super-segment, not once
per frame.

Why this path (docs/emulate.md has the numbers): the channel itself costs 3-5 µs of CPU
per frame; a ``read`` and a ``write`` on a TUN device cost 2-6 µs each from Python, so
at the rates a 20 MHz channel carries (5-6 k frames/s) the loop needs a few percent of
a core, and at 80 MHz 2x2 (~400 Mb/s, 35 k frames/s) about half of one. ``select``
(not ``epoll``) because its timeout has microsecond resolution (``epoll_wait``'s is a
millisecond); the thread's timer slack is set to 1 µs so the kernel does not defer the
wake-up by its default 50 µs.

Lag: for every frame, when it was written minus its simulated delivery time; for every
timed wake-up, how late the loop woke for the event it waited for. Both go to a
:class:`~coorp.emulate._lag.LagMeter`; a frame later than 1 ms counts as *late*.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from coorp.emulate._air import Air
from coorp.emulate._gro import PLAIN, VNET_HDR_BYTES, coalesce
from coorp.emulate._lag import LagMeter

__all__ = ["Pump", "PumpStats", "probe_wakeups", "set_timer_slack"]

_PR_SET_TIMERSLACK = 29
_IDLE_S = 0.05  # the longest sleep: how soon a stop request is seen


def set_timer_slack(ns: int) -> bool:
    """Set this thread's timer slack (prctl PR_SET_TIMERSLACK); whether it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) == 0)
    except OSError:
        return False


@dataclass(slots=True)
class PumpStats:
    """What one run of the loop did."""

    wall_s: float = 0.0
    frames_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    write_errors: int = 0
    #: With ``gro``: the coalesced packets written, and the frames they carried.
    gro_writes: int = 0
    gro_frames: int = 0
    turns: int = 0
    cpu_s: float = 0.0
    #: Of ``cpu_s``, the kernel's share (system time: reads, writes, select, and the
    #: receivers' network stack, which a write into a TUN device runs in the writer).
    cpu_system_s: float = 0.0
    frame_lag: LagMeter = field(default_factory=LagMeter)
    wake_lag: LagMeter = field(default_factory=LagMeter)
    #: (frame id, simulated delivery ns, wall ns since the start) of every frame
    #: written, when ``trace_writes``.
    writes: list[tuple[int, int, int]] | None = None


class Pump:
    """Moves packets between the stations' interfaces and :class:`Air` in real time."""

    def __init__(
        self,
        air: Air,
        fds: Sequence[int],
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        batch: int = 16,
        read_budget_ns: int = 200_000,
        trace_writes: bool = False,
        late_ns: int = 1_000_000,
        gro: bool = False,
    ) -> None:
        if len(fds) != len(air.names):
            raise ValueError(f"{len(fds)} interfaces for {len(air.names)} stations")
        self.air = air
        self.fds = list(fds)
        self.clock = clock
        self.batch = batch
        self.read_budget_ns = read_budget_ns
        #: The interfaces carry ``virtio_net_hdr`` (``IFF_VNET_HDR``): reads lose it, and
        #: the frames one instant delivers to one station are written coalesced as a NIC
        #: driver's GRO would hand them up (``coorp.emulate._gro``).
        self.gro = gro
        self.stats = PumpStats(frame_lag=LagMeter(late_ns), wake_lag=LagMeter(late_ns))
        if trace_writes:
            self.stats.writes = []
        #: The latest second's frame lags (``on_second`` gets it, then a new one).
        self.window = LagMeter(late_ns)

    def run(
        self,
        duration_ns: int | None = None,
        *,
        stop: Callable[[], bool] = lambda: False,
        on_second: Callable[[Pump, int], None] | None = None,
    ) -> PumpStats:
        """Run until ``duration_ns`` of wall time passed or ``stop()`` is true."""
        set_timer_slack(1000)
        gc.collect()
        gc.freeze()
        enabled = gc.isenabled()
        gc.disable()  # the channel's objects hold no cycles: reference counting frees them
        cpu0 = time.process_time()
        sys0 = os.times().system
        wall0 = time.perf_counter()
        try:
            self._loop(duration_ns, stop, on_second)
        finally:
            if enabled:
                gc.enable()
            gc.unfreeze()
            self.stats.cpu_s = time.process_time() - cpu0
            self.stats.cpu_system_s = os.times().system - sys0
            self.stats.wall_s = time.perf_counter() - wall0
        return self.stats

    def _loop(
        self,
        duration_ns: int | None,
        stop: Callable[[], bool],
        on_second: Callable[[Pump, int], None] | None,
    ) -> None:
        air = self.air
        fds = self.fds
        index = {fd: i for i, fd in enumerate(fds)}
        clock = self.clock
        read = os.read
        chunk = self.batch
        skip = VNET_HDR_BYTES if self.gro else 0
        stats = self.stats
        wake = stats.wake_lag
        t0 = clock()
        end = -1 if duration_ns is None else duration_ns
        next_second = 1_000_000_000
        deadline = -1  # the event a timed sleep waited for
        while True:
            now = clock() - t0
            if deadline >= 0 and now >= deadline:
                wake.add(now - deadline)
            out = air.advance(now)
            if out:
                self._write(out, t0)
            if 0 <= end <= now or stop():
                break
            if on_second is not None and now >= next_second:
                on_second(self, now)
                self.window = LagMeter(self.window.late_ns)
                air.drain_ls_depths()
                next_second += 1_000_000_000
            nxt = air.next_event_ns()
            now = clock() - t0
            if nxt >= 0 and nxt - now < _IDLE_S * 1e9:
                timeout = max(nxt - now, 0) / 1e9
                deadline = nxt
            else:
                timeout = _IDLE_S
                deadline = -1
            if end >= 0 and (end - now) / 1e9 < timeout:
                timeout = max(end - now, 0) / 1e9
            ready = select.select(fds, (), (), timeout)[0]
            stats.turns += 1
            if not ready:
                continue
            now = clock() - t0
            if deadline >= 0 and now >= deadline:
                wake.add(now - deadline)
                deadline = -1
            # Read in short passes, each stamped with its own instant and preceded by
            # the deliveries due by then, until the interfaces are drained, the next
            # event is due or the pass budget is spent: a long read phase would delay
            # deliveries and misdate arrivals.
            until = now + self.read_budget_ns
            if 0 <= nxt < until:
                until = nxt
            send = air.send
            while ready:
                out = air.advance(now)
                if out:
                    self._write(out, t0)
                more = []
                for fd in ready:
                    src = index[fd]
                    for _ in range(chunk):
                        try:
                            packet = read(fd, 65536)
                        except OSError:  # EAGAIN: drained (or the interface is gone)
                            break
                        stats.frames_in += 1
                        send(src, packet[skip:] if skip else packet, now)
                    else:
                        more.append(fd)
                ready = more
                now = clock() - t0
                if now >= until:
                    break

    def _write(self, out: list[tuple[int, int, bytes, int]], t0: int) -> None:
        """Write the deliveries ``out`` (time, station, packet, frame id) to their
        stations' interfaces, one packet each (or coalesced, with ``gro``)."""
        if self.gro:
            self._write_gro(out, t0)
            return
        fds = self.fds
        write = os.write
        clock = self.clock
        for k in range(len(out)):
            try:
                write(fds[out[k][1]], out[k][2])
            except OSError:
                self.stats.write_errors += 1
                continue
            self._written(out, (k,), clock() - t0)

    def _write_gro(self, out: list[tuple[int, int, bytes, int]], t0: int) -> None:
        """Write ``out`` (in order of delivery time) as one GRO batch per instant and
        receiver: what a driver's NAPI poll hands up after one exchange."""
        fds = self.fds
        write = os.write
        clock = self.clock
        i = 0
        n = len(out)
        while i < n:
            t = out[i][0]
            batches: dict[int, list[int]] = {}
            while i < n and out[i][0] == t:
                dst = out[i][1]
                b = batches.get(dst)
                if b is None:
                    batches[dst] = [i]
                else:
                    b.append(i)
                i += 1
            for dst, idx in batches.items():
                if len(idx) == 1:
                    todo = [(PLAIN + out[idx[0]][2], [0])]
                else:
                    todo = coalesce([out[k][2] for k in idx])
                for data, which in todo:
                    try:
                        write(fds[dst], data)
                    except OSError:
                        self.stats.write_errors += len(which)
                        continue
                    w = clock() - t0
                    if len(which) > 1:
                        self.stats.gro_writes += 1
                        self.stats.gro_frames += len(which)
                    self._written(out, [idx[q] for q in which], w)

    def _written(
        self, out: list[tuple[int, int, bytes, int]], which: Sequence[int], w: int
    ) -> None:
        """The frames ``out[k]`` for ``k`` in ``which`` were written at ``w``: their lag,
        the counts and the trace."""
        stats = self.stats
        lag = stats.frame_lag
        window = self.window
        writes = stats.writes
        for k in which:
            t, _, packet, fid = out[k]
            lag.add(w - t)
            window.add(w - t)
            stats.frames_out += 1
            stats.bytes_out += len(packet)
            if writes is not None:
                writes.append((fid, t, w))


def probe_wakeups(
    duration_ns: int,
    *,
    period_ns: int = 200_000,
    rt_priority: int = 0,
    clock: Callable[[], int] = time.monotonic_ns,
    sleep: Callable[[float], object] | None = None,
    late_ns: int = 1_000_000,
) -> LagMeter:
    """The host's own floor for :class:`Pump`'s lag: how late a bare loop wakes from
    ``select`` timeouts of ``period_ns``, the way the pump sleeps (timer slack 1 µs, at
    SCHED_FIFO ``rt_priority`` when > 0 and allowed), with nothing else to do, for
    ``duration_ns``. A frame cannot be written sooner than the emulator wakes, so when
    this probe's p99 is above 1 ms the host cannot hold real time for any load (a
    virtual machine's stolen time, timer interrupts delivered late)."""
    set_timer_slack(1000)
    if rt_priority > 0:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority))
    if sleep is None:
        sleep = _select_sleep
    meter = LagMeter(late_ns)
    timeout = period_ns / 1e9
    end = clock() + duration_ns
    while True:
        t = clock()
        if t >= end:
            return meter
        sleep(timeout)
        meter.add(clock() - t - period_ns)


def _select_sleep(timeout: float) -> object:
    return select.select([], [], [], timeout)


def close_quietly(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
