"""Reactors and the fixed graph that connects them.

A :class:`Reactor` is a plain Python class with declared input and output ports and one
``react(tag, inputs)`` method. A :class:`Graph` holds named reactor instances (built from
a class and keyword arguments inside whatever process runs them) and connections from an
output port to an input port, optionally *after* ``delay`` logical tags. The graph is
checked before it runs (:meth:`Graph.check`): unknown reactors or ports, unconnected
inputs, a second connection into a single port, and cycles without a delay are refused
with an error that names them. :meth:`Graph.describe` prints it.

Semantics (the reactor model, reduced to what a fixed training graph needs): logical
time is an integer tag 0, 1, 2, ...; at every tag every reactor reacts exactly once, in
an order consistent with its zero-delay connections; a value sent on a connection with
delay ``d`` at tag ``t`` is seen by the receiver at tag ``t + d``; an output a reactor
does not return is *absent* at that tag. Values a reactor sees therefore depend only on
the graph, the reactors' code and their constructor arguments, never on which process ran
first: every executor (:mod:`coorp.flow._run`) produces the same results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coorp._errors import UsageError

__all__ = ["Connection", "Graph", "GraphError", "Node", "Reactor"]


class GraphError(UsageError):
    """A reactor graph that cannot run: the message says which reactor, port or cycle."""


class Reactor:
    """Base class of the reactors a user writes.

    Declare ports as class attributes and implement :meth:`react`::

        class Doubler(Reactor):
            inputs = ("x",)
            outputs = ("y",)

            def react(self, tag, inputs):
                return {"y": 2 * inputs["x"]} if "x" in inputs else {}

    ``multi_inputs`` are input ports that accept several connections; their value is a
    tuple in the order the connections were declared (``None`` where one is absent).
    Arrays received from another process are read-only views into shared memory: copy
    what you change. :meth:`result` is returned to the caller of ``run`` after the
    last tag (the learner's parameters, say).
    """

    inputs: ClassVar[tuple[str, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ()
    multi_inputs: ClassVar[tuple[str, ...]] = ()

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """React at logical ``tag`` to the present inputs; return the present outputs."""
        raise NotImplementedError(f"{type(self).__name__}.react is not implemented")

    def result(self) -> Any:
        """What ``run`` returns for this reactor once the last tag is done."""
        return None


@dataclass(frozen=True, slots=True)
class Node:
    """A named reactor in a graph: its class and constructor arguments."""

    name: str
    cls: type[Reactor]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def port(self, name: str) -> str:
        """``"node.port"``, for :meth:`Graph.connect`."""
        return f"{self.name}.{name}"


@dataclass(frozen=True, slots=True)
class Connection:
    src: str  # reactor name
    out: str  # output port
    dst: str
    inp: str
    delay: int = 0

    def __str__(self) -> str:
        after = f"  after {self.delay} tag{'s' if self.delay != 1 else ''}" if self.delay else ""
        return f"{self.src}.{self.out} -> {self.dst}.{self.inp}{after}"


def _ports(cls: type[Reactor]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    ins, outs, multi = tuple(cls.inputs), tuple(cls.outputs), tuple(cls.multi_inputs)
    for kind, names in (("inputs", ins), ("outputs", outs), ("multi_inputs", multi)):
        if any(not isinstance(n, str) or not n.isidentifier() for n in names):
            raise GraphError(f"{cls.__name__}.{kind} must be a tuple of identifiers, got {names}")
        if len(set(names)) != len(names):
            raise GraphError(f"{cls.__name__}.{kind} declares a port twice: {names}")
    stray = sorted(set(multi) - set(ins))
    if stray:
        raise GraphError(f"{cls.__name__}.multi_inputs {stray} are not among its inputs {ins}")
    return ins, outs, multi


class Graph:
    """A fixed, declared graph of reactors; see the module docstring for its semantics."""

    def __init__(self, name: str = "flow") -> None:
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.connections: list[Connection] = []

    def add(self, name: str, cls: type[Reactor], **kwargs: Any) -> Node:
        """Add reactor ``name``, built as ``cls(**kwargs)`` where the graph runs."""
        if not isinstance(name, str) or not name.isidentifier():
            raise GraphError(f"reactor name {name!r} must be an identifier")
        if name in self.nodes:
            raise GraphError(f"graph {self.name!r} already has a reactor named {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Reactor)):
            raise GraphError(f"reactor {name!r}: {cls!r} is not a subclass of coorp.flow.Reactor")
        _ports(cls)
        node = Node(name, cls, dict(kwargs))
        self.nodes[name] = node
        return node

    def connect(self, src: str, dst: str, *, delay: int = 0) -> Connection:
        """Connect output ``"a.out"`` to input ``"b.in"``, seen ``delay`` tags later."""
        if not isinstance(delay, int) or delay < 0:
            raise GraphError(f"delay must be a non-negative integer, got {delay!r}")
        s_node, s_port = self._split(src, "output")
        d_node, d_port = self._split(dst, "input")
        conn = Connection(s_node, s_port, d_node, d_port, delay)
        self.connections.append(conn)
        return conn

    def _split(self, ref: str, kind: str) -> tuple[str, str]:
        if not isinstance(ref, str) or ref.count(".") != 1:
            raise GraphError(f"{kind} port {ref!r} must be written 'reactor.port'")
        node, port = ref.split(".")
        if node not in self.nodes:
            raise GraphError(
                f"{kind} port {ref!r}: no reactor named {node!r} (reactors: {sorted(self.nodes)})"
            )
        ins, outs, _ = _ports(self.nodes[node].cls)
        declared = outs if kind == "output" else ins
        if port not in declared:
            cls = self.nodes[node].cls.__name__
            raise GraphError(
                f"{kind} port {ref!r}: {cls} declares no {kind} {port!r} "
                f"(its {kind}s: {list(declared)})"
            )
        return node, port

    # -- checks ---------------------------------------------------------------------------
    def incoming(self, node: str) -> list[Connection]:
        """Connections into ``node`` in declaration order."""
        return [c for c in self.connections if c.dst == node]

    def outgoing(self, node: str) -> list[Connection]:
        return [c for c in self.connections if c.src == node]

    def check(self) -> list[str]:
        """Refuse a graph that cannot run; returns the reaction order within a tag."""
        if not self.nodes:
            raise GraphError(f"graph {self.name!r} has no reactors")
        for name, node in self.nodes.items():
            ins, _, multi = _ports(node.cls)
            for port in ins:
                n = sum(1 for c in self.connections if c.dst == name and c.inp == port)
                if n == 0:
                    raise GraphError(
                        f"input port {name}.{port} ({node.cls.__name__}) is not connected; "
                        f"connect it with graph.connect('<reactor>.<output>', '{name}.{port}')"
                    )
                if n > 1 and port not in multi:
                    raise GraphError(
                        f"input port {name}.{port} has {n} connections but is a single port; "
                        f"list it in {node.cls.__name__}.multi_inputs to accept several"
                    )
        return self.order()

    def order(self) -> list[str]:
        """Reactors in an order consistent with zero-delay connections (ties: declaration
        order); raises :class:`GraphError` naming a cycle that has no delay."""
        names = list(self.nodes)
        deps: dict[str, set[str]] = {n: set() for n in names}
        for c in self.connections:
            if c.delay == 0:
                deps[c.dst].add(c.src)
        done: list[str] = []
        placed: set[str] = set()
        while len(done) < len(names):
            ready = [n for n in names if n not in placed and deps[n] <= placed]
            if not ready:
                cycle = self._find_cycle({n: deps[n] - placed for n in names if n not in placed})
                raise GraphError(
                    f"graph {self.name!r} has a cycle without a delay: {' -> '.join(cycle)}; "
                    f"every cycle needs a connection with delay >= 1 "
                    f"(graph.connect(src, dst, delay=1))"
                )
            done.append(ready[0])
            placed.add(ready[0])
        return done

    @staticmethod
    def _find_cycle(deps: dict[str, set[str]]) -> list[str]:
        # Every remaining node has a remaining dependency: walk back until a repeat.
        start = next(iter(deps))
        path = [start]
        seen = {start: 0}
        while True:
            prev = sorted(deps[path[-1]])[0]
            if prev in seen:
                loop = path[seen[prev] :]
                loop.reverse()
                return [*loop, loop[0]]
            seen[prev] = len(path)
            path.append(prev)

    def levels(self) -> list[list[str]]:
        """Reactors grouped by zero-delay depth: each level may react in parallel."""
        depth: dict[str, int] = {}
        for n in self.order():
            ups = [depth[c.src] + 1 for c in self.connections if c.dst == n and c.delay == 0]
            depth[n] = max(ups, default=0)
        out: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
        for n in self.nodes:
            out[depth[n]].append(n)
        return out

    def describe(self) -> str:
        """A printable description: reactors, ports, connections and the reaction order."""
        order = self.check()
        width = max(len(n) for n in self.nodes)
        lines = [
            f"graph {self.name}: {len(self.nodes)} reactors, {len(self.connections)} connections"
        ]
        for name, node in self.nodes.items():
            ins, outs, multi = _ports(node.cls)
            shown = [f"{p}[{len([c for c in self.incoming(name) if c.inp == p])}]"
                     if p in multi else p for p in ins]  # fmt: skip
            lines.append(
                f"  {name:<{width}}  {node.cls.__name__:<16} in: {', '.join(shown) or '-'}"
                f"   out: {', '.join(outs) or '-'}"
            )
        lines.append("connections:")
        lines += [f"  {c}" for c in self.connections]
        lines.append(f"order within a tag: {', '.join(order)}")
        lines.append(
            "parallel levels: " + "  ".join("[" + " ".join(lv) + "]" for lv in self.levels())
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()
