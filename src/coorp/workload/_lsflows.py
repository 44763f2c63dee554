"""Latency-sensitive flows beside the MPC loop (``[[workload.ls_flows]]``).

Each flow sends one message every period on its sender's clock: the ``k``-th send of an
active interval ``[start, stop)`` is due at ``start + phase + k·period·(1 + drift)``
(true time; the drift is the sender's oscillator error in ppm) and goes out after a send
delay drawn like the MPC loop's (``|N(0, σ)|``, plus a Pareto tail on a share of sends
with ``pareto-tail``), never before the flow's previous send. Sends due at or after the
interval's stop are skipped; the next interval starts the flow afresh (its phase counts
from the interval's start), so a pause and a resume are what a node that stopped its
loop and started it again does.

Every send instant is drawn one send ahead, when the previous one goes out, so
:meth:`LsFlows.next_send` knows each flow's next send exactly (what a reference policy
such as ``oracle`` may ask). Random streams are per flow (``ls-jitter:<name>``,
``ls-tail:<name>``, ``ls-phase:<name>``): adding a flow changes no other draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from coorp.scenario import AccessCategory, JitterKind, LsFlowConfig
from coorp.sim import Simulation
from coorp.sim.packets import FlowState
from coorp.units import NS_PER_US, us

__all__ = ["LsFlows"]


@dataclass(slots=True)
class _Flow:
    cfg: LsFlowConfig
    state: FlowState
    period: float  # true period in ns (drift applied)
    phase_ns: int
    intervals: list[tuple[int, int]]
    rng: np.random.Generator
    tail_rng: np.random.Generator | None
    deadline_ns: int
    interval: int = 0
    k: int = 0
    last_send: int = -1
    #: The next send instant (drawn one ahead); -1: the flow has no more sends.
    next_at: int = -1
    sends: list[int] = field(default_factory=list)


class LsFlows:
    """Drives the ``[[workload.ls_flows]]`` of a run on a :class:`Simulation`."""

    def __init__(
        self,
        sim: Simulation,
        configs: list[LsFlowConfig],
        *,
        repair_ns: int | None,
        until_ns: int | None = None,
    ) -> None:
        self.sim = sim
        self._flows: list[_Flow] = []
        for cfg in configs:
            state = sim.flow(cfg.name, cfg.src, cfg.dst, AccessCategory(cfg.category),
                             bulk=False, repair_ns=repair_ns)  # fmt: skip
            period = cfg.period_us * NS_PER_US * (1.0 + cfg.drift_ppm * 1e-6)
            if cfg.phase_us == "random":
                phase = int(sim.rng(f"ls-phase:{cfg.name}").integers(0, max(1, round(period))))
            else:
                phase = us(float(cfg.phase_us))
            if cfg.active_us is None:
                intervals = [(0, 2**62)]
            else:
                intervals = [
                    (us(a), us(b) if math.isfinite(b) else 2**62) for a, b in cfg.active_us
                ]
            tail = cfg.jitter is JitterKind.PARETO_TAIL
            self._flows.append(_Flow(
                cfg=cfg, state=state, period=period, phase_ns=phase, intervals=intervals,
                rng=sim.rng(f"ls-jitter:{cfg.name}"),
                tail_rng=sim.rng(f"ls-tail:{cfg.name}") if tail else None,
                deadline_ns=us(cfg.deadline),
            ))  # fmt: skip

    @property
    def flow_names(self) -> frozenset[str]:
        """Every flow's name."""
        return frozenset(f.cfg.name for f in self._flows)

    @property
    def coordinated(self) -> frozenset[str]:
        """The flows the team protects (its senders' gates learn them)."""
        return frozenset(f.cfg.name for f in self._flows if f.cfg.coordinated)

    @property
    def deadlines_ns(self) -> dict[str, int]:
        """Each flow's latency bound."""
        return {f.cfg.name: f.deadline_ns for f in self._flows}

    def begin(self) -> None:
        for f in self._flows:
            self._schedule_next(f)

    # -- sending ---------------------------------------------------------------------------
    def _delay(self, f: _Flow) -> int:
        cfg = f.cfg
        sigma = us(cfg.jitter_us)
        d = abs(round(f.rng.normal(0.0, sigma))) if sigma else 0
        if f.tail_rng is not None:
            u = f.tail_rng.random()
            y = f.tail_rng.pareto(cfg.tail_shape)  # Lomax: scale·(1 + y) is Pareto type I
            if u < cfg.tail_probability:
                d += min(round(us(cfg.tail_scale_us) * (1.0 + y)), us(cfg.tail_max_us))
        return d

    def _schedule_next(self, f: _Flow) -> None:
        """Draw the flow's next send and schedule it (nothing once its intervals end)."""
        while f.interval < len(f.intervals):
            start, stop = f.intervals[f.interval]
            due = start + f.phase_ns + round(f.k * f.period)
            if due < stop:
                f.k += 1
                at = max(due + self._delay(f), f.last_send, self.sim.now_ns)
                f.next_at = at
                self.sim.call_at(at, self._send, f)
                return
            f.interval += 1
            f.k = 0
        f.next_at = -1

    def _send(self, f: _Flow) -> None:
        now = self.sim.now_ns
        f.last_send = now
        f.sends.append(now)
        self.sim.send_message(f.state, f.cfg.size_bytes)
        self._schedule_next(f)

    # -- prediction ------------------------------------------------------------------------
    def next_send(self, robot: str, now_ns: int) -> tuple[int, bool] | None:
        """``(instant, True)``: the next send at or after ``now_ns`` of ``robot``'s
        coordinated flows (exact: drawn one ahead); None if none is scheduled."""
        best = -1
        for f in self._flows:
            if f.cfg.src != robot or not f.cfg.coordinated:
                continue
            at = f.next_at
            if at >= now_ns and (best < 0 or at < best):
                best = at
        return None if best < 0 else (best, True)
