"""Learning over the simulated channel: trace-driven replay, staleness, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coorp.learn import FormationSpec, PPOConfig
from coorp.learn._network import LearnSpec, learn_on_channel, summarize
from coorp.scenario import Scenario, SyncMode, load_scenario, resolve_scenario

TINY = LearnSpec(
    ppo=PPOConfig(hidden=8, envs=2, epochs=1, minibatches=1),
    task=FormationSpec(robots=2, horizon=10),
    duration_s=4.0,
)


def _quick(name: str, items: int = 16) -> Scenario:
    """A shipped scenario with short epochs (``items`` data items, 0.1 s of training)."""
    sc = load_scenario(resolve_scenario(name))
    assert sc.workload is not None
    drlc = sc.workload.drlc.model_copy(update={"batch_items": items, "train_us": 100_000.0})
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"drlc": drlc})})


@pytest.fixture(scope="module")
def crl2() -> Scenario:
    return _quick("crl-2")


@pytest.fixture(scope="module")
def crl5() -> Scenario:
    return _quick("crl-5")


def test_bsp_replay_is_deterministic_and_fresh(crl2: Scenario) -> None:
    a = learn_on_channel(crl2, "edca", 1, TINY)
    b = learn_on_channel(crl2, "edca", 1, TINY)
    assert a.epochs >= 3 and a.returns == b.returns and a.times_s == b.times_s
    assert a.staleness == [0] * len(a.staleness)
    assert a.air_bytes == 4 * a.params and a.sync == "bsp"
    assert all(t2 > t1 for t1, t2 in zip(a.times_s, a.times_s[1:], strict=False))


def test_asp_and_ssp_measure_staleness(crl5: Scenario) -> None:
    asp = learn_on_channel(crl5, "edca", 1, LearnSpec(**{**TINY.__dict__, "sync": SyncMode.ASP}))
    assert asp.sync == "asp" and max(asp.staleness) >= 1
    # SSP overlaps an epoch with the previous model's way back only when data is ready
    # early (4 items) and the model takes air time (1 MB): then updates are 1 stale.
    ssp_spec = LearnSpec(**{**TINY.__dict__, "sync": SyncMode.SSP, "air_params": 250_000})
    ssp = learn_on_channel(_quick("crl-5", items=4), "edca", 1, ssp_spec)
    assert ssp.sync == "ssp" and ssp.staleness[0] == 0 and set(ssp.staleness[1:]) == {1}


def test_air_scale_sets_the_transfer_size_not_the_model(crl2: Scenario) -> None:
    big = learn_on_channel(crl2, "edca", 1, LearnSpec(**{**TINY.__dict__, "air_params": 2_000_000}))
    small = learn_on_channel(crl2, "edca", 1, TINY)
    assert big.air_bytes == 8_000_000 and big.params == small.params
    assert big.epochs < small.epochs  # 8 MB syncs take air time


def test_summary_has_cis_and_time_to_target(crl2: Scenario) -> None:
    curves = [learn_on_channel(crl2, "edca", s, TINY) for s in (1, 2)]
    out = summarize(curves, 4.0, target=-1e9, points=20)
    row = out["policies"]["edca"]
    assert row["reached_target"] == 2 and len(row["reward_mean"]) == 20
    assert row["final_reward"]["n"] == 2 and not math.isnan(row["final_reward"]["ci95"])
    assert np.isfinite(row["time_to_target_s"]["mean"])
