"""The reactors of data-parallel PPO and of the thesis's micro-benchmarks, and their graphs.

PPO (parameter averaging, BSP): the ``server`` broadcasts the parameter vector at every
tag; each ``worker`` samples its episodes with it, runs its local PPO epochs and sends
back its new parameters (with the episode return and sample count); one tag later the
server averages them in worker order (a fixed float32 summation order, hence
bit-identical results) and broadcasts again::

    server.params -> w_i.params           w_i.update -> server.updates  after 1 tag

Micro-benchmarks: *broadcast+gather* (a source broadcasts an ``nbytes`` array, every
worker answers with a small array, gathered one tag later) and *sampling* (workers only
roll out episodes with the broadcast parameters and ship the samples to a collector).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from coorp.flow import Graph, Reactor
from coorp.learn._formation import FormationSpec
from coorp.learn._ppo import PPO, Layout, PPOConfig

__all__ = [
    "Collector",
    "Echo",
    "PPOWorker",
    "ParamServer",
    "Sampler",
    "Source",
    "broadcast_graph",
    "ppo_graph",
    "sampling_graph",
]


class ParamServer(Reactor):
    """Holds the parameters; averages the workers' parameters in worker order."""

    inputs = ("updates",)
    multi_inputs = ("updates",)
    outputs = ("params",)

    def __init__(self, cfg: PPOConfig, seed: int) -> None:
        self.params = Layout(cfg.hidden, cfg.layers).init(seed)
        self.returns: list[float] = []
        self.samples = 0

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        ups = inputs.get("updates")
        if ups is not None:
            present = [u for u in ups if u is not None]
            acc = np.zeros_like(self.params)
            for u in present:  # fixed order: bit-identical sums
                acc += u["p"]
            self.params = (acc / np.float32(len(present))).astype(np.float32)
            self.returns.append(float(np.mean([u["ret"] for u in present])))
            self.samples += int(sum(int(u["n"]) for u in present))
        return {"params": self.params}

    def result(self) -> Any:
        return {"params": self.params, "returns": self.returns, "samples": self.samples}


class PPOWorker(Reactor):
    """One data-parallel PPO worker (its own environments and random stream)."""

    inputs = ("params",)
    outputs = ("update",)

    def __init__(self, cfg: PPOConfig, spec: FormationSpec, seed: int) -> None:
        self.ppo = PPO(cfg, spec, seed)

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        p, ro = self.ppo.local_update(inputs["params"])
        return {"update": {"p": p, "ret": ro.episode_return, "n": ro.samples}}


def ppo_graph(workers: int, cfg: PPOConfig, spec: FormationSpec, seed: int) -> Graph:
    g = Graph(f"ppo-{workers}")
    g.add("server", ParamServer, cfg=cfg, seed=seed)
    for i in range(workers):
        g.add(f"w{i}", PPOWorker, cfg=cfg, spec=spec, seed=seed * 1000 + i + 1)
        g.connect("server.params", f"w{i}.params")
        g.connect(f"w{i}.update", "server.updates", delay=1)
    return g


class Sampler(Reactor):
    """Rolls out episodes with the broadcast parameters; ships the samples."""

    inputs = ("params",)
    outputs = ("batch",)

    def __init__(self, cfg: PPOConfig, spec: FormationSpec, seed: int) -> None:
        self.ppo = PPO(cfg, spec, seed)

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        ro = self.ppo.rollout(inputs["params"])
        return {"batch": {"obs": ro.obs, "act": ro.act, "adv": ro.adv, "n": ro.samples}}


class Collector(Reactor):
    """Broadcasts fixed parameters and counts the samples gathered."""

    inputs = ("batches",)
    multi_inputs = ("batches",)
    outputs = ("params",)

    def __init__(self, cfg: PPOConfig, seed: int) -> None:
        self.params = Layout(cfg.hidden, cfg.layers).init(seed)
        self.samples = 0

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        for b in inputs.get("batches") or ():
            if b is not None:
                self.samples += int(b["n"])
        return {"params": self.params}

    def result(self) -> Any:
        return self.samples


def sampling_graph(workers: int, cfg: PPOConfig, spec: FormationSpec, seed: int) -> Graph:
    g = Graph(f"sampling-{workers}")
    g.add("collector", Collector, cfg=cfg, seed=seed)
    for i in range(workers):
        g.add(f"s{i}", Sampler, cfg=cfg, spec=spec, seed=seed * 1000 + i + 1)
        g.connect("collector.params", f"s{i}.params")
        g.connect(f"s{i}.batch", "collector.batches", delay=1)
    return g


class Source(Reactor):
    """Broadcasts one ``nbytes`` array per tag; gathers the answers one tag later."""

    inputs = ("acks",)
    multi_inputs = ("acks",)
    outputs = ("blob",)

    def __init__(self, nbytes: int) -> None:
        self.blob = np.arange(max(1, nbytes // 4), dtype=np.float32)
        self.gathered = 0

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        for a in inputs.get("acks") or ():
            if a is not None:
                self.gathered += 1
        self.blob[0] = tag  # a new value every tag (no caching can help)
        return {"blob": self.blob}

    def result(self) -> Any:
        return self.gathered


class Echo(Reactor):
    """Answers each broadcast with a small array read from both ends of it."""

    inputs = ("blob",)
    outputs = ("ack",)

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        b = inputs["blob"]
        return {"ack": np.array([b[0], b[-1]], dtype=np.float32)}


def broadcast_graph(workers: int, nbytes: int) -> Graph:
    g = Graph(f"broadcast-{workers}")
    g.add("source", Source, nbytes=nbytes)
    for i in range(workers):
        g.add(f"e{i}", Echo)
        g.connect("source.blob", f"e{i}.blob")
        g.connect(f"e{i}.ack", "source.acks", delay=1)
    return g
