"""The multi-view perception-control (MPC) loop of a robot team (paper §III-A).

Every period each worker sends a perception to the leader (AC_VO, after a small send
jitter); when the leader has all of them it infers for ``inference_us`` and sends every
worker a control message (AC_VO). Reaction time = last control delivered − loop start.
A loop that overruns delays the next one (its lag is recorded); a loop not finished
within ``loop_timeout_us`` is abandoned and counted as a miss. With the default
reliable LS transport a fragment the MAC drops is repaired about ``repair_us`` later
(uniform in [½, 1½] × ``repair_us``), so a loop is late rather than lost; best effort
loses the message and the loop waits out its timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coorp.scenario import AccessCategory, LsTransport, MpcConfig
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
        self.period = us(cfg.period_us)
        self.jitter = us(cfg.jitter_us)
        self.inference = us(cfg.inference_us)
        self.timeout = us(cfg.loop_timeout_us)
        self.start = us(cfg.start_us)
        repair = us(cfg.repair_us) if cfg.ls_transport is LsTransport.RELIABLE else None
        self.perception = {
            w: sim.flow(f"perception:{w}", w, leader, AccessCategory.VO, bulk=False,
                        repair_ns=repair)
            for w in workers
        }  # fmt: skip
        self.control = {
            w: sim.flow(f"control:{w}", leader, w, AccessCategory.VO, bulk=False,
                        repair_ns=repair)
            for w in workers
        }  # fmt: skip
        self.rng = {w: sim.rng(f"mpc-jitter:{w}") for w in workers}
        self.records: list[LoopRecord] = []
        self._k = -1
        self._loop_start = 0
        self._pending = 0
        self._timeout_event: Event | None = None

    @property
    def flow_names(self) -> frozenset[str]:
        return frozenset(f.name for f in (*self.perception.values(), *self.control.values()))

    def begin(self) -> None:
        self.sim.call_at(self.start, self._start_loop, 0)

    def _start_loop(self, k: int) -> None:
        sim = self.sim
        now = sim.now_ns
        self._k = k
        self._loop_start = now
        self._pending = len(self.workers)
        for w in self.workers:
            # |N(0, σ)|: a worker sends its frame after the loop tick, never before.
            delay = abs(round(self.rng[w].normal(0.0, self.jitter))) if self.jitter else 0
            sim.call_at(now + delay, self._send_perception, k, w)
        self._timeout_event = sim.call_at(now + self.timeout, self._abandon, k)

    def _send_perception(self, k: int, w: str) -> None:
        if k == self._k:
            self.sim.send_message(
                self.perception[w], self.cfg.perception_bytes, lambda m: self._perceived(k, m)
            )

    def _perceived(self, k: int, _m: Message) -> None:
        if k != self._k:
            return  # a straggler of an abandoned loop
        self._pending -= 1
        if self._pending == 0:
            self.sim.call_at(self.sim.now_ns + self.inference, self._disseminate, k)

    def _disseminate(self, k: int) -> None:
        if k != self._k:
            return
        self._pending = len(self.workers)
        for w in self.workers:
            self.sim.send_message(
                self.control[w], self.cfg.control_bytes, lambda m: self._controlled(k, m)
            )

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
        if self.on_loop_done is not None:
            self.on_loop_done(rec)
        now = self.sim.now_ns
        next_nominal = self.start + (k + 1) * self.period
        self.sim.call_at(max(now, next_nominal), self._start_loop, k + 1)
