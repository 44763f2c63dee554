"""PPO on numpy: a small MLP with hand-written backpropagation, Adam, GAE, clipping.

Why numpy (see ``docs/learn.md`` for the measurements): the networks that fit the
team's experiments are tiny (two hidden layers of 16–256 units), where a framework's
dispatch costs more than the arithmetic; numpy is already a dependency (no install,
no GPU wheels, no JIT warm-up), float32 results are bit-for-bit reproducible on one
machine, and the parameters are one flat ``float32`` array — exactly the tensor that
travels on the transport or the simulated air.

The policy and the value function are two MLPs (tanh hidden layers) whose weights live
in one flat vector (:class:`Layout` gives the views). A worker's step
(:meth:`PPO.local_update`) samples ``envs`` episodes of the formation task with the
current parameters, runs ``epochs`` × ``minibatches`` PPO steps on them and returns the
new parameters, the episode return and the sample count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coorp._errors import UsageError
from coorp.learn._blas import single_thread_blas
from coorp.learn._env import make_batch
from coorp.learn._formation import N_ACTIONS, OBS_DIM, FormationSpec

__all__ = ["PPO", "Layout", "PPOConfig", "Rollout"]

F32 = np.float32


@dataclass(frozen=True, slots=True)
class PPOConfig:
    hidden: int = 32
    layers: int = 2
    lr: float = 3e-3
    gamma: float = 0.95
    lam: float = 0.9
    clip: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    epochs: int = 4
    minibatches: int = 4
    max_grad_norm: float = 0.5
    envs: int = 8

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.layers < 1 or self.epochs < 1 or self.minibatches < 1:
            raise UsageError("hidden, layers, epochs and minibatches must be >= 1")


class Layout:
    """Shapes of the policy and value MLPs inside one flat parameter vector."""

    def __init__(self, hidden: int, layers: int) -> None:
        dims_pi = [OBS_DIM, *([hidden] * layers), N_ACTIONS]
        dims_v = [OBS_DIM, *([hidden] * layers), 1]
        self.shapes: list[tuple[str, tuple[int, ...]]] = []
        for net, dims in (("pi", dims_pi), ("v", dims_v)):
            for k in range(len(dims) - 1):
                self.shapes += [
                    (f"{net}.W{k}", (dims[k], dims[k + 1])),
                    (f"{net}.b{k}", (dims[k + 1],)),
                ]
        self.offsets: dict[str, tuple[int, tuple[int, ...]]] = {}
        pos = 0
        for name, shape in self.shapes:
            self.offsets[name] = (pos, shape)
            pos += int(np.prod(shape))
        self.size = pos
        self.depth = layers + 1

    def view(self, flat: np.ndarray, name: str) -> np.ndarray:
        pos, shape = self.offsets[name]
        return flat[pos : pos + int(np.prod(shape))].reshape(shape)

    def init(self, seed: int) -> np.ndarray:
        """Orthogonal-ish init (scaled Gaussian), zero biases; small policy head."""
        rng = np.random.default_rng(seed)
        flat = np.zeros(self.size, F32)
        for name, shape in self.shapes:
            if ".W" in name:
                gain = 0.01 if name == f"pi.W{self.depth - 1}" else np.sqrt(2.0)
                w = rng.standard_normal(shape) * gain / np.sqrt(shape[0])
                self.view(flat, name)[...] = w.astype(F32)
        return flat


def _forward(lay: Layout, p: np.ndarray, net: str, x: np.ndarray) -> list[np.ndarray]:
    acts = [x]
    for k in range(lay.depth):
        z = acts[-1] @ lay.view(p, f"{net}.W{k}") + lay.view(p, f"{net}.b{k}")
        acts.append(np.tanh(z) if k < lay.depth - 1 else z)
    return acts


def _backward(
    lay: Layout, p: np.ndarray, g: np.ndarray, net: str, acts: list[np.ndarray], dout: np.ndarray
) -> None:
    dz = dout
    for k in reversed(range(lay.depth)):
        lay.view(g, f"{net}.W{k}")[...] += acts[k].T @ dz
        lay.view(g, f"{net}.b{k}")[...] += dz.sum(0)
        if k:
            dz = (dz @ lay.view(p, f"{net}.W{k}").T) * (1 - acts[k] ** 2)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


@dataclass
class Rollout:
    obs: np.ndarray  # (S, OBS_DIM)
    act: np.ndarray  # (S,)
    logp: np.ndarray
    adv: np.ndarray
    ret: np.ndarray
    episode_return: float  # mean over robots and episodes of the summed reward
    samples: int


class PPO:
    """One worker's PPO: its environments, its Adam state, its random stream."""

    def __init__(self, cfg: PPOConfig, spec: FormationSpec, seed: int) -> None:
        single_thread_blas()  # the workers are the parallelism (see coorp.learn._blas)
        self.cfg = cfg
        self.spec = spec
        self.layout = Layout(cfg.hidden, cfg.layers)
        self.rng = np.random.default_rng(seed)
        self.env = make_batch(spec, cfg.envs)
        self.m = np.zeros(self.layout.size, F32)
        self.v = np.zeros(self.layout.size, F32)
        self.steps = 0

    # -- sampling -------------------------------------------------------------------------
    def policy(self, p: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Sampled actions for ``obs`` (..., OBS_DIM) under parameters ``p``."""
        flat = obs.reshape(-1, OBS_DIM)
        logits = _forward(self.layout, p, "pi", flat)[-1]
        return self._sample(logits).reshape(obs.shape[:-1])

    def _sample(self, logits: np.ndarray) -> np.ndarray:
        # Gumbel-max with this worker's generator: deterministic given the seed.
        u = self.rng.random(logits.shape, dtype=F32)
        return np.argmax(logits - np.log(-np.log(np.clip(u, 1e-12, 1.0))), axis=-1)

    def rollout(self, p: np.ndarray) -> Rollout:
        cfg, lay = self.cfg, self.layout
        obs = self.env.reset(self.rng)
        e, n = obs.shape[:2]
        obs_l, act_l, logp_l, rew_l, val_l = [], [], [], [], []
        done = False
        while not done:
            flat = obs.reshape(-1, OBS_DIM)
            logits = _forward(lay, p, "pi", flat)[-1]
            act = self._sample(logits)
            lp = _log_softmax(logits)[np.arange(len(act)), act]
            val = _forward(lay, p, "v", flat)[-1][:, 0]
            nxt, rew, done = self.env.step(act.reshape(e, n))
            obs_l.append(flat)
            act_l.append(act)
            logp_l.append(lp)
            rew_l.append(rew.reshape(-1))
            val_l.append(val)
            obs = nxt
        last = _forward(lay, p, "v", obs.reshape(-1, OBS_DIM))[-1][:, 0]  # bootstrap (truncation)
        rew_a, val_a = np.stack(rew_l), np.stack(val_l)
        adv = np.zeros_like(rew_a)
        gae = np.zeros_like(last)
        for t in reversed(range(len(rew_l))):
            nv = val_a[t + 1] if t + 1 < len(rew_l) else last
            delta = rew_a[t] + cfg.gamma * nv - val_a[t]
            gae = delta + cfg.gamma * cfg.lam * gae
            adv[t] = gae
        ret = adv + val_a
        return Rollout(
            obs=np.concatenate(obs_l),
            act=np.concatenate(act_l),
            logp=np.concatenate(logp_l).astype(F32),
            adv=adv.reshape(-1).astype(F32),
            ret=ret.reshape(-1).astype(F32),
            episode_return=float(rew_a.sum(0).mean()),
            samples=rew_a.size,
        )

    def evaluate(self, p: np.ndarray, episodes: int = 16, seed: int = 2**31 - 1) -> float:
        """Mean episode return of the greedy policy on ``episodes`` fixed start states
        (the same for every call with this ``seed``: common random numbers, so curves
        compare models, not luck). Leaves this worker's random stream alone."""
        env = make_batch(self.spec, episodes)
        obs = env.reset(np.random.default_rng(seed))
        total = np.zeros(obs.shape[:2], np.float64)
        done = False
        while not done:
            logits = _forward(self.layout, p, "pi", obs.reshape(-1, OBS_DIM))[-1]
            act = logits.argmax(-1).reshape(obs.shape[:2])
            obs, rew, done = env.step(act)
            total += rew
        return float(total.mean())

    # -- learning -------------------------------------------------------------------------
    def grad(self, p: np.ndarray, ro: Rollout, idx: np.ndarray) -> np.ndarray:
        """Gradient of the PPO loss (clipped surrogate + value + entropy) on ``idx``."""
        cfg, lay = self.cfg, self.layout
        obs, act = ro.obs[idx], ro.act[idx]
        adv = ro.adv[idx]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        nb = len(idx)
        g = np.zeros(lay.size, F32)
        acts = _forward(lay, p, "pi", obs)
        logp_all = _log_softmax(acts[-1])
        prob = np.exp(logp_all)
        logp = logp_all[np.arange(nb), act]
        ratio = np.exp(logp - ro.logp[idx])
        unclipped = ratio * adv
        clipped = np.clip(ratio, 1 - cfg.clip, 1 + cfg.clip) * adv
        active = unclipped <= clipped  # the min picks the unclipped term: gradient flows
        d_logp = np.where(active, -ratio * adv, 0.0) / nb
        onehot = np.zeros_like(prob)
        onehot[np.arange(nb), act] = 1
        d_logits = d_logp[:, None] * (onehot - prob)
        ent = -(prob * logp_all).sum(-1)
        d_logits += cfg.ent_coef * prob * (logp_all + ent[:, None]) / nb  # -ent_coef * dH
        _backward(lay, p, g, "pi", acts, d_logits.astype(F32))
        vacts = _forward(lay, p, "v", obs)
        dv = cfg.vf_coef * (vacts[-1][:, 0] - ro.ret[idx]) / nb
        _backward(lay, p, g, "v", vacts, dv[:, None].astype(F32))
        norm = float(np.sqrt((g.astype(np.float64) ** 2).sum()))
        if norm > cfg.max_grad_norm:
            g *= F32(cfg.max_grad_norm / norm)
        return g

    def adam(self, p: np.ndarray, g: np.ndarray) -> None:
        self.steps += 1
        b1, b2 = 0.9, 0.999
        self.m = (b1 * self.m + (1 - b1) * g).astype(F32)
        self.v = (b2 * self.v + (1 - b2) * g * g).astype(F32)
        mh = self.m / F32(1 - b1**self.steps)
        vh = self.v / F32(1 - b2**self.steps)
        p -= (F32(self.cfg.lr) * mh / (np.sqrt(vh) + F32(1e-8))).astype(F32)

    def local_update(self, params: np.ndarray) -> tuple[np.ndarray, Rollout]:
        """Sample with ``params``, train on the samples; returns (new params, rollout)."""
        if params.shape != (self.layout.size,):
            raise UsageError(
                f"parameter vector has shape {params.shape}; "
                f"this network needs ({self.layout.size},)"
            )
        p = np.array(params, dtype=F32, copy=True)
        ro = self.rollout(p)
        n = ro.samples
        for _ in range(self.cfg.epochs):
            perm = self.rng.permutation(n)
            for idx in np.array_split(perm, self.cfg.minibatches):
                self.adam(p, self.grad(p, ro, idx))
        return p, ro
