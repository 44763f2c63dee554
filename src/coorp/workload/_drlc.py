"""Distributed reinforcement-learning coordination (DRLC, paper §III-A).

The leader collects one data item per MPC loop. Each epoch it sends every worker a
partition of the batch, the workers train, send parameter updates to the leader, and the
leader sends the new model back. Bulk transfers start through the policy
(:meth:`coorp.policies.Policy.send_bulk`), so permits and gates apply to them.

* BSP: the next epoch starts when every worker has the new model.
* SSP (staleness 1): the next epoch starts once every update of this one has arrived
  (so its data overlaps this epoch's model dissemination), but epoch e never starts
  before every worker has the model of epoch e − 2.
* ASP: each worker cycles on its own (data -> train -> update -> model); an "epoch" is
  one worker cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from coorp.scenario import AccessCategory, DrlcConfig, SyncMode
from coorp.sim import Simulation
from coorp.sim.packets import FlowState
from coorp.units import us

__all__ = ["Drlc", "EpochRecord"]

BulkSender = Callable[[str, FlowState, int, Callable[[int], None]], None]


@dataclass(frozen=True, slots=True)
class EpochRecord:
    index: int
    worker: str | None  # None for BSP/SSP epochs (all workers), the worker for ASP
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class Drlc:
    def __init__(
        self,
        sim: Simulation,
        cfg: DrlcConfig,
        leader: str,
        workers: tuple[str, ...],
        item_bytes: int,
        send_bulk: BulkSender,
    ) -> None:
        self.sim = sim
        self.cfg = cfg
        self.leader = leader
        self.workers = workers
        self.send_bulk = send_bulk
        self.partition_bytes = max(1, cfg.batch_items * item_bytes // len(workers))
        self.train_ns = us(cfg.train_us)
        f = sim.flow
        be = AccessCategory.BE
        self.data_flow = {w: f(f"data:{w}", leader, w, be, bulk=True) for w in workers}
        self.update_flow = {w: f(f"update:{w}", w, leader, be, bulk=True) for w in workers}
        self.model_flow = {w: f(f"model:{w}", leader, w, be, bulk=True) for w in workers}
        self.items = 0
        self.epochs: list[EpochRecord] = []
        self._models_done: set[int] = set()
        self._epoch = 0
        self._running = False
        self._epoch_start = 0
        self._count = 0
        self._asp_start: dict[str, int] = {}
        self._asp_waiting: list[str] = []
        self._asp_done = 0
        self.per_worker_items = max(1, cfg.batch_items // len(workers))

    @property
    def bulk_flow_names(self) -> frozenset[str]:
        flows = (*self.data_flow.values(), *self.update_flow.values(), *self.model_flow.values())
        return frozenset(f.name for f in flows)

    def add_item(self) -> None:
        """One MPC loop produced a data item."""
        self.items += 1
        if self.cfg.sync is SyncMode.ASP:
            self._asp_dispatch()
        else:
            self._maybe_start_epoch()

    # -- BSP / SSP -----------------------------------------------------------------------
    def _maybe_start_epoch(self) -> None:
        if self._running or self.items < self.cfg.batch_items:
            return
        stale = self._epoch - 2
        if self.cfg.sync is SyncMode.SSP and stale >= 0 and stale not in self._models_done:
            return  # staleness 1: epoch e needs the model of epoch e - 2 everywhere
        self.items -= self.cfg.batch_items
        self._running = True
        self._epoch_start = self.sim.now_ns
        self._count = 0
        e = self._epoch
        for w in self.workers:
            self.send_bulk(
                self.leader, self.data_flow[w], self.partition_bytes,
                partial(self._train, e, w),
            )  # fmt: skip

    def _train(self, e: int, w: str, now: int) -> None:
        self.sim.call_at(now + self.train_ns, self._send_update, e, w)

    def _send_update(self, e: int, w: str) -> None:
        self.send_bulk(
            w, self.update_flow[w], self.cfg.param_bytes, lambda now: self._updated(e, now)
        )

    def _updated(self, e: int, now: int) -> None:
        self._count += 1
        if self._count < len(self.workers):
            return
        start = self._epoch_start
        remaining = [len(self.workers)]

        def modelled(now: int) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                self.epochs.append(EpochRecord(e, None, start, now))
                self._models_done.add(e)
                if self.cfg.sync is SyncMode.BSP:
                    self._next_epoch()
                else:
                    self._maybe_start_epoch()

        for w in self.workers:
            self.send_bulk(self.leader, self.model_flow[w], self.cfg.param_bytes, modelled)
        if self.cfg.sync is SyncMode.SSP:
            self._next_epoch()

    def _next_epoch(self) -> None:
        self._epoch += 1
        self._running = False
        self._maybe_start_epoch()

    # -- ASP -----------------------------------------------------------------------------
    def begin(self) -> None:
        if self.cfg.sync is SyncMode.ASP:
            self._asp_waiting = list(self.workers)

    def _asp_dispatch(self) -> None:
        while self._asp_waiting and self.items >= self.per_worker_items:
            w = self._asp_waiting.pop(0)
            self.items -= self.per_worker_items
            self._asp_start[w] = self.sim.now_ns
            self.send_bulk(
                self.leader, self.data_flow[w], self.partition_bytes, partial(self._asp_train, w)
            )

    def _asp_train(self, w: str, now: int) -> None:
        self.sim.call_at(now + self.train_ns, self._asp_update, w)

    def _asp_update(self, w: str) -> None:
        self.send_bulk(w, self.update_flow[w], self.cfg.param_bytes,
                       lambda now: self._asp_model(w))  # fmt: skip

    def _asp_model(self, w: str) -> None:
        self.send_bulk(self.leader, self.model_flow[w], self.cfg.param_bytes,
                       lambda now: self._asp_cycle_done(w, now))  # fmt: skip

    def _asp_cycle_done(self, w: str, now: int) -> None:
        self.epochs.append(EpochRecord(self._asp_done, w, self._asp_start[w], now))
        self._asp_done += 1
        self._asp_waiting.append(w)
        self._asp_dispatch()
