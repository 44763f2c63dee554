"""One co-simulation run: MuJoCo robots and the channel simulator on one ns timeline.

The physics world steps as events on the channel simulator's event loop
(``call_control_at`` at k · step, so a step at instant t runs before any message sent at
t). The event at t_k integrates the world from t_{k-1} to t_k with the actuator targets
held over that interval, so the world's state at t_k is known exactly at t_k:

* a perception created at t (the MPC loop's send instant) carries the robot's pose at t
  — the state of the last step at or before t, what a discrete-time physics engine
  defines at t — and enters the channel at t (``Simulation.send_message`` at t);
* the leader computes a command when its control message is created (after inference,
  from the newest pose it received), and the command travels in that message;
* a command delivered at t_a takes effect from the first step at or after t_a (the
  actuator target is held between steps): that quantization is measured
  (``quantization_ns``, below one step);
* every link between two robots (leader–worker and worker–worker, both directions) gets
  its MCS and received power from distance and walls (``coorp.cosim._radio``) at every
  step.

With ``coupling = "fixed-window"`` or ``"velocity-window"`` the two simulators instead
exchange data only at window boundaries, as the seed's middleware does: a perception
carries the pose exported at the last boundary, a command delivered inside a window is
released at its end, and links follow the poses of the boundaries. The *sync error* of
each crossing is how far the instant its data takes effect is from its true instant
(0 ns by construction with exact coupling).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.cosim._config import CosimScenario, Coupling
from coorp.cosim._control import LqrTracker, Route, drive_unicycle
from coorp.cosim._radio import LinkState, Radio
from coorp.cosim._result import CosimResult
from coorp.cosim._world import World
from coorp.policies import Team, get_policy
from coorp.sim import Simulation
from coorp.sim.packets import FlowState, Message
from coorp.sim.station import BulkTransfer
from coorp.units import s, us
from coorp.workload import Drlc, MpcLoop

__all__ = ["CosimResult", "CosimRun"]

_NS = 1_000_000_000


class _CosimSimulation(Simulation):
    """The channel simulator with a hook on every datagram message: the co-simulation
    attaches the physical payload (a pose, a command) when a message is created and
    acts on it when the message is delivered."""

    on_message: (
        Callable[[FlowState, Callable[[Message], None] | None], Callable[[Message], None] | None]
        | None
    ) = None

    def send_message(
        self,
        flow: FlowState,
        size_bytes: int,
        on_delivered: Callable[[Message], None] | None = None,
    ) -> Message:
        hook = self.on_message
        if hook is not None:
            on_delivered = hook(flow, on_delivered)
        msg = super().send_message(flow, size_bytes, on_delivered)
        if self.on_sent is not None:
            self.on_sent(msg)
        return msg

    #: Called with every datagram message as it enters the channel (the trace logs it).
    on_sent: Callable[[Message], None] | None = None

    #: Called with every bulk transfer as it starts (the trace logs its completion).
    on_transfer: (
        Callable[[FlowState, int | None, Callable[[BulkTransfer, int], None] | None],
                 Callable[[BulkTransfer, int], None] | None]
        | None
    ) = None  # fmt: skip

    def start_transfer(
        self,
        flow: FlowState,
        total_bytes: int | None,
        on_complete: Callable[[BulkTransfer, int], None] | None = None,
        gated: bool = True,
    ) -> BulkTransfer:
        hook = self.on_transfer
        if hook is not None:
            on_complete = hook(flow, total_bytes, on_complete)
        return super().start_transfer(flow, total_bytes, on_complete, gated)


@dataclass(slots=True)
class _Command:
    v: float
    w: float
    created_ns: int
    state_ns: int  # when the pose it was computed from was sampled


@dataclass(slots=True)
class _Perception:
    """What a perception carries: the robot's pose and its sample instant."""

    pose: tuple[float, float, float]
    stamp: int


class CosimRun:
    """Builds the channel simulation, the workload, the policy and the world; runs them."""

    def __init__(
        self,
        cs: CosimScenario,
        policy: str,
        *,
        seed: int | None = None,
        coupling: Coupling | None = None,
        tracer: Any = None,
    ) -> None:
        sc, cfg = cs.scenario, cs.cosim
        self.cs = cs
        self.cfg = cfg
        self.coupling = cfg.coupling if coupling is None else coupling
        self.policy_name = policy
        self.leader, self.workers, period_s = self._roles()
        sim = _CosimSimulation(sc, seed=seed, source=cs.source)
        self.sim = sim
        self.world = World(cfg)
        self.radio = Radio(cfg.radio, spatial_streams=sc.phy.spatial_streams,
                           width_mhz=sc.phy.width_mhz)  # fmt: skip
        w = self.world
        self._li = w.index[self.leader]
        self._wi = [w.index[n] for n in self.workers]
        self._moving_pos = {r.index: k for k, r in enumerate(w.moving)}
        start_s = cfg.task.start_ms / 1000.0
        self.routes: dict[int, Route] = {}
        self.trackers: dict[int, LqrTracker] = {}
        for i in self._wi:
            rc = cfg.robots[i]
            speed = rc.speed_m_s or cfg.task.speed_m_s
            self.routes[i] = Route(rc.start_m, cfg.waypoints(rc), speed, start_s, cfg.task.laps)
            self.trackers[i] = LqrTracker(period_s, rc.max_speed_m_s,
                                          math.radians(rc.max_turn_deg_s))  # fmt: skip
        pairs = self._pair_list()
        self._pairs = pairs
        self._pair_index = {pair: k for k, pair in enumerate(pairs)}
        self._pa = np.array([a for a, _ in pairs], np.int64)
        self._pb = np.array([b for _, b in pairs], np.int64)
        # Per-link shadowing: one draw per unordered pair, keyed by the seed.
        rng = sim.rng("cosim:shadowing")
        sigma = cfg.radio.shadowing_db
        self._shadow = np.array([float(rng.normal(0.0, sigma)) if sigma else 0.0
                                 for _ in pairs])  # fmt: skip
        n_pairs = len(pairs)
        self._link_dist = np.zeros(n_pairs)
        self._link_walls = np.zeros(n_pairs, np.int64)
        self._link_rx = np.full(n_pairs, np.nan)
        self._link_best = np.full(n_pairs, -1, np.int64)
        self._link_mcs = np.full(n_pairs, -1, np.int64)
        self._link_poses: np.ndarray | None = None
        # Links from the initial geometry before the policy is installed: a policy that
        # plans from link rates (SchedWiFi's windows, the bulk-cost prior, which takes a
        # robot's slowest link to any station) sees the robots' real starting links, as
        # a deployment would when it is set up.
        self._update_links(w.poses())
        self.deadline_ns = self._install_workload(policy)
        # Co-simulation state.
        self.step_ns = cfg.step_ns
        self.stale_ns = round(cfg.staleness_limit_ms * 1e6)
        self.record_every = max(1, round(cfg.record_period_ms * 1e6 / self.step_ns))
        n_mov = len(w.moving)
        self._v = np.zeros(n_mov)
        self._w = np.zeros(n_mov)
        self._cmd: dict[int, _Command] = {}
        self._pending: list[tuple[int, int, _Command]] = []  # (release ns, robot, command)
        self._held: list[tuple[int, int, _Command]] = []  # delivered, awaiting a boundary
        self._belief: dict[int, _Perception] = {}
        #: Commands the leader sent to each robot, oldest first (for its prediction).
        self._sent: dict[int, list[_Command]] = {}
        self._exported: tuple[np.ndarray, int] = (w.poses(), 0)
        self._poses = w.poses()
        self.tracer = tracer
        # Outcome records.
        self._times: list[int] = []
        self._pose_rec: list[np.ndarray] = []
        self._ref_rec: list[np.ndarray] = []
        self._mcs_rec: list[list[int]] = []
        self._walls_rec: list[list[int]] = []
        self._age: list[int] = []
        self._pred_err: list[float] = []
        self._quant: list[int] = []
        self._inject: list[int] = []
        self._apply: list[int] = []
        self._coll_robot = 0
        self._coll_obstacle = 0
        self._stopped = 0
        self._worker_steps = 0
        self._done_at: dict[int, int] = {}
        sim.on_message = self._on_message
        if tracer is not None:
            sim.on_transfer = self._on_transfer
            sim.on_sent = self._on_sent

    # -- who is who, and what runs on the air (a fleet's: coorp.cosim._fleet) -------------
    def _roles(self) -> tuple[str, tuple[str, ...], float]:
        """The leader, the workers and the loop period (s)."""
        sc = self.cs.scenario
        wl = sc.workload
        if wl is None:  # parse_cosim guarantees it; for a hand-built CosimScenario
            raise UsageError(f"{self.cs.source}: a co-simulation needs a [workload] section")
        return wl.leader, tuple(sc.workers), wl.mpc.period_us / 1e6

    def _pair_list(self) -> list[tuple[int, int]]:
        """Every unordered pair of robots, the leader's first (in worker order), then the
        workers' among themselves; each pair sets both directions of its link."""
        pairs = [(self._li, i) for i in self._wi]
        pairs += [(a, b) for k, a in enumerate(self._wi) for b in self._wi[k + 1 :]]
        return pairs

    def _install_workload(self, policy: str) -> int:
        """Workload and policy, assembled as coorp.workload.run_crl does; the deadline."""
        sc, sim = self.cs.scenario, self.sim
        wl = sc.workload
        assert wl is not None
        self.mpc = MpcLoop(sim, wl.mpc, wl.leader, self.workers)
        team = Team(
            sim=sim, leader=wl.leader, workers=self.workers, ls_flows=self.mpc.flow_names,
            mpc=wl.mpc, options=sc.policy, ls_schedule=self.mpc.next_send_ns,
            ls_send=self.mpc.next_send, ls_phases=self.mpc.phase_ns,
        )  # fmt: skip
        self.policy = get_policy(policy)(team)
        self.policy.install()
        self.drlc: Drlc | None = None
        if wl.drlc.enabled:
            item = wl.drlc.item_bytes or len(self.workers) * (
                wl.mpc.perception_bytes + wl.mpc.control_bytes
            )
            self.drlc = Drlc(sim, wl.drlc, wl.leader, self.workers, item, self.policy.send_bulk)
            self.drlc.begin()
            drlc = self.drlc
            self.mpc.on_loop_done = lambda _rec: drlc.add_item()
        self.mpc.on_expect = self.policy.expect_ls_send
        return us(wl.mpc.deadline_us)

    def _begin_workload(self) -> None:
        self.mpc.begin()

    def _after_links(self, now: int) -> None:
        """The links were just updated from the world (a fleet decides hand-overs here)."""

    def _finish(self, result: Any) -> tuple[tuple[Any, ...], int, dict[str, Any]]:
        """The loop records, the bulk bytes delivered and what else the run reports."""
        bulk = self.drlc.bulk_flow_names if self.drlc is not None else frozenset()
        return tuple(self.mpc.records), sum(result.flows[n].delivered_bytes for n in bulk), {}

    # -- network crossings ------------------------------------------------------------
    def _state_for_message(self, i: int) -> _Perception:
        now = self.sim.now_ns
        if self.coupling is Coupling.EXACT:
            self._inject.append(0)
            p = self._poses[i]
            at = now
        else:
            poses, at = self._exported
            self._inject.append(now - at)
            p = poses[i]
        return _Perception((float(p[0]), float(p[1]), float(p[2])), at)

    def _on_message(
        self, flow: FlowState, on_delivered: Callable[[Message], None] | None
    ) -> Callable[[Message], None] | None:
        name = flow.name
        now = self.sim.now_ns
        payload: Any = None
        if name.startswith("perception:"):
            i = self.world.index[flow.src.name]
            payload = self._state_for_message(i)
        elif name.startswith("control:"):
            i = self.world.index[flow.dst.name]
            belief = self._belief.get(i)
            if belief is not None:
                pose, stamp = belief.pose, belief.stamp
                if self.cfg.leader_prediction:
                    pose = self._predict(i, pose, stamp, now)
                # How far the pose the command is computed from is from the robot's pose
                # now: the leader's estimate error (without prediction: how far the robot
                # moved since the sample).
                p = self._poses[i]
                self._pred_err.append(math.hypot(pose[0] - p[0], pose[1] - p[1]))
                ref = self.routes[i].at(now / _NS)
                v, w = self.trackers[i].command(pose, ref)
                payload = _Command(v, w, now, stamp)
                self._sent.setdefault(i, []).append(payload)
        elif self.tracer is None:
            return on_delivered  # another flow (a policy's permits): nothing to attach
        created = now

        def delivered(m: Message) -> None:
            self._arrived(flow, payload, created, m)
            if on_delivered is not None:
                on_delivered(m)

        return delivered

    def _on_sent(self, m: Message) -> None:
        f = m.flow
        self.tracer.sent(m.created_ns, m.msg_id, f.name, f.src.name, f.dst.name, m.size_bytes)

    def _on_transfer(
        self,
        flow: FlowState,
        total_bytes: int | None,
        on_complete: Callable[[BulkTransfer, int], None] | None,
    ) -> Callable[[BulkTransfer, int], None] | None:
        started = self.sim.now_ns
        tracer = self.tracer

        def completed(t: BulkTransfer, now: int) -> None:
            tracer.transfer(now, flow.name, flow.src.name, flow.dst.name,
                            total_bytes or 0, started)  # fmt: skip
            if on_complete is not None:
                on_complete(t, now)

        return completed

    def _predict(
        self, i: int, pose: tuple[float, float, float], stamp: int, now: int
    ) -> tuple[float, float, float]:
        """The leader's estimate of robot ``i``'s pose at ``now`` from its pose at
        ``stamp``: the unicycle integrated exactly with the commands the leader sent,
        each taken to act from its creation (the leader does not see when they arrive)
        until the next one or the staleness limit; standing still otherwise."""
        sent = self._sent.get(i, [])
        # Commands that ended before the pose was sampled are no longer needed.
        while len(sent) > 1 and sent[1].created_ns <= stamp:
            sent.pop(0)
        x, y, th = pose
        t = stamp
        for k, c in enumerate(sent):
            end = sent[k + 1].created_ns if k + 1 < len(sent) else now
            # The robot's staleness rule: a command acts for at most the limit.
            end = min(end, c.created_ns + self.stale_ns)
            start = max(t, c.created_ns)
            if end <= start:
                continue
            dt = (min(end, now) - start) / _NS
            if dt <= 0.0:
                break
            x, y, th = drive_unicycle(x, y, th, c.v, c.w, dt)
            t = min(end, now)
        return x, y, th

    def _arrived(self, flow: FlowState, payload: Any, created: int, m: Message) -> None:
        now = self.sim.now_ns
        if self.tracer is not None:
            self.tracer.message(now, m.msg_id, flow.name, flow.src.name, flow.dst.name,
                                m.size_bytes, created)  # fmt: skip
        if payload is None:
            return
        if isinstance(payload, _Command):
            i = self.world.index[flow.dst.name]
            if self.coupling is Coupling.EXACT:
                self._pending.append((now, i, payload))
            else:
                self._held.append((now, i, payload))
            return
        i = self.world.index[flow.src.name]
        old = self._belief.get(i)
        if old is None or payload.stamp >= old.stamp:
            self._belief[i] = payload

    # -- physics ------------------------------------------------------------------------
    def _apply_pending(self, now: int) -> None:
        if not self._pending:
            return
        keep = []
        for release, i, c in self._pending:
            if release > now:
                keep.append((release, i, c))
                continue
            self._quant.append(now - release)
            old = self._cmd.get(i)
            if old is not None and c.created_ns < old.created_ns:
                continue  # an older command overtaken by a newer one: ignored
            self._cmd[i] = c
            self._age.append(now - c.state_ns)
        self._pending = keep

    def _boundary(self, now: int) -> None:
        """A window boundary: the simulators exchange what accumulated."""
        for arrived, i, c in self._held:
            self._apply.append(now - arrived)
            self._pending.append((now, i, c))
        self._held = []
        poses = self.world.poses()
        self._exported = (poses, now)
        self._update_links(poses)
        self._after_links(now)
        if self.coupling is Coupling.FIXED_WINDOW:
            nxt = now + round(self.cfg.window_ms * 1e6)
        else:
            # The seed's w_a = w + (V_p - V_s) / 1000 (w in s, V in m/s), with the largest
            # speed difference of any leader-worker pair, so the window only grows.
            dv = max(
                (abs(self.world.speed(i) - self.world.speed(self._li)) for i in self._wi),
                default=0.0,
            )
            nxt = now + round((self.cfg.window_ms / 1000.0 + dv / 1000.0) * _NS)
        self.sim.call_control_at(nxt, self._boundary, nxt)

    def _update_links(self, poses: np.ndarray) -> None:
        """Every robot pair's link from the world's geometry at ``poses``: distance and
        obstacles crossed (all pairs at once), path loss, MCS; both directions of a pair
        whose MCS or received power changed are written to the channel's link table."""
        last = self._link_poses
        if last is not None and np.array_equal(last, poses):
            return  # nobody moved: every link as it was
        self._link_poses = poses.copy()
        dist, walls = self.world.pair_geometry(self._pa, self._pb, poses)
        rx, best = self.radio.links(dist, walls, self._shadow)
        mcs = np.maximum(best, 0)
        changed = np.flatnonzero((mcs != self._link_mcs) | (rx != self._link_rx))
        set_link = self.sim.links.set_link
        pairs = self._pairs
        for k, m, p in zip(changed.tolist(), mcs[changed].tolist(), rx[changed].tolist(),
                           strict=True):  # fmt: skip
            a, b = pairs[k]
            set_link(a, b, m, p)
            set_link(b, a, m, p)
        self._link_dist, self._link_walls, self._link_rx = dist, walls, rx
        self._link_best, self._link_mcs = best, mcs

    def link_state(self, a: int, b: int) -> LinkState:
        """The current link between robots ``a`` and ``b`` (world indices)."""
        k = self._pair_index.get((a, b))
        if k is None:
            k = self._pair_index[(b, a)]
        best = int(self._link_best[k])
        return LinkState(float(self._link_dist[k]), int(self._link_walls[k]),
                         float(self._link_rx[k]), None if best < 0 else best)  # fmt: skip

    def _leader_links(self) -> dict[int, LinkState]:
        return {i: self.link_state(self._li, i) for i in self._wi}

    def _step(self, k: int) -> None:
        now = self.sim.now_ns
        w = self.world
        if k > 0:
            for _a, b in w.step(self._v, self._w):
                if b < 0:
                    self._coll_obstacle += 1
                else:
                    self._coll_robot += 1
        self._poses = w.poses()
        if self.coupling is Coupling.EXACT:
            self._update_links(self._poses)
            self._after_links(now)
        self._apply_pending(now)
        # Actuator targets for the next interval: the last command, unless stale.
        for i in self._wi:
            j = self._moving_pos.get(i)
            if j is None:
                continue
            self._worker_steps += 1
            c = self._cmd.get(i)
            # The command's age counts from its creation (its message is stamped by the
            # leader): one that arrives older than the limit stops the robot at once.
            if c is None or now - c.created_ns > self.stale_ns:
                self._v[j] = 0.0
                self._w[j] = 0.0
                if c is not None:
                    self._stopped += 1
            else:
                self._v[j] = c.v
                self._w[j] = c.w
        if k % self.record_every == 0:
            self._record(now)
        self.sim.call_control_at(now + self.step_ns, self._step, k + 1)

    def _record(self, now: int) -> None:
        t = now / _NS
        poses = self._poses
        refs = np.empty((len(self._wi), 2))
        for n, i in enumerate(self._wi):
            route = self.routes[i]
            x, y, _, _ = route.at(t)
            refs[n] = (x, y)
            if i not in self._done_at and t >= route.end_s:
                gx, gy = route.goal
                if math.hypot(poses[i, 0] - gx, poses[i, 1] - gy) <= self.cfg.task.tolerance_m:
                    self._done_at[i] = now
        self._times.append(now)
        self._pose_rec.append(poses.copy())
        self._ref_rec.append(refs)
        nw = len(self._wi)  # the leader's pairs come first
        self._mcs_rec.append(self._link_mcs[:nw].tolist())
        self._walls_rec.append(self._link_walls[:nw].tolist())
        if self.tracer is not None:
            self.tracer.poses(now, self.world, poses, refs, self._wi, self._leader_links())

    # -- running ------------------------------------------------------------------------
    def run(self, duration_ns: int | None = None) -> CosimResult:
        sc = self.cs.scenario
        until = s(sc.duration_s) if duration_ns is None else duration_ns
        if until <= 0:
            raise UsageError(f"duration must be > 0 ns, got {until}")
        if self.coupling is not Coupling.EXACT:
            self.sim.call_control_at(0, self._boundary, 0)
        self.sim.call_control_at(0, self._step, 0)
        if self.tracer is not None:
            self.tracer.set_leader(self.leader)
            self.tracer.scene(0, self.cfg)
        self._begin_workload()
        t0 = time.perf_counter()
        result = self.sim.run(until)
        wall = time.perf_counter() - t0
        return self._result(until, wall, result)

    def _result(self, until: int, wall: float, result: Any) -> CosimResult:
        times = np.array(self._times, np.int64)
        poses = np.array(self._pose_rec)
        refs = np.array(self._ref_rec)
        wp = poses[:, self._wi, :2]
        started = times >= round(self.cfg.task.start_ms * 1e6)
        err = np.hypot(*(wp - refs).transpose(2, 0, 1))[started]
        # Minimum surface gap between any two robots over the samples.
        n = len(self.world.robots)
        radii = np.array([r.radius_m for r in self.world.robots])
        alt = np.array([r.altitude_m for r in self.world.robots])
        min_sep = math.inf
        for a in range(n):
            for b in range(a + 1, n):
                d = np.sqrt(
                    (poses[:, a, 0] - poses[:, b, 0]) ** 2
                    + (poses[:, a, 1] - poses[:, b, 1]) ** 2
                    + (alt[a] - alt[b]) ** 2
                )
                min_sep = min(min_sep, float(d.min()) - radii[a] - radii[b])
        done = self._done_at
        completion = max(done.values()) / _NS if len(done) == len(self._wi) and done else None
        loops, bh_bytes, extra = self._finish(result)
        reaction = np.array(
            [r.reaction_ns if r.reaction_ns is not None else math.inf for r in loops], float
        )
        return CosimResult(
            policy=self.policy_name, seed=self.sim.seed, coupling=self.coupling.value,
            duration_ns=until, step_ns=self.step_ns,
            robots=tuple(r.name for r in self.world.robots), workers=self.workers,
            times_ns=times, poses=poses, references=refs, tracking_error_m=err,
            min_separation_m=min_sep, collisions_robot=self._coll_robot,
            collisions_obstacle=self._coll_obstacle, completion_s=completion,
            reaction_ns=reaction, deadline_ns=self.deadline_ns,
            actuation_age_ns=np.array(self._age, np.int64),
            estimate_error_m=np.array(self._pred_err),
            stopped_fraction=self._stopped / max(self._worker_steps, 1),
            quantization_ns=np.array(self._quant, np.int64),
            sync_inject_ns=np.array(self._inject, np.int64),
            sync_apply_ns=np.array(self._apply, np.int64),
            link_mcs=np.array(self._mcs_rec, np.int64),
            link_walls=np.array(self._walls_rec, np.int64),
            bh_bytes=bh_bytes, wall_s=wall, **extra,
        )  # fmt: skip
