"""COORP sends each robot's own bulk transfers one at a time (``serial_transfers``):
in the order they were started, none overlapping, all delivered, the permit kept
from one to the next; and, against the same runs interleaved, fewer of the team's
stations contend for the air at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import ClassVar

import pytest

from coorp.policies import CoorpPolicy
from coorp.sim.packets import FlowState
from coorp.workload import CrlResult, run_crl
from crl_scenarios import crl_scenario
from policy_registry import registered


class _Recording(CoorpPolicy):
    """coorp that writes down when each robot's transfers were asked for, started and
    done (its own calls, not the simulator's)."""

    name = "test-coorp-recording"
    summary = "coorp, recording its transfers"
    log: ClassVar[list[tuple[str, str, str, int]]] = []

    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        log = type(self).log
        log.append(("asked", robot, flow.name, self.team.sim.now_ns))

        def done(now: int) -> None:
            log.append(("done", robot, flow.name, now))
            on_complete(now)

        super().send_bulk(robot, flow, nbytes, done)

    def _start(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        type(self).log.append(("started", robot, flow.name, self.team.sim.now_ns))
        super()._start(robot, flow, nbytes, on_complete)


class _Interleaved(_Recording):
    name = "test-coorp-interleaved"
    summary = "coorp, recording, with a robot's transfers interleaved"
    serial_transfers = False


@pytest.fixture(scope="module", autouse=True)
def policies() -> Iterator[None]:
    with registered(_Recording, _Interleaved):
        yield


def run(
    policy: str, seed: int = 1, *, trace: bool = False
) -> tuple[CrlResult, list[tuple[str, str, str, int]]]:
    # One 8 MB epoch in 3 s: the leader sends the data and then the model to 4 workers.
    _Recording.log = []
    sc = crl_scenario(4, duration_s=3.0, seed=seed, workload={"drlc": {"param_bytes": 8_000_000}})
    result = run_crl(sc, policy, trace=trace)
    return result, _Recording.log


def intervals(log: list[tuple[str, str, str, int]]) -> dict[str, list[tuple[int, int]]]:
    """Per robot, each transfer's (start, done) in the order it started."""
    started: dict[tuple[str, str], list[int]] = {}
    out: dict[str, list[tuple[int, int]]] = {}
    for what, robot, flow, t in log:
        if what == "started":
            started.setdefault((robot, flow), []).append(t)
        elif what == "done":
            start = started[(robot, flow)].pop(0)
            out.setdefault(robot, []).append((start, t))
    return {r: sorted(v) for r, v in out.items()}


def test_a_robots_transfers_run_one_at_a_time_in_the_order_asked() -> None:
    result, log = run("test-coorp-recording")
    asked = [(r, f) for what, r, f, _ in log if what == "asked"]
    started = [(r, f) for what, r, f, _ in log if what == "started"]
    done = [(r, f) for what, r, f, _ in log if what == "done"]
    assert set(done) <= set(started) <= set(asked)
    for robot in {r for r, _ in asked}:
        mine = [f for r, f in asked if r == robot]
        begun = [f for r, f in started if r == robot]
        assert begun == mine[: len(begun)], f"{robot}: started out of order"
        # At most one of its transfers is still going when the run ends.
        assert len(begun) - sum(1 for r, _ in done if r == robot) <= 1
    spans = intervals(log)
    assert len(spans["leader"]) >= 8  # data partitions and models for 4 workers
    for robot, iv in spans.items():
        for (_, end), (start, _) in pairwise(iv):
            assert start >= end, f"{robot}: a transfer started before the one ahead was done"
    # The leader's later transfers waited (3 of 4 per batch), and the next one started at
    # the instant the one ahead was done: no gap, so the permit was never given back.
    assert result.policy_stats["transfers_queued"] >= 6
    lead = spans["leader"]
    assert sum(1 for (_, end), (start, _) in pairwise(lead) if start == end) >= 6
    assert result.epochs, "the epoch finished"


def workers_on_air(result: CrlResult, start: int, end: int, bin_ns: int) -> list[int]:
    """Per ``bin_ns`` of [start, end): how many workers sent a frame of the model's TCP
    acks in it (AC_VI, ``CoorpPolicy.ack_ac``; AC_BE without it), from the channel
    trace."""
    bins: dict[int, set[str]] = {}
    for t in result.sim.trace or []:
        t0, _t1, _collided, names, acs = t[:5]
        if start <= t0 < end:
            for name, ac in zip(names, acs, strict=True):
                if name != "leader" and ac in ("BE", "VI"):
                    bins.setdefault((t0 - start) // bin_ns, set()).add(name)
    return [len(bins.get(k, ())) for k in range((end - start) // bin_ns)]


@pytest.mark.parametrize("seed", [1, 2])
def test_interleaved_the_model_has_four_ack_senders_at_once_serial_one(seed: int) -> None:
    serial, log_s = run("test-coorp-recording", seed, trace=True)
    mixed, log_m = run("test-coorp-interleaved", seed, trace=True)
    assert "transfers_queued" in serial.policy_stats
    assert "transfers_queued" not in mixed.policy_stats
    lead = intervals(log_m)["leader"]
    assert any(start < end for (_, end), (start, _) in pairwise(lead))

    def model_phases(log: list[tuple[str, str, str, int]]) -> list[tuple[int, int]]:
        """Each model the leader sent: from when it was asked to send it to its 4
        workers until the last of them had it."""
        asked: dict[int, int] = {}  # ask instant -> how many of that batch not done yet
        spans: dict[int, int] = {}
        batch_of: dict[str, int] = {}
        for what, r, f, t in log:
            if r != "leader" or not f.startswith("model:"):
                continue
            if what == "asked":
                asked[t] = asked.get(t, 0) + 1
                batch_of[f] = t
            elif what == "done":
                b = batch_of[f]
                asked[b] -= 1
                if asked[b] == 0:
                    spans[b] = t
        return sorted(spans.items())

    def counts(result: CrlResult, log: list[tuple[str, str, str, int]]) -> list[int]:
        out: list[int] = []
        for start, end in model_phases(log):
            out += workers_on_air(result, start, end, bin_ns=20_000_000)
        return out

    # While the leader sends a model, each 20 ms: serial, one worker (two where one
    # transfer hands over to the next) sends acks; interleaved, usually all four.
    s_counts, m_counts = counts(serial, log_s), counts(mixed, log_m)
    assert s_counts and m_counts
    assert max(s_counts) <= 2
    assert sum(s_counts) / len(s_counts) < 1.5
    assert sum(m_counts) / len(m_counts) > 3.0
