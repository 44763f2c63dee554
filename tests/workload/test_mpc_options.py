"""Scenario options of the MPC loop that make the simulated workload more realistic:
random LS phases, heavy-tailed send jitter, and an unprotected leader (COORP as
published). Each test runs a tiny team over a few seeds and checks the mechanism."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from coorp import ScenarioError
from coorp.scenario import Scenario
from coorp.workload import CrlResult, run_crl
from crl_scenarios import crl_scenario

START_NS = 10_000_000
PERIOD_NS = round(33_333.3 * 1000)


def mpc_only(workers: int, seed: int, duration_s: float = 1.0, **mpc: object) -> Scenario:
    return crl_scenario(
        workers, duration_s=duration_s, seed=seed,
        workload={"drlc": {"enabled": False}, "mpc": mpc},
    )  # fmt: skip


def perception_sends(r: CrlResult) -> dict[str, list[int]]:
    """Each worker's perception send instants, in order."""
    m = r.sim.messages
    out: dict[str, list[int]] = defaultdict(list)
    for flow, created in zip(m["flow"], m["created_ns"], strict=True):
        if str(flow).startswith("perception:"):
            out[str(flow).split(":", 1)[1]].append(int(created))
    return {w: sorted(v) for w, v in out.items()}


def test_random_phases_spread_the_perceptions_over_the_period() -> None:
    jitter_us = 100.0
    phases: list[float] = []
    for seed in (1, 2, 3, 4):
        aligned = run_crl(mpc_only(8, seed, jitter_us=jitter_us), "edca")
        random = run_crl(mpc_only(8, seed, jitter_us=jitter_us, phase="random"), "edca")
        for sends in perception_sends(aligned).values():
            # Aligned: every send lies just after a loop start.
            starts = {lp.index: lp.start_ns for lp in aligned.loops}
            for k, t in enumerate(sends[: len(starts)]):
                assert 0 <= t - starts[k] < 6 * jitter_us * 1000
        by_worker = perception_sends(random)
        offsets = {}
        for w, sends in by_worker.items():
            rel = (np.array(sends) - START_NS) % PERIOD_NS
            # Each worker keeps one phase: its sends stay within the jitter of the first
            # (distances taken around the period's circle).
            spread = (rel - rel[0] + PERIOD_NS // 2) % PERIOD_NS - PERIOD_NS // 2
            assert np.ptp(spread) < 6 * jitter_us * 1000
            offsets[w] = int(rel[0])
        phases += [o / PERIOD_NS for o in offsets.values()]
        # A loop counts from its last sample: the largest phase after the tick.
        last = max(offsets.values())
        for lp in random.loops:
            assert abs(lp.start_ns - (START_NS + lp.index * PERIOD_NS + last)) < 6e3 * jitter_us
            assert lp.lag_ns == 0  # workers free-run: a late loop delays nobody
    # 32 phases from four seeds cover every quarter of the period.
    quarters = {int(4 * p) for p in phases}
    assert quarters == {0, 1, 2, 3}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pareto_tail_adds_rare_long_delays_on_top_of_the_same_gaussian(seed: int) -> None:
    sigma_us, p, scale_us, cap_us = 100.0, 0.2, 1_000.0, 5_000.0
    tail = {"jitter": "pareto-tail", "tail_probability": p, "tail_scale_us": scale_us,
            "tail_max_us": cap_us}  # fmt: skip
    g = run_crl(mpc_only(4, seed, 3.0, jitter_us=sigma_us), "edca")
    h = run_crl(mpc_only(4, seed, 3.0, jitter_us=sigma_us, **tail), "edca")
    extra: list[int] = []
    beyond: list[int] = []
    for r, out in ((g, None), (h, beyond)):
        starts = [lp.start_ns for lp in r.loops]
        for sends in perception_sends(r).values():
            n = min(len(sends), len(starts))
            d = np.array(sends[:n]) - np.array(starts[:n])
            if out is None:
                assert (d < 4 * sigma_us * 1000).mean() > 0.999
            else:
                out.extend(d.tolist())
    # Paired: the tail run's delay is the Gaussian run's plus 0 or a tail draw in
    # [scale, cap] (loop starts differ once a tail delays a loop, so compare the delays).
    gd = []
    for r in (g,):
        starts = [lp.start_ns for lp in r.loops]
        for sends in perception_sends(r).values():
            n = min(len(sends), len(starts))
            gd.extend((np.array(sends[:n]) - np.array(starts[:n])).tolist())
    n = min(len(gd), len(beyond))
    for a, b in zip(gd[:n], beyond[:n], strict=True):
        diff = b - a
        assert diff == 0 or scale_us * 1000 <= diff <= cap_us * 1000
        extra.append(diff)
    hits = np.count_nonzero(np.array(beyond) > 4 * sigma_us * 1000)
    total = len(beyond)
    # Beyond 4σ: the Gaussian alone almost never (6e-5); with the tail, a share p.
    assert abs(hits - p * total) <= 4 * np.sqrt(total * p * (1 - p))
    assert max(extra) <= cap_us * 1000


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_unprotected_leader_gate_opens_no_window(seed: int) -> None:
    def leader_denials(protect: bool) -> int:
        sc = crl_scenario(3, duration_s=1.5, seed=seed,
                          policy={"coorp": {"protect_leader": protect}})  # fmt: skip
        g = run_crl(sc, "coorp").policy_stats["gate"]["leader"]
        assert g["allowed"] > 0  # the leader did send bulk data (models, data)
        return int(g["denied_ahead"] + g["denied_inside"])

    assert leader_denials(False) == 0
    assert leader_denials(True) > 0


@pytest.mark.parametrize("category", ["VO", "VI"])
def test_the_loops_category_decides_how_its_messages_go_on_the_air(category: str) -> None:
    """``[workload.mpc] category``: perceptions and controls go in that access category.
    VO is not aggregated by default, so a 12 KB perception takes one exchange per MPDU
    (9); VI is, so it takes one A-MPDU of all 9 and the loop uses a fifth of the
    exchanges."""
    sc = mpc_only(2, 1, duration_s=0.3, category=category)
    r = run_crl(sc, "edca", trace=True)
    assert r.sim.trace
    cats = {c for t in r.sim.trace for c in t[4]}
    assert cats == {category}  # nothing else runs in this scenario
    mpdus = sorted({n for t in r.sim.trace for n in t[5]})
    loops = len(r.loops)
    assert loops >= 8
    per_loop = len(r.sim.trace) / loops
    if category == "VO":
        assert mpdus == [1]
        assert per_loop == pytest.approx(2 * (9 + 1), rel=0.05)  # 2 workers: 9 + 1 MPDUs each
    else:
        assert 9 in mpdus
        assert per_loop == pytest.approx(2 * (1 + 1), rel=0.05)  # one A-MPDU each way


def test_the_loops_category_is_checked() -> None:
    with pytest.raises(ScenarioError, match=r"workload.mpc.category = 'voice': allowed: .*'VO'"):
        mpc_only(2, 1, category="voice")
