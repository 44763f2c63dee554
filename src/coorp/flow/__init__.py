"""A deterministic parallel executor in the reactor style (thesis seed, chapter 1).

A fixed, declared, checked and printable :class:`Graph` of :class:`Reactor` objects (plain
Python classes: env workers, a learner, a parameter server), logical time tags and a
deterministic order within a tag; it runs inline, on local processes over Coorp's
zero-copy transport, or on Ray actors, with the same results::

    from coorp.flow import Graph, Reactor, run

    g = Graph("ppo")
    g.add("learner", Learner, n_params=1000)
    for i in range(4):
        g.add(f"w{i}", Worker, seed=i)
        g.connect("learner.params", f"w{i}.params")
        g.connect(f"w{i}.delta", "learner.deltas", delay=1)
    print(g.describe())
    out = run(g, tags=20, executor="processes")
    params = out.results["learner"]

See ``docs/learn.md``.
"""

from coorp.flow._graph import Connection, Graph, GraphError, Node, Reactor
from coorp.flow._run import EXECUTORS, FlowError, FlowResult, run

__all__ = [
    "EXECUTORS",
    "Connection",
    "FlowError",
    "FlowResult",
    "Graph",
    "GraphError",
    "Node",
    "Reactor",
    "run",
]
