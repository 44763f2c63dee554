"""The multi-view perception-control (MPC) loop of a robot team (paper §III-A).

Every period each worker sends a perception to the leader (AC_VO, after a small send
jitter); when the leader has all of them it infers for ``inference_us`` and sends every
worker a control message (AC_VO). Reaction time = last control delivered − loop start.
A loop that overruns delays the next one (its lag is recorded); a loop not finished
within ``loop_timeout_us`` is abandoned and counted as a miss. With the default
reliable LS transport a fragment the MAC drops is repaired about ``repair_us`` later
(uniform in [½, 1½] × ``repair_us``), so a loop is late rather than lost; best effort
loses the message and the loop waits out its timeout.

:meth:`MpcLoop.next_send_ns` tells when a robot's next LS message goes out (exactly once
that instant is determined, else the earliest possible one): each worker's send delay
for loop ``k + 1`` is drawn when loop ``k`` starts, from the same stream in the same
order as before, so results do not change.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass

from coorp.scenario import JitterKind, LsPhase, LsTransport, MpcConfig
from coorp.sim import Simulation
from coorp.sim.events import Event
from coorp.sim.packets import Message
from coorp.units import us

__all__ = ["LoopRecord", "MpcLoop"]


@dataclass(frozen=True, slots=True)
class LoopRecord:
    index: int
    nominal_ns: int
    start_ns: int
    #: Last control delivered; -1 if the loop was abandoned.
    end_ns: int

    @property
    def lag_ns(self) -> int:
        return self.start_ns - self.nominal_ns

    @property
    def reaction_ns(self) -> int | None:
        return self.end_ns - self.start_ns if self.end_ns >= 0 else None


@dataclass(slots=True)
class _OpenLoop:
    """A loop in flight when phases are random (several may overlap)."""

    ref_ns: int  # its last sample instant: reaction time counts from here
    timeout_at: int
    pending: int
    unsent: dict[str, int]  # worker -> scheduled perception send, not yet sent
    controls_at: int | None = None
    controls_out: bool = False
    timeout: Event | None = None


class MpcLoop:
    """Drives the MPC loop on a :class:`Simulation`; records one :class:`LoopRecord` each."""

    def __init__(
        self,
        sim: Simulation,
        cfg: MpcConfig,
        leader: str,
        workers: tuple[str, ...],
        on_loop_done: Callable[[LoopRecord], None] | None = None,
    ) -> None:
        self.sim = sim
        self.cfg = cfg
        self.leader = leader
        self.workers = workers
        self.on_loop_done = on_loop_done
        #: The leader's word on its next control sends, for its local preemption:
        #: ``(robot, flow, at_ns, exact=)`` at every perception arrival — not before
        #: now + inference while perceptions are missing, exactly then once the last
        #: one is in. A policy may ignore it.
        self.on_expect: Callable[..., None] | None = None
        #: The word is the whole truth (``on_expect`` takes ``min_lead_ns``): while no
        #: loop's controls are due, the next ones are at least ``inference`` after any
        #: instant (a moving bound, also said right after controls went out), and once
        #: some are due, exactly when the earliest are. Off: the first version's word,
        #: only at perception arrivals and, with random phases, never exact.
        self.lead_hints = False
        self.period = us(cfg.period_us)
        self.jitter = us(cfg.jitter_us)
        self.inference = us(cfg.inference_us)
        self.timeout = us(cfg.loop_timeout_us)
        self.start = us(cfg.start_us)
        repair = us(cfg.repair_us) if cfg.ls_transport is LsTransport.RELIABLE else None
        ac = cfg.category
        self.perception = {
            w: sim.flow(f"perception:{w}", w, leader, ac, bulk=False,
                        repair_ns=repair)
            for w in workers
        }  # fmt: skip
        self.control = {
            w: sim.flow(f"control:{w}", leader, w, ac, bulk=False,
                        repair_ns=repair)
            for w in workers
        }  # fmt: skip
        self.rng = {w: sim.rng(f"mpc-jitter:{w}") for w in workers}
        self._tail = cfg.jitter is JitterKind.PARETO_TAIL
        #: pareto-tail: a stream of its own, so the Gaussian part matches gaussian runs.
        self.tail_rng = {w: sim.rng(f"mpc-tail:{w}") for w in workers} if self._tail else {}
        self._tail_scale = us(cfg.tail_scale_us)
        self._tail_max = us(cfg.tail_max_us)
        self.random_phase = cfg.phase is LsPhase.RANDOM
        #: Each worker's sample offset after the loop tick (0 when aligned).
        self.phase_ns = {
            w: int(sim.rng(f"mpc-phase:{w}").integers(0, self.period)) if self.random_phase else 0
            for w in workers
        }
        self.records: list[LoopRecord] = []
        self._k = -1
        self._loop_start = 0
        self._pending = 0
        self._timeout_event: Event | None = None
        # Send-time prediction (next_send_ns). Each worker's delay after the loop start
        # of the *next* loop is drawn one loop ahead.
        self._next_delay: dict[str, int] = {}
        #: Start of the next loop when already fixed (before the first loop, between
        #: loops); None while a loop is in progress.
        self._next_start: int | None = None
        #: This loop's perceptions not yet sent: worker -> scheduled send instant.
        self._perception_at: dict[str, int] = {}
        #: This loop's control send instant once all perceptions arrived (None before,
        #: and after the controls went out).
        self._controls_at: int | None = None
        #: The current loop's controls went out.
        self._controls_out = False
        self._timeout_at = 0
        # Random phases: loops overlap (see _tick).
        self._open: dict[int, _OpenLoop] = {}
        self._next_tick = 0
        self._leader_free = 0
        #: Random phases: each worker's scheduled perception sends, loop -> instant.
        self._sends_due: dict[str, dict[int, int]] = {w: {} for w in workers}
        self._max_phase = max(self.phase_ns.values(), default=0)

    @property
    def flow_names(self) -> frozenset[str]:
        return frozenset(f.name for f in (*self.perception.values(), *self.control.values()))

    def begin(self) -> None:
        self._next_delay = self._draw_delays()
        self._next_start = self.start
        if self.random_phase:
            self.sim.call_at(self.start, self._tick, 0)
        else:
            self.sim.call_at(self.start, self._start_loop, 0)

    def _draw_delays(self) -> dict[str, int]:
        """Each worker's send delay after its sample instant, one draw per worker and loop."""
        return {w: self._draw_delay(w) for w in self.workers}

    def _draw_delay(self, w: str) -> int:
        # |N(0, σ)|: a worker sends its frame after the loop tick, never before.
        d = abs(round(self.rng[w].normal(0.0, self.jitter))) if self.jitter else 0
        if self._tail:
            # Both draws every time: the stream stays aligned whatever the outcome.
            rng = self.tail_rng[w]
            u = rng.random()
            y = rng.pareto(self.cfg.tail_shape)  # Lomax: scale·(1 + y) is Pareto type I
            if u < self.cfg.tail_probability:
                d += min(round(self._tail_scale * (1.0 + y)), self._tail_max)
        return d

    def _start_loop(self, k: int) -> None:
        sim = self.sim
        now = sim.now_ns
        self._k = k
        self._loop_start = now
        self._pending = len(self.workers)
        delays, self._next_delay = self._next_delay, self._draw_delays()
        self._next_start = None
        self._controls_at = None
        self._controls_out = False
        self._timeout_at = now + self.timeout
        self._perception_at = {}
        for w in self.workers:
            self._perception_at[w] = now + delays[w]
            sim.call_at(now + delays[w], self._send_perception, k, w)
        self._timeout_event = sim.call_at(self._timeout_at, self._abandon, k)

    def _send_perception(self, k: int, w: str) -> None:
        if k == self._k:
            del self._perception_at[w]
            self.sim.send_message(
                self.perception[w], self.cfg.perception_bytes, lambda m: self._perceived(k, m)
            )

    def _perceived(self, k: int, _m: Message) -> None:
        if k != self._k:
            return  # a straggler of an abandoned loop
        self._pending -= 1
        if self._pending == 0:
            self._controls_at = self.sim.now_ns + self.inference
            self.sim.call_at(self._controls_at, self._disseminate, k)
        if self.on_expect is not None:
            if self.lead_hints:
                self._say_next_controls(self._controls_at)
            else:
                at, exact = self.sim.now_ns + self.inference, self._pending == 0
                for flow in self.control.values():
                    self.on_expect(self.leader, flow.name, at, exact=exact)

    def _say_next_controls(self, due_ns: int | None) -> None:
        """The leader's word on its next controls (``lead_hints``): exactly at ``due_ns``
        when some are due, else at least ``inference`` after now, and after any later
        instant until the next word (their loop's last perception is still to come)."""
        assert self.on_expect is not None
        at = self.sim.now_ns + self.inference
        for flow in self.control.values():
            if due_ns is not None:
                self.on_expect(self.leader, flow.name, due_ns, exact=True)
            else:
                self.on_expect(self.leader, flow.name, at, min_lead_ns=self.inference)

    def _disseminate(self, k: int) -> None:
        if k != self._k:
            return
        self._controls_at = None
        self._controls_out = True
        self._pending = len(self.workers)
        for w in self.workers:
            self.sim.send_message(
                self.control[w], self.cfg.control_bytes, lambda m: self._controlled(k, m)
            )
        if self.on_expect is not None and self.lead_hints:
            self._say_next_controls(None)  # the next loop's perceptions are all to come

    def _controlled(self, k: int, m: Message) -> None:
        if k != self._k:
            return
        self._pending -= 1
        if self._pending == 0:
            self._finish(k, m.delivered_ns)

    def _abandon(self, k: int) -> None:
        if k == self._k:
            self._finish(k, -1)

    def _finish(self, k: int, end_ns: int) -> None:
        if self._timeout_event is not None:
            self._timeout_event.cancel()
            self._timeout_event = None
        nominal = self.start + k * self.period
        rec = LoopRecord(k, nominal, self._loop_start, end_ns)
        self.records.append(rec)
        self._k = -1  # nothing outstanding until the next loop starts
        self._perception_at = {}
        self._controls_at = None
        if self.on_loop_done is not None:
            self.on_loop_done(rec)
        now = self.sim.now_ns
        next_nominal = self.start + (k + 1) * self.period
        self._next_start = max(now, next_nominal)
        self.sim.call_at(self._next_start, self._start_loop, k + 1)

    # -- random phases ---------------------------------------------------------------------
    # Each worker samples at tick + its phase and sends after its jitter, whatever the
    # leader does (an independent camera clock: a late loop does not delay the next, loops
    # overlap). Loop k's complete view exists at its last sample instant ``ref``; the
    # leader infers once the loop's last perception is in and its previous inference is
    # done (one accelerator), then sends the controls. Reaction = last control delivered
    # − ref. A loop not finished by ref + loop_timeout is abandoned.
    def _tick(self, k: int) -> None:
        sim = self.sim
        now = sim.now_ns
        delays, self._next_delay = self._next_delay, self._draw_delays()
        self._next_tick = k + 1
        ref = now + self._max_phase
        st = _OpenLoop(ref, ref + self.timeout, len(self.workers), {})
        for w in self.workers:
            at = now + self.phase_ns[w] + delays[w]
            st.unsent[w] = at
            self._sends_due[w][k] = at
            sim.call_at(at, self._send_free, k, w)
        st.timeout = sim.call_at(st.timeout_at, self._abandon_open, k)
        self._open[k] = st
        self._next_start = self.start + (k + 1) * self.period
        sim.call_at(self._next_start, self._tick, k + 1)

    def _send_free(self, k: int, w: str) -> None:
        del self._sends_due[w][k]
        st = self._open.get(k)
        if st is not None:
            del st.unsent[w]
        # The camera sends whether or not the leader still waits for this loop.
        self.sim.send_message(
            self.perception[w], self.cfg.perception_bytes, lambda m: self._perceived_open(k, m)
        )

    def _perceived_open(self, k: int, _m: Message) -> None:
        st = self._open.get(k)
        if st is None:
            return  # a straggler of an abandoned loop
        st.pending -= 1
        now = self.sim.now_ns
        at = max(now, self._leader_free) + self.inference
        if self.on_expect is not None and not self.lead_hints:
            for flow in self.control.values():
                self.on_expect(self.leader, flow.name, at)
        if st.pending == 0:
            st.controls_at = self._leader_free = at
            self.sim.call_at(at, self._disseminate_open, k)
        if self.on_expect is not None and self.lead_hints:
            self._say_next_controls(self._earliest_due())

    def _earliest_due(self) -> int | None:
        """When the earliest controls already due go out (random phases), if any."""
        due = [st.controls_at for st in self._open.values() if st.controls_at is not None]
        return min(due) if due else None

    def _disseminate_open(self, k: int) -> None:
        st = self._open.get(k)
        if st is None:
            return
        st.controls_at = None
        st.controls_out = True
        st.pending = len(self.workers)
        for w in self.workers:
            self.sim.send_message(
                self.control[w], self.cfg.control_bytes, lambda m: self._controlled_open(k, m)
            )
        if self.on_expect is not None and self.lead_hints:
            self._say_next_controls(self._earliest_due())

    def _controlled_open(self, k: int, m: Message) -> None:
        st = self._open.get(k)
        if st is None:
            return
        st.pending -= 1
        if st.pending == 0:
            self._finish_open(k, m.delivered_ns)

    def _abandon_open(self, k: int) -> None:
        if k in self._open:
            self._finish_open(k, -1)

    def _finish_open(self, k: int, end_ns: int) -> None:
        st = self._open.pop(k)
        if st.timeout is not None:
            st.timeout.cancel()
        rec = LoopRecord(k, st.ref_ns, st.ref_ns, end_ns)
        insort(self.records, rec, key=lambda r: r.index)  # loops may finish out of order
        if self.on_loop_done is not None:
            self.on_loop_done(rec)

    def _next_send_open(self, robot: str, now_ns: int) -> tuple[int, bool] | None:
        tick = self.start + self._next_tick * self.period
        if robot in self._next_delay:
            # Free-running: every send instant is fixed once its delay is drawn.
            upcoming = tick + self.phase_ns[robot] + self._next_delay[robot]
            return min([upcoming, *self._sends_due[robot].values()]), True
        if robot != self.leader:
            return None
        free = self._leader_free
        bound = (
            max(tick + max(self.phase_ns[w] + d for w, d in self._next_delay.items()), free, now_ns)
            + self.inference
        )
        exact: int | None = None
        for st in self._open.values():
            if st.controls_out:
                continue
            if st.controls_at is not None:
                if st.controls_at < st.timeout_at and (exact is None or st.controls_at < exact):
                    exact = st.controls_at
            else:
                latest = max(st.unsent.values(), default=now_ns)
                bound = min(bound, max(latest, now_ns, free) + self.inference)
        if exact is not None and exact <= bound:
            return exact, True
        return bound, False

    # -- prediction ------------------------------------------------------------------------
    def next_send_ns(self, robot: str, now_ns: int) -> int | None:
        """The instant of ``robot``'s next LS message send at or after ``now_ns``.

        Exact once it is determined; otherwise the earliest possible instant (see
        :meth:`next_send`). None for a robot that sends no LS messages, or before
        :meth:`begin`.
        """
        nxt = self.next_send(robot, now_ns)
        return None if nxt is None else nxt[0]

    def next_send(self, robot: str, now_ns: int) -> tuple[int, bool] | None:
        """``(instant, exact)``: ``robot``'s next LS send at or after ``now_ns``.

        ``now_ns`` is the simulation's current time. A worker's next perception is
        exact unless it belongs to a loop that has not started while the current one
        is still running (a late loop delays the next): then it is the earliest
        possible instant, the next nominal start (or now, if later) plus the worker's
        pre-drawn delay. The leader's next control send is exact once the loop's last
        perception arrived (arrival + inference); while perceptions are outstanding it
        is the latest of now and their scheduled sends, plus inference; after the
        controls went out it is the next loop's earliest: its earliest start plus the
        largest pre-drawn delay, plus inference.
        """
        if not self._next_delay:
            return None  # not begun, or no workers
        if self.random_phase:
            return self._next_send_open(robot, now_ns)
        in_loop = self._k >= 0
        if robot in self._next_delay:
            at = self._perception_at.get(robot) if in_loop else None
            if at is not None and at < self._timeout_at:
                return at, True
            start, exact = self._next_loop_start(now_ns)
            return start + self._next_delay[robot], exact
        if robot != self.leader:
            return None
        if in_loop and not self._controls_out:
            at = self._controls_at
            if at is not None:
                if at < self._timeout_at:
                    return at, True
            else:
                # Perceptions outstanding: the last arrives at or after now and after
                # every scheduled send.
                latest = max(self._perception_at.values(), default=now_ns)
                return max(latest, now_ns) + self.inference, False
        start, _ = self._next_loop_start(now_ns)
        return start + max(self._next_delay.values()) + self.inference, False

    def _next_loop_start(self, now_ns: int) -> tuple[int, bool]:
        """The next loop's start: exact when fixed, else its earliest possible value."""
        if self._next_start is not None:
            return self._next_start, True
        nominal = self.start + (self._k + 1) * self.period
        return max(nominal, now_ns), False
