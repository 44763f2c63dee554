"""Executors of a reactor :class:`~coorp.flow.Graph`: inline, local processes, Ray actors.

* ``inline`` runs every reactor in this process in the graph's order: the reference.
* ``processes`` runs each reactor in its own process. Every output port is one
  :mod:`coorp.transport` topic (iceoryx2 shared memory, ``QueuePolicy.BLOCK``: nothing is
  dropped); arrays travel zero-copy as read-only views. Each process loops over the tags
  and, at tag ``t``, waits for exactly one message (a value or an *absent* marker) on
  every incoming connection, tagged ``t - delay``: there is no central coordinator, and
  the order in which the OS runs the processes changes only when things happen, never
  what a reactor sees.
* ``ray`` hosts each reactor in a Ray actor and submits, tag by tag, one task per
  reactor whose arguments are the object references of its inputs (the same graph on
  the usual Ray idiom, for side-by-side measurements).

Each returns a :class:`FlowResult`: the reactors' :meth:`~coorp.flow.Reactor.result`
and the wall time from releasing tag 0 to the last reactor finishing (setup excluded,
reported apart).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import CoorpError, UsageError
from coorp.flow._graph import Connection, Graph, GraphError

__all__ = ["EXECUTORS", "FlowError", "FlowResult", "run"]

EXECUTORS = ("inline", "processes", "ray")


class FlowError(CoorpError):
    """A reactor failed or a process stopped answering while a graph ran."""


class _Absent:
    """Marker of an absent value (compared by type: it crosses process boundaries)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def _is_absent(v: Any) -> bool:
    return v is None or isinstance(v, _Absent)


@dataclass
class FlowResult:
    executor: str
    tags: int
    results: dict[str, Any]
    #: Seconds from releasing tag 0 to the end of the last tag (setup excluded).
    wall_s: float
    setup_s: float
    #: Per reactor: ``react_s`` / ``react_cpu_s`` (wall and CPU seconds inside ``react``),
    #: ``wait_s`` / ``send_s`` (processes: waiting for inputs, publishing) and
    #: ``react_starts_s`` (when each reaction began, from the first).
    extra: dict[str, Any] = field(default_factory=dict)


class _Meter:
    """Seconds a reactor spent in ``react``: wall and this thread's CPU (what the work
    cost apart from waiting for inputs or for a core)."""

    __slots__ = ("cpu", "send", "starts", "wait", "wall")

    def __init__(self) -> None:
        self.starts: list[float] = []  # perf_counter at each react (differences only)
        self.wall = 0.0
        self.cpu = 0.0
        self.wait = 0.0  # processes: waiting for inputs
        self.send = 0.0  # processes: publishing outputs

    def react(self, reactor: Any, tag: int, inputs: Mapping[str, Any]) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        self.starts.append(w)
        out = reactor.react(tag, inputs)
        self.wall += time.perf_counter() - w
        self.cpu += time.thread_time() - c
        return out

    def stats(self) -> tuple[float, float, float, float, list[float]]:
        return (self.wall, self.cpu, self.wait, self.send, self.starts)


def _split_stats(got: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    results = {n: v[0] for n, v in got.items()}
    return results, {
        "react_s": {n: v[1][0] for n, v in got.items()},
        "react_cpu_s": {n: v[1][1] for n, v in got.items()},
        "wait_s": {n: v[1][2] for n, v in got.items()},
        "send_s": {n: v[1][3] for n, v in got.items()},
        # Seconds from each reactor's first reaction to each of its reactions: the
        # spacing of a sink's reactions is the steady-state time per tag.
        "react_starts_s": {n: [x - v[1][4][0] for x in v[1][4]] for n, v in got.items()},
    }


def _readonly(v: Any) -> Any:
    """What a receiver sees in-process: the same arrays as read-only views."""
    if isinstance(v, np.ndarray):
        view = v.view()
        view.flags.writeable = False
        return view
    if isinstance(v, dict):
        return {k: _readonly(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return type(v)(_readonly(x) for x in v)
    return v


def _assemble(graph: Graph, name: str, values: list[Any]) -> dict[str, Any]:
    """Input dict of ``name`` from the values of its incoming connections (in order)."""
    node = graph.nodes[name]
    incoming = graph.incoming(name)
    inputs: dict[str, Any] = {}
    for port in node.cls.inputs:
        vals = [v for c, v in zip(incoming, values, strict=True) if c.inp == port]
        if port in node.cls.multi_inputs:
            if not all(_is_absent(v) for v in vals):
                inputs[port] = tuple(None if _is_absent(v) else v for v in vals)
        elif vals and not _is_absent(vals[0]):
            inputs[port] = vals[0]
    return inputs


def _outputs(graph: Graph, name: str, out: Mapping[str, Any] | None, tag: int) -> Mapping[str, Any]:
    if out is None:
        return {}
    if not isinstance(out, Mapping):
        raise FlowError(f"{name}.react (tag {tag}) returned {type(out).__name__}, not a dict")
    stray = sorted(set(out) - set(graph.nodes[name].cls.outputs))
    if stray:
        raise FlowError(
            f"{name}.react (tag {tag}) returned undeclared output(s) {stray}; "
            f"declared: {list(graph.nodes[name].cls.outputs)}"
        )
    return out


def run(graph: Graph, tags: int, *, executor: str = "processes", **options: Any) -> FlowResult:
    """Run ``graph`` for ``tags`` logical tags on ``executor`` (see the module docstring)."""
    if not isinstance(tags, int) or tags < 1:
        raise UsageError(f"tags must be a positive integer, got {tags!r}")
    graph.check()
    if executor == "inline":
        return _run_inline(graph, tags)
    if executor == "processes":
        return _run_processes(graph, tags, **options)
    if executor == "ray":
        return _run_ray(graph, tags)
    raise UsageError(f"unknown executor {executor!r}; choose from {list(EXECUTORS)}")


# -- inline ---------------------------------------------------------------------------------
def _run_inline(graph: Graph, tags: int) -> FlowResult:
    order = graph.order()
    t0 = time.perf_counter()
    reactors = {n: node.cls(**node.kwargs) for n, node in graph.nodes.items()}
    conns = graph.connections
    pending: list[dict[int, Any]] = [{} for _ in conns]
    index = {id(c): i for i, c in enumerate(conns)}
    meters = {n: _Meter() for n in reactors}
    t1 = time.perf_counter()
    for t in range(tags):
        for name in order:
            vals = [
                pending[index[id(c)]].pop(t - c.delay, ABSENT) if t >= c.delay else ABSENT
                for c in graph.incoming(name)
            ]
            got = meters[name].react(reactors[name], t, _assemble(graph, name, vals))
            out = _outputs(graph, name, got, t)
            for c in graph.outgoing(name):
                v = out.get(c.out, ABSENT)
                pending[index[id(c)]][t] = ABSENT if _is_absent(v) else _readonly(v)
    t2 = time.perf_counter()
    results, extra = _split_stats({n: (r.result(), meters[n].stats()) for n, r in reactors.items()})
    return FlowResult("inline", tags, results, t2 - t1, t1 - t0, extra)


# -- local processes over coorp.transport ---------------------------------------------------
def _topics(graph: Graph, run_id: str, max_payload: int) -> dict[tuple[str, str], Any]:
    from coorp.transport import QueuePolicy, Topic

    fanout: dict[tuple[str, str], int] = {}
    depth: dict[tuple[str, str], int] = {}
    for c in graph.connections:
        key = (c.src, c.out)
        fanout[key] = fanout.get(key, 0) + 1
        depth[key] = max(depth.get(key, 0), c.delay + 2)
    return {
        key: Topic(
            name=f"flow/{run_id}/{key[0]}/{key[1]}",
            type=object,
            max_payload=max_payload,
            policy=QueuePolicy.BLOCK,
            allow_pickle=True,
            max_subscribers=n + 1,
            max_publishers=1,
            max_depth=depth[key],
            max_borrowed=depth[key],
        )
        for key, n in fanout.items()
    }


def _child(
    graph: Graph,
    name: str,
    tags: int,
    topics: dict[tuple[str, str], Any],
    conn: Any,
    timeout: float,
) -> None:
    tag = -1
    try:
        from coorp.transport import Bus, Reach

        bus = Bus(f"flow-{name}", reach=Reach.PROCESS | Reach.MACHINE)
        incoming: list[Connection] = graph.incoming(name)
        subs = [
            bus.subscriber(topics[(c.src, c.out)], depth=topics[(c.src, c.out)].max_depth)
            for c in incoming
        ]
        ports = sorted({c.out for c in graph.outgoing(name)})
        pubs = {p: bus.publisher(topics[(name, p)]) for p in ports}
        node = graph.nodes[name]
        reactor = node.cls(**node.kwargs)
        meter = _Meter()
        conn.send(("ready", name, None))
        if conn.recv() != "go":
            return
        for t in range(tags):
            tag = t
            msgs = []
            vals: list[Any] = []
            for c, sub in zip(incoming, subs, strict=True):
                if t < c.delay:
                    vals.append(ABSENT)
                    continue
                w0 = time.perf_counter()
                msg = sub.receive(timeout=timeout)
                meter.wait += time.perf_counter() - w0
                if msg is None:
                    raise FlowError(
                        f"no message on {c} for tag {t - c.delay} within {timeout} s "
                        f"(its sender stopped or is stuck)"
                    )
                got = msg.value
                if got["t"] != t - c.delay:
                    raise FlowError(f"{c}: expected tag {t - c.delay}, got {got['t']}")
                vals.append(got.get("v", ABSENT))
                msgs.append(msg)
            got = meter.react(reactor, t, _assemble(graph, name, vals))
            out = _outputs(graph, name, got, t)
            for p, pub in pubs.items():
                v = out.get(p)
                p0 = time.perf_counter()
                pub.publish({"t": t} if _is_absent(v) else {"t": t, "v": v}, timeout=timeout)
                meter.send += time.perf_counter() - p0
            del vals, out
            for m in msgs:
                m.release()
        conn.send(("done", name, (reactor.result(), meter.stats())))
        # Subscribers may still be reading our last samples: wait for the parent's word.
        conn.recv()
        bus.close()
    except BaseException as exc:  # report everything, including KeyboardInterrupt
        text = "".join(traceback.format_exception(exc))
        with contextlib.suppress(Exception):
            conn.send(("error", name, f"tag {tag}: {type(exc).__name__}: {exc}\n{text}"))


def _start_method(requested: str | None) -> str:
    if requested is not None:
        return requested
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return "spawn"  # never fork a process that hosts Ray's threads
    return "fork" if sys.platform.startswith("linux") else "spawn"


def _run_processes(
    graph: Graph,
    tags: int,
    *,
    max_payload: int = 128 << 20,
    timeout: float = 120.0,
    start_method: str | None = None,
    own_session: bool = True,
) -> FlowResult:
    """``own_session``: the reactors run in a new session (``setsid``). With Linux's
    autogroup scheduling (on by default on desktops and many servers) the CPU is shared
    fairly between *sessions*: Ray starts its workers in a session of their own, and so
    does this executor, so that on a busy machine neither gets a smaller share."""
    from coorp.transport import iceoryx2_available

    if not iceoryx2_available():
        raise UsageError(
            "the 'processes' executor needs iceoryx2 (pip install 'coorp[transport]'); "
            "use executor='inline' meanwhile"
        )
    method = _start_method(start_method)
    if method != "fork":
        local = [
            n.cls.__qualname__ for n in graph.nodes.values() if "<locals>" in n.cls.__qualname__
        ]
        if local:
            raise GraphError(
                f"reactor classes {local} are defined inside a function; with the {method!r} "
                f"start method they must be importable (define them at module level)"
            )
    ctx: Any = mp.get_context(method)
    run_id = f"{os.getpid()}-{time.monotonic_ns() % 10**9}-{os.urandom(3).hex()}"
    topics = _topics(graph, run_id, max_payload)
    t0 = time.perf_counter()
    pipes: dict[str, Any] = {}
    ends: dict[str, Any] = {}
    for name in graph.nodes:
        pipes[name], ends[name] = ctx.Pipe()
    launcher = ctx.Process(
        target=_launch,
        args=(graph, tags, topics, ends, timeout, method, own_session),
        name="coorp-flow-launcher",
    )
    try:
        launcher.start()
        for end in ends.values():
            end.close()
        _gather(pipes, "ready", timeout)
        t1 = time.perf_counter()
        for pipe in pipes.values():
            pipe.send("go")
        results, extra = _split_stats(_gather(pipes, "done", timeout * 2))
        t2 = time.perf_counter()
        for pipe in pipes.values():
            pipe.send("exit")
        launcher.join(timeout)
        return FlowResult("processes", tags, results, t2 - t1, t1 - t0, extra)
    finally:
        if launcher.is_alive():
            launcher.terminate()  # its handler stops the reactors it started
            launcher.join(10)
            _sweep_shared_memory()


def _sweep_shared_memory() -> None:
    """Reclaim what stopped reactors left in shared memory (iceoryx2 ports and samples,
    wake words): they never closed their buses, and their files would stay in /dev/shm
    until some later bus swept them."""
    from coorp.transport import Bus, Reach

    with contextlib.suppress(Exception):
        bus = Bus("flow-sweep", reach=Reach.PROCESS | Reach.MACHINE)
        try:
            bus.cleanup_dead_peers()
        finally:
            bus.close()


def _launch(
    graph: Graph,
    tags: int,
    topics: dict[tuple[str, str], Any],
    ends: dict[str, Any],
    timeout: float,
    method: str,
    own_session: bool,
) -> None:
    """Start one process per reactor, in a session of their own (see ``own_session``)."""
    import signal

    if own_session:
        with contextlib.suppress(OSError):
            os.setsid()
    ctx: Any = mp.get_context(method)
    procs: list[Any] = []

    def stop(*_: Any) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:  # dead before the launcher is, so the runner can sweep after them
            p.join(5)
        os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    for name in graph.nodes:
        p = ctx.Process(
            target=_child,
            args=(graph, name, tags, topics, ends[name], timeout),
            name=f"coorp-flow-{name}",
            daemon=True,
        )
        p.start()
        procs.append(p)
        ends[name].close()  # only the reactor keeps its end: its exit is an EOF
    for p in procs:
        p.join()


def _gather(pipes: dict[str, Any], what: str, timeout: float) -> dict[str, Any]:
    """Wait for every reactor's ``what`` report, whichever comes first; the first error
    (or a process that exits without reporting) stops the run at once."""
    from multiprocessing.connection import wait

    waiting = {pipe: name for name, pipe in pipes.items()}
    got: dict[str, Any] = {}
    end = time.monotonic() + timeout
    while waiting:
        ready = wait(list(waiting), timeout=max(0.0, end - time.monotonic()))
        if not ready:
            late = sorted(waiting.values())
            raise FlowError(f"reactor(s) {late} did not report {what!r} within {timeout} s")
        for pipe in ready:
            conn: Any = pipe
            name = waiting.pop(conn)
            try:
                kind, _, payload = conn.recv()
            except EOFError:
                raise FlowError(
                    f"reactor {name!r} exited before reporting {what!r} (killed, or out of memory?)"
                ) from None
            if kind == "error":
                raise FlowError(f"reactor {name!r} failed at {payload}")
            if kind != what:
                raise FlowError(f"reactor {name!r} reported {kind!r}, expected {what!r}")
            got[name] = payload
    return {n: got[n] for n in pipes}


# -- Ray actors ------------------------------------------------------------------------------
class _RayHost:
    """The body of a Ray actor hosting one reactor (wrapped by ray.remote at run time)."""

    def __init__(self, graph: Graph, name: str) -> None:
        self.graph = graph
        self.name = name
        node = graph.nodes[name]
        self.reactor = node.cls(**node.kwargs)
        self.ports = sorted({c.out for c in graph.outgoing(name)})
        self.meter = _Meter()

    def ready(self) -> bool:
        return True

    def react(self, tag: int, *vals: Any) -> Any:
        out = _outputs(
            self.graph,
            self.name,
            self.meter.react(self.reactor, tag, _assemble(self.graph, self.name, list(vals))),
            tag,
        )
        res = tuple(ABSENT if _is_absent(out.get(p)) else out[p] for p in self.ports)
        return res[0] if len(res) == 1 else res

    def result(self) -> Any:
        return (self.reactor.result(), self.meter.stats())


def _run_ray(graph: Graph, tags: int) -> FlowResult:
    try:
        import ray
    except ImportError:
        raise UsageError("the 'ray' executor needs Ray: pip install 'coorp[ray]'") from None
    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    order = graph.order()
    t0 = time.perf_counter()
    host: Any = ray.remote(num_cpus=0)(_RayHost)
    actors: dict[str, Any] = {n: host.remote(graph, n) for n in graph.nodes}
    ray.get([a.ready.remote() for a in actors.values()])
    ports = {n: sorted({c.out for c in graph.outgoing(n)}) for n in graph.nodes}
    t1 = time.perf_counter()
    refs: dict[tuple[str, str, int], Any] = {}
    last: list[Any] = []
    for t in range(tags):
        for n in order:
            args = [
                refs.get((c.src, c.out, t - c.delay), ABSENT) if t >= c.delay else ABSENT
                for c in graph.incoming(n)
            ]
            k = len(ports[n])
            out = actors[n].react.options(num_returns=max(1, k)).remote(t, *args)
            outs = [out] if k <= 1 else list(out)
            for p, r in zip(ports[n], outs, strict=False):
                refs[(n, p, t)] = r
            last.append(outs[0])
        # Drop references nobody will read again (the largest delay has passed).
        horizon = t - max((c.delay for c in graph.connections), default=0)
        for key in [k for k in refs if k[2] < horizon]:
            del refs[key]
        last = last[-len(order) :]
    ray.get(last)
    got = dict(zip(actors, ray.get([a.result.remote() for a in actors.values()]), strict=True))
    t2 = time.perf_counter()
    results, extra = _split_stats(got)
    for a in actors.values():
        ray.kill(a)
    return FlowResult("ray", tags, results, t2 - t1, t1 - t0, extra)
