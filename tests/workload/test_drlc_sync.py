"""DRLC epochs under BSP, SSP and ASP, and the BH-only baseline run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import pytest

from coorp.policies import EdcaPolicy, register_policy
from coorp.sim.packets import FlowState
from coorp.workload import CrlResult, EpochRecord, run_crl
from crl_scenarios import crl_scenario

PARAM = 2_000_000
PERCEPTION, CONTROL = 12_288, 1_024


@dataclass
class Transfer:
    robot: str
    flow: str
    src: str
    dst: str
    nbytes: int
    start_ns: int
    delivered_before: int
    end_ns: int = -1
    delivered_after: int = -1


TRANSFERS: list[Transfer] = []


@register_policy
class SpyEdca(EdcaPolicy):
    name = "test-spy-edca-transfers"
    summary = "EDCA, recording every bulk transfer the workload starts"

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        rec = Transfer(robot, flow.name, flow.src.name, flow.dst.name, nbytes,
                       self.team.sim.now_ns, flow.delivered_bytes)  # fmt: skip
        TRANSFERS.append(rec)

        def done(now: int) -> None:
            rec.end_ns = now
            rec.delivered_after = flow.delivered_bytes
            on_complete(now)

        super().send_bulk(robot, flow, nbytes, done)


def run(sync: str, workers: int = 2, duration_s: float = 1.5) -> tuple[CrlResult, list[Transfer]]:
    TRANSFERS.clear()
    sc = crl_scenario(workers, duration_s=duration_s, workload={"drlc": {"sync": sync}})
    return run_crl(sc, "test-spy-edca-transfers"), list(TRANSFERS)


def partition(workers: int) -> int:
    item = workers * (PERCEPTION + CONTROL)  # default item: one loop's messages
    return 4 * item // workers


def by_index(epochs: tuple[EpochRecord, ...]) -> list[EpochRecord]:
    out = sorted(epochs, key=lambda e: e.index)
    assert [e.index for e in out] == list(range(len(out)))
    return out


def check_transfer_kinds(transfers: list[Transfer], workers: int) -> None:
    names = [f"r{i + 1}" for i in range(workers)]

    def alone(t: Transfer) -> bool:  # no other transfer on its flow at the same time
        return not any(
            o is not t and o.flow == t.flow and o.start_ns < t.end_ns
            and (o.end_ns < 0 or o.end_ns > t.start_ns)
            for o in transfers
        )  # fmt: skip

    for t in transfers:
        kind, w = t.flow.split(":")
        assert w in names
        assert (t.src, t.dst) == (("leader", w) if kind in ("data", "model") else (w, "leader"))
        assert t.robot == t.src
        assert t.nbytes == (partition(workers) if kind == "data" else PARAM)
        if t.end_ns >= 0 and alone(t):  # every byte of this transfer arrived on its flow
            assert t.delivered_after - t.delivered_before == t.nbytes


def test_bsp_epochs_are_sequential_and_move_the_right_bytes() -> None:
    workers = 3
    result, transfers = run("bsp", workers)
    epochs = by_index(result.epochs)
    assert len(epochs) >= 3
    check_transfer_kinds(transfers, workers)
    for a, b in pairwise(epochs):
        assert b.start_ns >= a.end_ns  # no overlap
    for e in epochs:
        assert e.worker is None
        inside = [t for t in transfers if e.start_ns <= t.start_ns < e.end_ns]
        # Per worker: its data partition, its update, the new model; nothing else.
        assert sorted(t.flow for t in inside) == sorted(
            f"{k}:r{i + 1}" for i in range(workers) for k in ("data", "update", "model")
        )
        assert all(0 <= t.end_ns <= e.end_ns for t in inside)
        assert max(t.end_ns for t in inside) == e.end_ns  # ends with the last model
        assert sum(t.nbytes for t in inside) == workers * (partition(workers) + 2 * PARAM)
        data = [t for t in inside if t.flow.startswith("data:")]
        assert all(t.start_ns == e.start_ns for t in data)
        # Updates follow each worker's own data; the model follows every update.
        last_update = max(t.end_ns for t in inside if t.flow.startswith("update:"))
        for t in inside:
            w = t.flow.split(":")[1]
            if t.flow.startswith("update:"):
                assert t.start_ns > next(d.end_ns for d in data if d.flow == f"data:{w}")
            if t.flow.startswith("model:"):
                assert t.start_ns == last_update


def test_ssp_starts_the_next_epoch_when_the_updates_are_in() -> None:
    result, transfers = run("ssp", 2)
    epochs = by_index(result.epochs)
    assert len(epochs) >= 3
    check_transfer_kinds(transfers, 2)
    for e in epochs:
        updates = [t for t in transfers if t.flow.startswith("update:")
                   and e.start_ns < t.start_ns < e.end_ns]  # fmt: skip
        last_update = max(t.end_ns for t in updates[:2])
        nxt = [b for b in epochs if b.index == e.index + 1]
        if nxt:  # epoch k+1 waits for epoch k's updates (and for enough data items)
            assert nxt[0].start_ns >= last_update
    # Staleness is used: the next epoch's data flows during this epoch's model.
    assert any(b.start_ns < a.end_ns for a, b in pairwise(epochs))


@pytest.mark.parametrize("workers", [2, 3])
def test_ssp_epochs_overlap_by_at_most_one(workers: int) -> None:
    result, _ = run("ssp", workers)
    epochs = by_index(result.epochs)
    assert len(epochs) >= 3
    for a, c in zip(epochs, epochs[2:], strict=False):
        assert c.start_ns >= a.end_ns  # epoch k+2 waits for epoch k


def test_asp_records_one_cycle_per_worker() -> None:
    workers = 2
    result, transfers = run("asp", workers)
    cycles = by_index(result.epochs)
    check_transfer_kinds(transfers, workers)
    per_worker: dict[str, list[EpochRecord]] = {}
    for c in cycles:
        assert c.worker is not None
        per_worker.setdefault(c.worker, []).append(c)
    assert set(per_worker) == {"r1", "r2"}
    assert all(len(v) >= 2 for v in per_worker.values())
    # Records are appended as cycles finish.
    assert [c.end_ns for c in result.epochs] == sorted(c.end_ns for c in result.epochs)
    for w, mine in per_worker.items():
        for a, b in pairwise(mine):
            assert b.start_ns >= a.end_ns  # a worker's cycles do not overlap
        for c in mine:
            # One cycle = this worker's data, update and model, in that order.
            inside = [
                t for t in transfers
                if t.flow.endswith(f":{w}") and c.start_ns <= t.start_ns < c.end_ns
            ]  # fmt: skip
            assert [t.flow.split(":")[0] for t in inside] == ["data", "update", "model"]
            assert inside[-1].end_ns == c.end_ns


@pytest.mark.parametrize("policy", ["edca", "coorp"])
def test_bh_only_has_no_ls_traffic_and_more_bulk(policy: str) -> None:
    sc = crl_scenario(2, duration_s=1.5)
    full = run_crl(sc, policy)
    bh = run_crl(sc, policy, bh_only=True)
    assert bh.bh_only and not full.bh_only
    assert bh.loops == () and bh.ls_latency_ns.size == 0 and bh.ls_hw_depths.size == 0
    ls = ("perception:", "control:")
    assert not any(f.startswith(ls) for f in bh.sim.messages["flow"])
    assert not any(n.startswith(ls) for n in bh.sim.flows)
    assert any(n.startswith(ls) for n in full.sim.flows)
    assert len(bh.epochs) >= 2  # data items still arrive once per period
    assert bh.bh_bytes > 0
    assert bh.bh_mbps >= full.bh_mbps
