"""The reactor graph: declared, checked (clear errors), printable; executors agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from coorp.flow import FlowError, Graph, GraphError, Reactor, run
from coorp.transport import iceoryx2_available


class Source(Reactor):
    outputs = ("x",)

    def __init__(self, n: int = 4) -> None:
        self.n = n

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"x": np.arange(self.n, dtype=np.float64) + tag}


class Scale(Reactor):
    inputs = ("x",)
    outputs = ("y",)

    def __init__(self, k: float) -> None:
        self.k = k

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"y": inputs["x"] * self.k}


class Sum(Reactor):
    """Accumulates its multiport input over tags; absent on tag 0 (delayed inputs)."""

    inputs = ("ys",)
    multi_inputs = ("ys",)
    outputs = ("total",)

    def __init__(self) -> None:
        self.acc = np.zeros(4)
        self.seen: list[int] = []

    def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        if "ys" in inputs:
            self.seen.append(tag)
            for y in inputs["ys"]:  # declaration order: deterministic float sums
                self.acc = self.acc * 0.5 + y
        return {"total": self.acc.copy()}

    def result(self) -> Any:
        return self.acc, self.seen


def _graph(workers: int = 2) -> Graph:
    g = Graph("demo")
    g.add("src", Source)
    g.add("sum", Sum)
    for i in range(workers):
        g.add(f"w{i}", Scale, k=float(i + 1))
        g.connect("src.x", f"w{i}.x")
        g.connect(f"w{i}.y", "sum.ys", delay=1)
    return g


def test_describe_names_ports_order_and_levels() -> None:
    text = _graph().describe()
    assert "graph demo: 4 reactors, 4 connections" in text
    assert "w1.y -> sum.ys  after 1 tag" in text
    assert "order within a tag: src, sum, w0, w1" in text
    assert "ys[2]" in text


def test_cycle_without_delay_is_refused_naming_it() -> None:
    g = Graph("loop")
    g.add("a", Scale, k=1.0)
    g.add("b", Scale, k=1.0)
    g.connect("a.y", "b.x")
    g.connect("b.y", "a.x")
    with pytest.raises(GraphError, match=r"cycle without a delay: (a -> b -> a|b -> a -> b)"):
        g.check()


def test_cycle_with_delay_is_accepted() -> None:
    g = Graph("loop")
    g.add("a", Scale, k=1.0)
    g.add("b", Scale, k=1.0)
    g.connect("a.y", "b.x")
    g.connect("b.y", "a.x", delay=1)
    assert g.check() == ["a", "b"]


def test_missing_and_unknown_ports_are_refused() -> None:
    g = Graph("bad")
    g.add("w", Scale, k=1.0)
    with pytest.raises(GraphError, match=r"input port w\.x \(Scale\) is not connected"):
        g.check()
    g.add("src", Source)
    with pytest.raises(GraphError, match=r"Scale declares no input 'z' \(its inputs: \['x'\]\)"):
        g.connect("src.x", "w.z")
    with pytest.raises(GraphError, match="no reactor named 'nope'"):
        g.connect("nope.x", "w.x")
    with pytest.raises(GraphError, match=r"'reactor\.port'"):
        g.connect("src", "w.x")
    g.connect("src.x", "w.x")
    g.connect("src.x", "w.x")
    with pytest.raises(GraphError, match=r"single port; list it in Scale\.multi_inputs"):
        g.check()


def test_add_refuses_non_reactors_and_duplicates() -> None:
    g = Graph()
    g.add("a", Source)
    with pytest.raises(GraphError, match="already has a reactor named 'a'"):
        g.add("a", Source)
    with pytest.raises(GraphError, match=r"not a subclass of coorp\.flow\.Reactor"):
        g.add("b", dict)  # type: ignore[arg-type]


def test_undeclared_output_is_a_clear_error() -> None:
    class Bad(Reactor):
        outputs = ("x",)

        def react(self, tag: int, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
            return {"oops": 1}

    g = Graph()
    g.add("bad", Bad)
    with pytest.raises(FlowError, match=r"returned undeclared output\(s\) \['oops'\]"):
        run(g, 1, executor="inline")


def test_inline_semantics_delays_and_multiport_order() -> None:
    out = run(_graph(), 3, executor="inline")
    acc, seen = out.results["sum"]
    assert seen == [1, 2]  # delayed inputs are absent at tag 0
    x0, x1 = np.arange(4.0), np.arange(4.0) + 1
    want = np.zeros(4)
    for x in (x0, x1):
        for k in (1.0, 2.0):
            want = want * 0.5 + x * k
    assert np.array_equal(acc, want)


@pytest.mark.skipif(not iceoryx2_available(), reason="needs the transport extra (iceoryx2)")
def test_processes_match_inline_bit_for_bit() -> None:
    ref = run(_graph(3), 5, executor="inline").results["sum"]
    got = run(_graph(3), 5, executor="processes", timeout=60.0).results["sum"]
    assert np.array_equal(ref[0], got[0]) and ref[1] == got[1]


@pytest.mark.skipif(not iceoryx2_available(), reason="needs the transport extra (iceoryx2)")
def test_a_failing_reactor_is_reported_with_its_tag() -> None:
    class Boom(Reactor):
        inputs = ("x",)

        def react(self, tag: int, inputs: Mapping[str, Any]) -> None:
            if tag == 2:
                raise ValueError("kaput")

    g = Graph()
    g.add("src", Source)
    g.add("boom", Boom)
    g.connect("src.x", "boom.x")
    with pytest.raises(FlowError, match=r"reactor 'boom' failed at tag 2: ValueError: kaput"):
        run(g, 4, executor="processes", timeout=30.0)


@pytest.mark.skipif(not iceoryx2_available(), reason="needs the transport extra (iceoryx2)")
def test_an_early_failure_downstream_is_reported_at_once() -> None:
    """The failing reactor is last in order and its upstream would block for the whole
    timeout: the error must still arrive first (the parent waits on every reactor)."""

    class Fail(Reactor):
        inputs = ("x",)

        def react(self, tag: int, inputs: Mapping[str, Any]) -> None:
            raise RuntimeError("first tag")

    g = Graph()
    g.add("src", Source)
    g.add("fail", Fail)
    g.connect("src.x", "fail.x")
    with pytest.raises(FlowError, match=r"'fail' failed at tag 0: RuntimeError: first tag"):
        run(g, 50, executor="processes", timeout=600.0)
