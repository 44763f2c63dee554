"""What every robot of a fleet does on the air: its control loop and its learning.

**The loop** (``[fleet.loop]``): each robot's camera runs on its own clock, at a fixed
phase in the period (drawn once per run, stream ``fleet-phase:<robot>``); each sample
goes out as a perception (AC_VO) after a send delay |N(0, σ)| to the leader of the
robot's cell, which infers for ``inference_us`` (a batched accelerator: no queue between
robots) and sends the robot its control (AC_VO). Reaction time = control delivered −
sample instant; a miss is a reaction over ``deadline_us``, or a loop that never
completed. A sample taken while the robot is off the air (a hand-over's gap) is not sent
(``gap``); a loop whose robot left its cell before the control came back is lost to the
hand-over (``handover``): both are reported apart from the misses.

**Learning** (``[fleet.learning]``): each robot cycles on its own — its update up to its
cell's leader, the model back, training — with every transfer started through the
policy (permits, gates). A hand-over abandons the cycle in progress (the simulator
flushed its transfers) and the robot starts a new one in its new cell. Bytes are
counted to the cell (and channel) they were delivered in.

The flows are the robot's own (``perception:<r>``, ``control:<r>``, ``update:<r>``,
``model:<r>``): a hand-over re-binds their AP end, so a robot's local preemption keeps
learning the same flows from cell to cell.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

from coorp.scenario import AccessCategory, FleetLearningConfig, FleetLoopConfig, LsTransport
from coorp.sim import Simulation
from coorp.sim.packets import FlowState, Message
from coorp.units import us

__all__ = ["FleetLearning", "FleetLoop", "LoopRecord"]

BulkSender = Callable[[str, FlowState, int, Callable[[int], None]], None]
#: Send delays drawn at a time per robot.
_BLOCK: Final = 256
#: After a hand-over, a robot's sends are checked for protection this many periods
#: (``LoopRecord.protected``; the check is a planner query, too dear for every send).
WATCH_PERIODS: Final = 8


class LoopRecord:
    """One sample of one robot's loop.

    A plain class with ``__slots__`` (compiled, a native class): a ``dataclass`` stays an
    interpreted class whose generated ``__init__`` cost ~2,800 instructions per record,
    3 % of a fleet-200 EDCA run. Its repr and equality are the dataclass's.
    """

    __slots__ = ("ap", "end_ns", "index", "lost", "protected", "robot", "sample_ns", "send_ns")

    def __init__(
        self,
        robot: str,
        index: int,
        sample_ns: int,
        ap: str = "",
        send_ns: int = -1,
        end_ns: int = -1,
        lost: str = "",
        protected: bool | None = None,
    ) -> None:
        self.robot = robot
        self.index = index
        self.sample_ns = sample_ns
        #: The cell it went to ("" if never sent) and when it went.
        self.ap = ap
        self.send_ns = send_ns
        #: Control delivered (-1: never).
        self.end_ns = end_ns
        #: "" (completed, or still open), "gap" (sampled off the air), "handover" (its
        #: robot left the cell before the control came back).
        self.lost = lost
        #: Whether the robot's policy had a protection window around the send, checked in
        #: the periods after a hand-over (None: not checked, or no such notion; see
        #: WATCH_PERIODS).
        self.protected = protected

    def _fields(self) -> tuple[object, ...]:
        return (
            self.robot, self.index, self.sample_ns, self.ap, self.send_ns, self.end_ns,
            self.lost, self.protected,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoopRecord):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return (
            f"LoopRecord(robot={self.robot!r}, index={self.index!r}, "
            f"sample_ns={self.sample_ns!r}, ap={self.ap!r}, send_ns={self.send_ns!r}, "
            f"end_ns={self.end_ns!r}, lost={self.lost!r}, protected={self.protected!r})"
        )

    @property
    def reaction_ns(self) -> int | None:
        return self.end_ns - self.sample_ns if self.end_ns >= 0 else None


class _Perceived:
    """A perception's delivery callback: ``FleetLoop._perceived`` with its sample's
    context (a compiled callable object: a ``functools.partial`` of a bound method cost a
    generic call that copied its five arguments, twice per loop sample)."""

    __slots__ = ("ap", "epoch", "loop", "r", "rec")

    def __init__(self, loop: FleetLoop, r: str, rec: LoopRecord, ap: str, epoch: int) -> None:
        self.loop = loop
        self.r = r
        self.rec = rec
        self.ap = ap
        self.epoch = epoch

    def __call__(self, m: Message) -> None:
        self.loop._perceived(self.r, self.rec, self.ap, self.epoch, m)


class _Controlled:
    """A control's delivery callback: ``FleetLoop._controlled`` with its sample's context."""

    __slots__ = ("epoch", "loop", "r", "rec")

    def __init__(self, loop: FleetLoop, r: str, rec: LoopRecord, epoch: int) -> None:
        self.loop = loop
        self.r = r
        self.rec = rec
        self.epoch = epoch

    def __call__(self, m: Message) -> None:
        self.loop._controlled(self.r, self.rec, self.epoch, m)


class FleetLoop:
    """Every robot's loop with its cell's leader on ``sim`` (see the module docstring).

    ``hint(station, flow, at_ns, exact)``: the leader's word on its next control send
    (the policy's ``expect_ls_send``); ``protected(station, now_ns)``: the policy's
    answer whether a send now lies in a protection window.
    """

    def __init__(
        self,
        sim: Simulation,
        cfg: FleetLoopConfig,
        cells: Any,
        *,
        hint: Callable[..., None] | None = None,
        protected: Callable[[str, int], bool | None] | None = None,
    ) -> None:
        self.sim = sim
        self.cfg = cfg
        self.cells = cells
        self.hint = hint
        self.protected = protected
        #: Read per sample: the cells' association map (one dict, updated in place) and
        #: the message sizes, without an attribute lookup on ``cells`` or ``cfg`` each.
        self._ap_of: dict[str, str | None] = cells.ap_of
        self._perception_bytes = cfg.perception_bytes
        self._control_bytes = cfg.control_bytes
        self.period = us(cfg.period_us)
        self.jitter = us(cfg.jitter_us)
        self.inference = us(cfg.inference_us)
        self.start = us(cfg.start_us)
        repair = us(cfg.repair_us) if cfg.ls_transport is LsTransport.RELIABLE else None
        robots = cells.robots
        self.robots: tuple[str, ...] = robots
        vo = AccessCategory.VO
        self.perception = {}
        self.control = {}
        flow = sim.flow
        for r in robots:
            ap = cells.ap_of[r]
            self.perception[r] = flow(f"perception:{r}", r, ap, vo, bulk=False, repair_ns=repair)
            self.control[r] = flow(f"control:{r}", ap, r, vo, bulk=False, repair_ns=repair)
        self.phase_ns = {
            r: int(sim.rng(f"fleet-phase:{r}").integers(0, self.period)) for r in robots
        }
        self._rng = {r: sim.rng(f"fleet-jitter:{r}") for r in robots}
        self._delays: dict[str, list[int]] = {}
        self.records: list[LoopRecord] = []
        #: Each robot's association number (a hand-over makes its open loops stale).
        self._epoch = dict.fromkeys(robots, 0)
        #: Robot -> (next sample index, its send instant) once drawn.
        self._next: dict[str, tuple[int, int]] = {}
        #: Robot -> until when its sends are checked for protection (after a join).
        self._watch: dict[str, int] = {}
        #: Robot -> its control's send instant at its leader, once perceived.
        self._controls: dict[str, int] = {}
        # The event callbacks, bound once (compiled, ``self._send`` is a lookup by name
        # and a new bound method at every sample).
        self._send_cb: Callable[[str, int, int], None] = self._send
        self._control_cb: Callable[[str, LoopRecord, str, int], None] = self._control

    @property
    def flow_names(self) -> frozenset[str]:
        return frozenset(f.name for f in (*self.perception.values(), *self.control.values()))

    def begin(self) -> None:
        for r in self.robots:
            sample = self.start + self.phase_ns[r]
            send = sample + self._delay(r)
            self._next[r] = (0, send)
            self.sim.call_at(send, self._send, r, 0, sample)

    def _delay(self, r: str) -> int:
        if not self.jitter:
            return 0
        block = self._delays.get(r)
        if not block:
            # Drawn a block at a time (the same stream, in order): a draw per sample
            # costs more than the sample's simulation. A delay stays within the period,
            # so sends keep their samples' order.
            draws = self._rng[r].normal(0.0, self.jitter, size=_BLOCK)
            cap = self.period - 1
            block = self._delays[r] = [min(abs(round(x)), cap) for x in draws[::-1].tolist()]
        return block.pop()

    def _send(self, r: str, k: int, sample: int) -> None:
        # One event per sample, at its send instant; it schedules the next sample's send.
        sim = self.sim
        now = sim.now_ns
        nxt = sample + self.period
        send = nxt + self._delay(r)
        self._next[r] = (k + 1, send)
        sim.call_at(send, self._send_cb, r, k + 1, nxt)
        rec = LoopRecord(r, k, sample)
        self.records.append(rec)
        ap = self._ap_of[r]
        if ap is None:
            rec.lost = "gap"  # off the air: the sample never leaves the robot
            return
        if self.protected is not None and self._watch.get(r, -1) >= now:
            rec.protected = self.protected(r, now)
        rec.ap, rec.send_ns = ap, now
        epoch = self._epoch[r]
        sim.send_message(
            self.perception[r], self._perception_bytes,
            _Perceived(self, r, rec, ap, epoch),
        )  # fmt: skip

    def _perceived(self, r: str, rec: LoopRecord, ap: str, epoch: int, _m: Message) -> None:
        if epoch != self._epoch[r]:
            rec.lost = "handover"
            return
        at = self.sim.now_ns + self.inference
        self._controls[r] = at
        if self.hint is not None:
            self.hint(ap, self.control[r].name, at, exact=True)
        self.sim.call_at(at, self._control_cb, r, rec, ap, epoch)

    def _control(self, r: str, rec: LoopRecord, ap: str, epoch: int) -> None:
        if self._controls.get(r) == self.sim.now_ns:
            del self._controls[r]
        if epoch != self._epoch[r]:
            rec.lost = "handover"
            return
        self.sim.send_message(
            self.control[r], self._control_bytes, _Controlled(self, r, rec, epoch)
        )

    def _controlled(self, r: str, rec: LoopRecord, epoch: int, m: Message) -> None:
        if epoch != self._epoch[r]:
            rec.lost = "handover"
            return
        rec.end_ns = m.delivered_ns

    # -- hand-overs ----------------------------------------------------------------------------
    def on_leave(self, robot: str, ap: str, now_ns: int) -> None:
        self._epoch[robot] += 1
        self._controls.pop(robot, None)

    def on_join(self, robot: str, ap: str, now_ns: int) -> None:
        st = self.sim.station(ap)
        self.perception[robot].dst = st
        self.control[robot].src = st
        # Whether its sends are protected again, the next WATCH_PERIODS periods.
        self._watch[robot] = now_ns + WATCH_PERIODS * self.period

    # -- what the loop knows of its next sends (reference policies) ------------------------------
    def next_send(self, station: str, now_ns: int) -> tuple[int, bool] | None:
        """``(instant, exact)``: ``station``'s next loop send at or after ``now_ns``. A
        robot's perception is exact (its send delay is drawn one sample ahead); an AP's
        next control is exact once its robot's perception arrived, else the earliest it
        could be: a member's next perception send plus the inference time."""
        if station in self._next:
            return self._next[station][1], True
        best: tuple[int, bool] | None = None
        for r in self.cells.members(station):
            at = self._controls.get(r)
            cand = (at, True) if at is not None and at >= now_ns else None
            if cand is None:
                nxt = self.next_send(r, now_ns)
                if nxt is None:
                    continue
                cand = (nxt[0] + self.inference, False)
            if best is None or cand[0] < best[0]:
                best = cand
        return best


class FleetLearning:
    """Every robot's asynchronous learning cycle with its cell's leader (see the module
    docstring); transfers start through ``send_bulk`` (the policy)."""

    def __init__(
        self,
        sim: Simulation,
        cfg: FleetLearningConfig,
        cells: Any,
        send_bulk: BulkSender,
        stagger_ns: dict[str, int] | None = None,
    ) -> None:
        self.sim = sim
        self.cfg = cfg
        self.cells = cells
        self.send_bulk = send_bulk
        self.robots: tuple[str, ...] = cells.robots
        be = AccessCategory.BE
        self.update = {}
        self.model = {}
        for r in self.robots:
            ap = cells.ap_of[r]
            self.update[r] = sim.flow(f"update:{r}", r, ap, be, bulk=True)
            self.model[r] = sim.flow(f"model:{r}", ap, r, be, bulk=True)
        if stagger_ns is None:
            # Each robot starts learning at its own instant (a fleet does not start at
            # once: every robot's first permit request in one period sets off a storm of
            # permit messages and retries among tens of AC_VO contenders, CWmax 7).
            spread = max(1, us(cfg.start_spread_us))
            stagger_ns = {
                r: int(sim.rng(f"fleet-learn:{r}").integers(0, spread)) for r in self.robots
            }
        self._stagger = stagger_ns
        self._epoch = dict.fromkeys(self.robots, 0)
        self._started = False
        self.cycles = 0
        #: Bytes delivered per cell (AP) and, per robot, where and from what count the
        #: bytes since its last hand-over go.
        self.bytes_by_cell: dict[str, int] = dict.fromkeys(cells.access_points, 0)
        self._mark: dict[str, tuple[str, int]] = {r: (str(cells.ap_of[r]), 0) for r in self.robots}

    @property
    def flow_names(self) -> frozenset[str]:
        return frozenset(f.name for f in (*self.update.values(), *self.model.values()))

    def begin(self) -> None:
        start = us(self.cfg.start_us)
        self._started = True
        for r in self.robots:
            self.sim.call_at(start + self._stagger.get(r, 0), self._cycle, r, 0)

    def _delivered(self, r: str) -> int:
        return self.update[r].delivered_bytes + self.model[r].delivered_bytes

    def _cycle(self, r: str, epoch: int) -> None:
        if epoch != self._epoch[r] or self.cells.ap_of[r] is None:
            return
        self.send_bulk(r, self.update[r], self.cfg.update_bytes, partial(self._uploaded, r, epoch))

    def _uploaded(self, r: str, epoch: int, _now: int) -> None:
        ap = self.cells.ap_of[r]
        if epoch != self._epoch[r] or ap is None:
            return
        self.send_bulk(ap, self.model[r], self.cfg.model_bytes, partial(self._modelled, r, epoch))

    def _modelled(self, r: str, epoch: int, now: int) -> None:
        if epoch != self._epoch[r]:
            return
        self.cycles += 1
        self.sim.call_at(now + us(self.cfg.train_us), self._cycle, r, epoch)

    def on_leave(self, robot: str, ap: str, now_ns: int) -> None:
        self._epoch[robot] += 1
        self._account(robot)

    def on_join(self, robot: str, ap: str, now_ns: int) -> None:
        st = self.sim.station(ap)
        up, down = self.update[robot], self.model[robot]
        up.dst = st
        down.src = st
        for f in (up, down):
            f.unacked = 0
            if f.ack_flow is not None:
                f.ack_flow.src, f.ack_flow.dst = f.dst, f.src
        self._mark[robot] = (ap, self._delivered(robot))

    def restart(self, robot: str) -> None:
        """A new cycle in the robot's new cell (after its policy knows it is there)."""
        if self._started and self.sim.now_ns >= us(self.cfg.start_us):
            self._cycle(robot, self._epoch[robot])

    def _account(self, robot: str) -> None:
        cell, mark = self._mark[robot]
        got = self._delivered(robot)
        self.bytes_by_cell[cell] = self.bytes_by_cell.get(cell, 0) + got - mark
        self._mark[robot] = (cell, got)

    def finish(self) -> dict[str, int]:
        """Bytes per cell at the end of the run."""
        for r in self.robots:
            if self.cells.ap_of[r] is not None:
                self._account(r)
        return dict(self.bytes_by_cell)
