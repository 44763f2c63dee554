"""The policy conformance checker behind :func:`coorp.testing.check_policy`.

It runs a policy class on a tiny coordinated-robotic-learning scenario through the
same building blocks :func:`coorp.workload.run_crl` uses (:class:`~coorp.workload.MpcLoop`,
:class:`~coorp.workload.Drlc`, :class:`~coorp.policies.Team`), but without the registry,
and watches everything the policy does: the bulk transfers it is asked to start, the
completion callbacks it makes, and every call of the driver hooks it installs.
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coorp._errors import UsageError
from coorp.policies import Policy, Team
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import DriverHooks, DriverView, Simulation
from coorp.sim.packets import FlowState
from coorp.units import s
from coorp.workload import Drlc, MpcLoop

__all__ = [
    "ConformanceReport",
    "PolicyConformanceError",
    "check_policy",
    "conformance_scenario",
]

#: BSP epochs the checker feeds data for; after them the workload sends no bulk data,
#: so every transfer has the rest of the run to complete.
CHECK_EPOCHS = 2
_HOOK_METHODS = ("admit_bulk", "on_ls_send", "on_hw_enqueue", "on_hw_complete")


def conformance_scenario(workers: int = 2) -> Scenario:
    """The checker's built-in scenario: a leader and ``workers`` robots on one 80 MHz
    channel (MCS 7, one shared NIC ring), the paper's 30 Hz MPC loop, and BSP DRLC
    epochs of 4 data items with 2 MB parameter updates, so transfers take a few
    hundred simulated milliseconds."""
    if not 1 <= workers <= 8:
        raise UsageError(f"workers={workers}: the conformance scenario has 1..8 workers")
    stations = [{"name": "leader", "position_m": [0.0, 0.0]}]
    for i in range(workers):
        angle = 2 * math.pi * i / workers
        stations.append(
            {"name": f"r{i + 1}", "position_m": [3 * math.cos(angle), 3 * math.sin(angle)]}
        )
    return parse_scenario(
        {
            "name": "conformance",
            "description": "check_policy: tiny CRL team",
            "duration_s": 2.0,
            "seed": 0,
            "links": {"mode": "fixed", "mcs": 7},
            "hw_queue": {"mode": "shared", "capacity_packets": 128},
            "stations": stations,
            "workload": {
                "leader": "leader",
                "mpc": {"start_us": 10_000.0},
                "drlc": {
                    "sync": "bsp",
                    "batch_items": 4,
                    "train_us": 20_000.0,
                    "param_bytes": 2_000_000,
                },
            },
        },
        source="<conformance scenario>",
    )


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check_policy` found. ``problems`` is empty when the policy conforms."""

    policy: str
    problems: tuple[str, ...]
    #: Bulk transfers the workload started through ``send_bulk`` (first run).
    transfers: int
    #: MPC loops that finished (first run).
    loops: int
    #: Calls of the installed hooks' ``admit_bulk`` (first run).
    admit_calls: int

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        if self.ok:
            return (
                f"policy {self.policy} conforms ({self.transfers} transfers, "
                f"{self.loops} loops, {self.admit_calls} admit_bulk calls)"
            )
        lines = [f"policy {self.policy} failed {len(self.problems)} conformance check(s):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class PolicyConformanceError(UsageError):
    """A policy class broke the Policy/DriverHooks contract; ``report`` lists every
    problem found."""

    def __init__(self, report: ConformanceReport) -> None:
        self.report = report
        self.problems = report.problems
        super().__init__(report.render())


class _Problems:
    """Problems keyed by kind: the first message of each kind, and how often it happened."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def add(self, kind: str, message: str) -> None:
        if kind not in self._first:
            self._first[kind] = message
        self._count[kind] = self._count.get(kind, 0) + 1

    def __bool__(self) -> bool:
        return bool(self._first)

    def render(self) -> list[str]:
        out = []
        for kind, msg in self._first.items():
            n = self._count[kind]
            out.append(msg if n == 1 else f"{msg} ({n} times)")
        return out


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return f"{type(exc).__name__}: {exc}"
    f = frames[-1]
    return f"{type(exc).__name__}: {exc} (at {f.filename}:{f.lineno} in {f.name})"


class _SpyHooks:
    """Forwards every driver-hook call to the policy's hooks and checks the contract."""

    def __init__(self, inner: object, robot: str, run: _Run) -> None:
        self.inner = inner
        self.robot = robot
        self.run = run
        # Keep the hooks' promise (DriverHooks.per_packet) unless the run tests it.
        self.per_packet = bool(getattr(inner, "per_packet", True))
        if not self.per_packet:
            run.batched.add(robot)
            self.per_packet = run.force_per_packet
        for name in _HOOK_METHODS:
            if not callable(getattr(inner, name, None)):
                run.problems.add(
                    f"hooks-missing-{name}",
                    f"the hooks object {type(inner).__qualname__} installed on {robot!r} has "
                    f"no {name}() method (see coorp.sim.DriverHooks)",
                )
        # The optional airtime budget (coorp.sim.AirtimeBudgetHooks): forwarded, and
        # checked, only for hooks that define it (the station looks for the method).
        if callable(getattr(inner, "max_bulk_airtime_ns", None)):
            self.max_bulk_airtime_ns = self._max_bulk_airtime_ns

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        self.run.admit_calls += 1
        fn = getattr(self.inner, "admit_bulk", None)
        result = fn(station, now_ns) if callable(fn) else None
        if result is None:
            return None
        if isinstance(result, bool) or not isinstance(result, int):
            self.run.problems.add(
                "admit-type",
                f"admit_bulk on {self.robot!r} returned {result!r} "
                f"({type(result).__name__}) at {now_ns} ns: it must return None (admit) or "
                "an int time in ns later than now",
            )
            return None
        if result <= now_ns:
            self.run.problems.add(
                "admit-past",
                f"admit_bulk on {self.robot!r} returned {result} ns at now = {now_ns} ns: a "
                "denial must give a resume time later than now (DriverHooks contract)",
            )
            return None  # admit, so the run goes on and the other checks still run
        return result

    def _max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        result = self.inner.max_bulk_airtime_ns(station, now_ns)  # type: ignore[attr-defined]
        if result is None:
            return None
        if isinstance(result, bool) or not isinstance(result, int) or result < 0:
            self.run.problems.add(
                "budget-type",
                f"max_bulk_airtime_ns on {self.robot!r} returned {result!r} at {now_ns} ns: "
                "it must return None (no limit) or an int budget >= 0 ns "
                "(AirtimeBudgetHooks contract)",
            )
            return None  # no limit, so the run goes on and the other checks still run
        return result

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        fn = getattr(self.inner, "on_ls_send", None)
        if callable(fn):
            fn(station, flow, now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        fn = getattr(self.inner, "on_hw_enqueue", None)
        if callable(fn):
            fn(station, pid, ac, depth, now_ns)

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        fn = getattr(self.inner, "on_hw_complete", None)
        if callable(fn):
            fn(station, pid, ac, now_ns, delivered)


class _CheckedSimulation(Simulation):
    """A simulation whose hook installation wraps the policy's hooks in a spy."""

    run_state: _Run

    def set_hooks(self, station: str, hooks: DriverHooks) -> None:
        if not isinstance(hooks, _SpyHooks):
            hooks = _SpyHooks(hooks, station, self.run_state)
        super().set_hooks(station, hooks)


@dataclass
class _Transfer:
    index: int
    robot: str
    flow: FlowState
    nbytes: int
    start_ns: int
    completions: list[int] = field(default_factory=list)


class _Run:
    """One run of the policy on the scenario; collects problems and a fingerprint."""

    def __init__(
        self,
        policy_cls: type[Policy],
        scenario: Scenario,
        seed: int,
        until: int,
        *,
        force_per_packet: bool = False,
    ) -> None:
        self.policy_cls = policy_cls
        self.scenario = scenario
        self.seed = seed
        self.until = until
        #: Call every hook for every packet even where the hooks declare
        #: ``per_packet = False``; ``batched`` names the robots whose hooks did.
        self.force_per_packet = force_per_packet
        self.batched: set[str] = set()
        self.problems = _Problems()
        self.admit_calls = 0
        self.transfers: list[_Transfer] = []
        self.completed_bytes: dict[str, int] = {}
        self.last_completion_ns = 0
        self.fingerprint: dict[str, Any] = {}
        self.loops_finished = 0

    # -- send_bulk as the workload sees it --------------------------------------------
    def _sender(
        self, sim: Simulation, policy: Policy
    ) -> Callable[[str, object, int, Callable[[int], None]], None]:
        def send_bulk(
            robot: str, flow: object, nbytes: int, on_complete: Callable[[int], None]
        ) -> None:
            assert isinstance(flow, FlowState)
            rec = _Transfer(len(self.transfers), robot, flow, nbytes, sim.now_ns)
            self.transfers.append(rec)

            def done(now: int) -> None:
                rec.completions.append(now)
                if len(rec.completions) > 1:
                    self.problems.add(
                        "complete-twice",
                        f"on_complete was called {len(rec.completions)} times for transfer "
                        f"#{rec.index} ({nbytes} bytes on {flow.name}); it must be called "
                        "exactly once per transfer",
                    )
                    return  # the workload must not see it twice
                self._check_completion(sim, rec, now)
                on_complete(now)

            try:
                policy.send_bulk(robot, flow, nbytes, done)
            except Exception as exc:
                self.problems.add(
                    "send_bulk-raised",
                    f"send_bulk({robot!r}, {flow.name}, {nbytes}) raised {_where(exc)}",
                )

        return send_bulk

    def _check_completion(self, sim: Simulation, rec: _Transfer, now: object) -> None:
        name = rec.flow.name
        if isinstance(now, bool) or not isinstance(now, int):
            self.problems.add(
                "complete-type",
                f"on_complete for transfer #{rec.index} on {name} got {now!r}; it must get "
                "the completion time as an int (ns)",
            )
            return
        if not rec.start_ns <= now <= sim.now_ns:
            self.problems.add(
                "complete-time",
                f"on_complete for transfer #{rec.index} on {name} got time {now} ns, outside "
                f"[transfer start {rec.start_ns}, simulated now {sim.now_ns}] ns",
            )
        if now < self.last_completion_ns:
            self.problems.add(
                "complete-order",
                f"on_complete times went backwards: {now} ns after {self.last_completion_ns} ns",
            )
        self.last_completion_ns = max(self.last_completion_ns, now)
        done = self.completed_bytes.get(name, 0) + rec.nbytes
        self.completed_bytes[name] = done
        if rec.flow.delivered_bytes < done:
            self.problems.add(
                "complete-early",
                f"on_complete for transfer #{rec.index} on {name} came when "
                f"{rec.flow.delivered_bytes} of the flow's {done} requested bytes were "
                "delivered: it must wait until every byte is delivered",
            )

    # -- the run ---------------------------------------------------------------------
    def execute(self) -> None:
        sc = self.scenario
        wl = sc.workload
        assert wl is not None
        sim = _CheckedSimulation(sc, seed=self.seed, source="<check_policy>")
        sim.run_state = self
        for name in sim.stations:
            sim.set_hooks(name, sim.station(name).hooks)
        workers = tuple(sc.workers)
        mpc = MpcLoop(sim, wl.mpc, wl.leader, workers)
        team = Team(
            sim=sim, leader=wl.leader, workers=workers, ls_flows=mpc.flow_names, mpc=wl.mpc,
            options=sc.policy, ls_schedule=mpc.next_send_ns, ls_send=mpc.next_send,
        )  # fmt: skip
        qualname = self.policy_cls.__qualname__
        try:
            policy = self.policy_cls(team)
        except Exception as exc:
            self.problems.add("init", f"{qualname}(team) raised {_where(exc)}")
            return
        try:
            policy.install()
        except Exception as exc:
            self.problems.add("install", f"{qualname}.install() raised {_where(exc)}")
            return
        # Hooks assigned to a station directly (not through set_hooks) are watched too.
        for name, st in sim.stations.items():
            if not isinstance(st.hooks, _SpyHooks):
                sim.set_hooks(name, st.hooks)
        item = wl.drlc.item_bytes or len(workers) * (wl.mpc.perception_bytes + wl.mpc.control_bytes)
        drlc = Drlc(sim, wl.drlc, wl.leader, workers, item, self._sender(sim, policy))
        drlc.begin()
        items = [CHECK_EPOCHS * wl.drlc.batch_items]

        def loop_done(_rec: object) -> None:
            if items[0] > 0:
                items[0] -= 1
                drlc.add_item()

        mpc.on_loop_done = loop_done
        mpc.begin()
        try:
            sim.run(self.until)
        except Exception as exc:
            self.problems.add("run-raised", f"the simulation stopped: {_where(exc)}")
        self._final_checks(sim, policy, mpc, drlc)

    def _final_checks(self, sim: Simulation, policy: Policy, mpc: MpcLoop, drlc: Drlc) -> None:
        p = self.problems
        if not self.transfers:
            p.add("no-transfers", "the workload started no bulk transfer (scenario too short?)")
        pending = [t for t in self.transfers if not t.completions]
        if pending:
            t = pending[0]
            p.add(
                "incomplete",
                f"{len(pending)} of {len(self.transfers)} bulk transfers started through "
                f"send_bulk never completed within {self.until / 1e9:g} s (first: "
                f"#{t.index}, {t.nbytes} bytes on {t.flow.name} from {t.robot!r}, started "
                f"at {t.start_ns} ns, {t.flow.delivered_bytes} bytes delivered on the flow)",
            )
        requested: dict[str, int] = {}
        flows: dict[str, FlowState] = {}
        for t in self.transfers:
            requested[t.flow.name] = requested.get(t.flow.name, 0) + t.nbytes
            flows[t.flow.name] = t.flow
        incomplete_flows = {t.flow.name for t in pending}
        for name, want in requested.items():
            got = flows[name].delivered_bytes
            if name not in incomplete_flows and got != want:
                p.add(
                    f"bytes-{name}",
                    f"flow {name}: {got} bytes delivered for {want} bytes requested "
                    f"({'lost' if got < want else 'extra'} {abs(want - got)} bytes)",
                )
        finished = [r for r in mpc.records if r.end_ns >= 0]
        abandoned = len(mpc.records) - len(finished)
        self.loops_finished = len(finished)
        if not finished:
            p.add("mpc-stalled", "no MPC loop finished: the LS traffic did not get through")
        elif abandoned:
            p.add("mpc-abandoned", f"{abandoned} of {len(mpc.records)} MPC loops were abandoned")
        stats: Any = None
        try:
            stats = policy.stats()
            if not isinstance(stats, dict):
                p.add("stats-type", f"stats() returned {type(stats).__name__}, not a dict")
            json.dumps(stats, sort_keys=True)
        except Exception as exc:
            p.add("stats", f"stats() failed or is not JSON-able: {_where(exc)}")
        ch = sim.channel.stats
        self.fingerprint = {
            "MPC loop records": [(r.index, r.start_ns, r.end_ns) for r in mpc.records],
            "DRLC epochs": [(e.index, e.worker, e.start_ns, e.end_ns) for e in drlc.epochs],
            "bulk transfers": [
                (t.index, t.robot, t.flow.name, t.nbytes, t.start_ns, tuple(t.completions))
                for t in self.transfers
            ],
            "per-flow counters": sorted(
                (n, f.sent_packets, f.delivered_packets, f.delivered_bytes)
                for n, f in sim.flows.items()
            ),
            "channel counters": (ch.busy_ns, ch.exchanges, ch.collisions),
            "policy stats": json.dumps(stats, sort_keys=True, default=repr),
        }


def _first_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    for part, value in a.items():
        if b.get(part) != value:
            return part
    return None


def _check_class(policy_cls: object, problems: _Problems) -> bool:
    if not isinstance(policy_cls, type) or not issubclass(policy_cls, Policy):
        problems.add(
            "not-a-policy",
            f"{policy_cls!r} is not a subclass of coorp.policies.Policy",
        )
        return False
    name = getattr(policy_cls, "name", None)
    if not isinstance(name, str) or not name.strip():
        problems.add("name", f"{policy_cls.__qualname__}.name must be a non-empty string")
    summary = getattr(policy_cls, "summary", None)
    if not isinstance(summary, str) or not summary.strip():
        problems.add("summary", f"{policy_cls.__qualname__}.summary must be a non-empty string")
    elif "\n" in summary.strip():
        problems.add("summary", f"{policy_cls.__qualname__}.summary must be one line")
    return True


def check_policy(
    policy_cls: type[Policy],
    *,
    scenario: Scenario | None = None,
    seed: int = 0,
    duration_s: float = 2.0,
) -> ConformanceReport:
    """Check that ``policy_cls`` keeps the Policy and DriverHooks contracts.

    The class is instantiated with a :class:`~coorp.policies.Team` directly (it need not
    be registered) and run twice, with the same seed, on ``scenario`` (default:
    :func:`conformance_scenario`, a leader and two workers) for ``duration_s`` simulated
    seconds. The workload gets data for two DRLC epochs, then only runs the MPC loop.

    Checked: ``name`` and a one-line ``summary``; ``install()`` and ``send_bulk()`` run;
    every transfer started through ``send_bulk`` completes, ``on_complete`` is called
    exactly once per transfer with an int time that never goes backwards and only when
    every byte is delivered (delivered == requested on every flow); every installed
    hook's ``admit_bulk`` returns ``None`` or an int later than ``now``; ``stats()`` is
    a JSON-able dict; MPC loops finish and none is abandoned; the two runs are
    identical; hooks declaring ``per_packet = False`` give the same results when called
    for every packet (a third run).

    Returns the :class:`ConformanceReport` when the policy conforms; raises
    :class:`PolicyConformanceError` listing every problem otherwise.
    """
    problems = _Problems()
    label = getattr(policy_cls, "__qualname__", repr(policy_cls))
    if not _check_class(policy_cls, problems):
        raise PolicyConformanceError(ConformanceReport(label, tuple(problems.render()), 0, 0, 0))
    sc = conformance_scenario() if scenario is None else scenario
    wl = sc.workload
    if wl is None or not wl.mpc.enabled or not wl.drlc.enabled:
        raise UsageError(
            "check_policy needs a scenario with a [workload] section whose MPC loop and "
            "DRLC are both enabled"
        )
    if not duration_s > 0:
        raise UsageError(f"duration_s must be > 0, got {duration_s}")
    until = s(duration_s)
    first = _Run(policy_cls, sc, seed, until)
    first.execute()
    for msg in first.problems.render():
        problems.add(msg, msg)
    second = _Run(policy_cls, sc, seed, until)
    second.execute()
    differs = _first_difference(first.fingerprint, second.fingerprint)
    if differs is not None:
        problems.add(
            "nondeterministic",
            f"not deterministic: two runs with seed {seed} gave different {differs} "
            "(use the simulation's random streams, sim.rng(name), not global randomness)",
        )
    elif first.batched:
        # The hooks promised per_packet = False: the driver asks admit_bulk once per
        # batch and skips the per-packet calls. That must not change any result.
        exact = _Run(policy_cls, sc, seed, until, force_per_packet=True)
        exact.execute()
        differs = _first_difference(first.fingerprint, exact.fingerprint)
        if differs is not None:
            robots = ", ".join(sorted(first.batched))
            problems.add(
                "per-packet-promise",
                f"the hooks on {robots} declare per_packet = False, but calling them for "
                f"every packet changes the {differs}: they must then ignore on_hw_enqueue/"
                "on_hw_complete and decide admit_bulk from now_ns and policy state only",
            )
    report = ConformanceReport(
        policy=f"{getattr(policy_cls, 'name', '?')!s} ({label})",
        problems=tuple(problems.render()),
        transfers=len(first.transfers),
        loops=first.loops_finished,
        admit_calls=first.admit_calls,
    )
    if not report.ok:
        raise PolicyConformanceError(report)
    return report
