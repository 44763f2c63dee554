"""Learning over the team's simulated network: reward against simulated time.

Each robot of the scenario's workload is a PPO worker (its own formation-task copies and
random stream); the leader is the parameter server. The DRLC epochs of the scenario run
on the simulated 802.11 channel under a policy, alongside the MPC loop, with the
parameter transfers (update up, model down) sized to the *real* parameter tensor:
``4 × n_params`` bytes, or ``4 × air_params`` when a scale is asked for (the paper's
10 M parameters = 40 MB) while the learned model stays small.

The coupling is trace-driven and exact: what travels depends only on sizes, never on the
values, so the simulation runs first and yields, per epoch (BSP/SSP) or per worker cycle
(ASP), when it started and when the new model had reached the workers. The learning is
then replayed in that order on the real tensors:

* **BSP** – epoch ``e`` trains on model ``e`` everywhere; the leader averages the
  workers' parameters; model ``e + 1`` exists at the epoch's end. Staleness 0.
* **SSP** – epoch ``e`` starts once every update of ``e - 1`` arrived, before its model
  is back: a worker trains on the newest model fully disseminated at the epoch's start.
  The leader adds the mean of the workers' deltas (new − the model they started from).
* **ASP** – each worker cycles alone; the leader adds ``delta / n_workers`` when its
  cycle completes and sends back the current model.

Staleness of an update = the model versions the leader made between the one the worker
trained on and the one the update is applied to; it is measured per update from the
trace and reported, and shows in the curves. A point of a learning curve is (the
simulated time a model version was in place at the leader, its score): the mean return
of the greedy policy over ``eval_episodes`` episodes from fixed start states, the same
for every version, seed and policy (common random numbers: the curves compare models,
not the luck of the training episodes, which are kept as ``train_returns``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.learn._formation import FormationSpec
from coorp.learn._ppo import PPO, Layout, PPOConfig
from coorp.learn._sync import merge_async, merge_mean_delta
from coorp.scenario import Scenario, SyncMode

__all__ = ["LearnCurve", "LearnSpec", "learn_on_channel", "summarize"]


@dataclass(frozen=True)
class LearnSpec:
    ppo: PPOConfig = field(default_factory=lambda: PPOConfig(hidden=32, envs=8, lr=1e-2))
    task: FormationSpec = field(default_factory=lambda: FormationSpec(robots=3, horizon=30))
    #: Parameters counted on the air (None: the real model's). 10_000_000 = the paper.
    air_params: int | None = None
    sync: SyncMode | None = None  # None: the scenario's
    duration_s: float | None = None
    #: Greedy episodes from fixed start states that score each model version.
    eval_episodes: int = 32
    #: Seed of the initial model, shared by every run.
    init_seed: int = 0

    def air_bytes(self) -> int:
        n = (
            self.air_params
            if self.air_params is not None
            else Layout(self.ppo.hidden, self.ppo.layers).size
        )
        return 4 * n


@dataclass
class LearnCurve:
    policy: str
    seed: int
    sync: str
    times_s: list[float]
    returns: list[float]
    staleness: list[int]
    #: Mean episode return the workers collected while training each update.
    train_returns: list[float]
    violation_rate: float
    epochs: int
    initial_return: float
    air_bytes: int
    params: int

    def reward_at(self, grid_s: np.ndarray) -> np.ndarray:
        """The curve as a step function on ``grid_s`` (the initial return before the first
        model update)."""
        out = np.full(len(grid_s), self.initial_return)
        t = np.asarray(self.times_s)
        r = np.asarray(self.returns)
        idx = np.searchsorted(t, grid_s, side="right") - 1
        ok = idx >= 0
        out[ok] = r[idx[ok]]
        return out

    def time_to(self, target: float) -> float:
        for t, r in zip(self.times_s, self.returns, strict=True):
            if r >= target:
                return t
        return math.inf


def _scenario(scenario: Scenario, spec: LearnSpec, source: str) -> Scenario:
    from coorp.scenario import apply_overrides

    wl = scenario.workload
    if wl is None or not wl.drlc.enabled:
        raise UsageError(
            f"{source} has no [workload.drlc] to carry the learning; see docs/learn.md"
        )
    combo: list[tuple[str, Any]] = [("workload.drlc.param_bytes", spec.air_bytes())]
    if spec.sync is not None:
        combo.append(("workload.drlc.sync", spec.sync.value))
    return apply_overrides(scenario, combo, source=source, origin="coorp learn")


def learn_on_channel(
    scenario: Scenario,
    policy: str,
    seed: int,
    spec: LearnSpec,
    *,
    source: str = "<scenario>",
    on_progress: Callable[[int], None] | None = None,
) -> LearnCurve:
    """Simulate ``scenario`` under ``policy`` and replay PPO on its epoch trace."""
    from coorp.workload import run_crl

    sc = _scenario(scenario, spec, source)
    dur = None if spec.duration_s is None else round(spec.duration_s * 1e9)
    res = run_crl(
        sc, policy, seed=seed, duration_ns=dur, source=source, timeseries=False,
        on_progress=on_progress,
    )  # fmt: skip
    assert sc.workload is not None
    sync = sc.workload.drlc.sync
    workers = list(sc.workers)
    layout = Layout(spec.ppo.hidden, spec.ppo.layers)
    ppos = [PPO(spec.ppo, spec.task, seed * 1000 + i + 1) for i in range(len(workers))]
    # versions[v]: the model after v leader updates; every seed starts from the same one
    # (the seed varies the channel and the workers' episodes), so curves start together.
    versions = [layout.init(spec.init_seed)]
    judge = ppos[0]
    init_return = judge.evaluate(versions[0], spec.eval_episodes)
    times: list[float] = []
    rets: list[float] = []
    train: list[float] = []
    stale: list[int] = []
    if sync is SyncMode.ASP:
        have = dict.fromkeys(workers, 0)  # model version each worker holds
        index = {w: i for i, w in enumerate(workers)}
        for rec in sorted(res.epochs, key=lambda r: (r.end_ns, r.index)):
            w = rec.worker
            assert w is not None
            base = versions[have[w]]
            new, ro = ppos[index[w]].local_update(base)
            nxt = merge_async(versions[-1], base, new, len(workers))
            stale.append(len(versions) - 1 - have[w])
            versions.append(nxt)
            have[w] = len(versions) - 1
            times.append(rec.end_ns / 1e9)
            rets.append(judge.evaluate(nxt, spec.eval_episodes))
            train.append(ro.episode_return)
    else:
        ends = sorted(r.end_ns for r in res.epochs)
        for rec in sorted(res.epochs, key=lambda r: r.index):
            # Newest model fully disseminated when this epoch started (BSP: the previous).
            v = int(np.searchsorted(ends, rec.start_ns, side="right"))
            v = min(v, len(versions) - 1)
            base = versions[v]
            news = []
            epoch_rets = []
            for p in ppos:  # worker order: a fixed summation order
                new, ro = p.local_update(base)
                news.append(new)
                epoch_rets.append(ro.episode_return)
            versions.append(merge_mean_delta(versions[-1], base, news))
            stale.append(len(versions) - 2 - v)
            times.append(rec.end_ns / 1e9)
            rets.append(judge.evaluate(versions[-1], spec.eval_episodes))
            train.append(float(np.mean(epoch_rets)))
    return LearnCurve(
        policy=policy,
        seed=seed,
        sync=sync.value,
        times_s=times,
        returns=rets,
        staleness=stale,
        train_returns=train,
        violation_rate=res.violation_rate,
        epochs=len(res.epochs),
        initial_return=init_return,
        air_bytes=spec.air_bytes(),
        params=layout.size,
    )


def summarize(
    curves: Sequence[LearnCurve], duration_s: float, target: float | None = None, points: int = 200
) -> dict[str, Any]:
    """Per policy: mean reward on a time grid with 95% CIs over seeds, time to ``target``
    (default: half-way from the initial return to the best final return of any run),
    final reward, epochs, staleness and MPC violation rate."""
    from coorp.stats import mean_ci

    if not curves:
        raise UsageError("no learning curves to summarize")
    if target is None:
        init = float(np.mean([c.initial_return for c in curves]))
        best = max((c.returns[-1] for c in curves if c.returns), default=init)
        target = init + 0.5 * (best - init)
    grid = np.linspace(0.0, duration_s, points)
    out: dict[str, Any] = {"target": target, "grid_s": grid.tolist(), "policies": {}}
    for pol in dict.fromkeys(c.policy for c in curves):
        mine = [c for c in curves if c.policy == pol]
        mat = np.stack([c.reward_at(grid) for c in mine])
        cis = [mean_ci(mat[:, j]) for j in range(len(grid))]

        def ci(vals: Sequence[float]) -> dict[str, float]:
            m = mean_ci(vals)
            return {"mean": m.mean, "ci95": m.ci95, "n": m.n}

        ttt = [c.time_to(target) for c in mine]
        st = [s for c in mine for s in c.staleness]
        out["policies"][pol] = {
            "seeds": [c.seed for c in mine],
            "sync": mine[0].sync,
            "reward_mean": [m.mean for m in cis],
            "reward_ci95": [0.0 if math.isnan(m.ci95) else m.ci95 for m in cis],
            "final_reward": ci([c.returns[-1] if c.returns else c.initial_return for c in mine]),
            "time_to_target_s": ci([t for t in ttt if math.isfinite(t)]),
            "reached_target": sum(math.isfinite(t) for t in ttt),
            "epochs": ci([float(c.epochs) for c in mine]),
            "violation_rate": ci([c.violation_rate for c in mine]),
            "staleness_mean": float(np.mean(st)) if st else 0.0,
            "staleness_max": int(max(st)) if st else 0,
            "curves": [
                {
                    "seed": c.seed,
                    "t_s": c.times_s,
                    "reward": c.returns,
                    "train_return": c.train_returns,
                    "staleness": c.staleness,
                }
                for c in mine
            ],
        }
    return out
