"""The physics world: MuJoCo bodies for the floor's obstacles and the robots.

MuJoCo does all rigid-body dynamics and contacts; Coorp only writes the MJCF and sets
actuator targets. A ground or aerial robot is a cylinder with two slide joints (x, y)
and a hinge (yaw), each driven by a velocity servo: the differential-drive (unicycle)
constraint is imposed through the targets, ``(v cos θ, v sin θ, ω)``, set every step, so
the body still has mass, actuator lag and contacts (it is stopped by a wall, not passed
through). Aerial robots fly at a fixed altitude in their own contact group. Static
robots (the leader's edge computer) are bodies without joints.

Line of sight: the number of obstacles a straight line between two antennas crosses is
what the path-loss model charges walls for. :meth:`World.walls_between` counts them with
``mj_ray`` against the obstacle geoms only (geom group 1); :meth:`World.pair_geometry`
answers every pair at once with the slab test of a segment against each obstacle box,
its pose and size read from the compiled MuJoCo model (a test checks that the two agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coorp._errors import ConfigurationError
from coorp._optional import import_mujoco
from coorp.cosim._config import CosimConfig, RobotKind

__all__ = ["World"]

#: Geom groups: robots (0) and obstacles (1); rays see group 1 only.
_OBSTACLE_GROUP = 1
#: Velocity-servo gains (N·s/m per kg of body, and N·m·s/rad): ~25 ms time constants.
_KV_PER_KG = 40.0
_MASS_KG = 5.0


@dataclass(frozen=True, slots=True)
class _Robot:
    index: int
    name: str
    kind: RobotKind
    radius_m: float
    altitude_m: float
    body: int
    #: qpos/qvel addresses of the x, y and yaw joints (-1: static).
    qx: int
    qy: int
    qt: int
    vx: int
    vy: int
    vt: int
    #: First of its three actuators (-1: static).
    act: int


def _mjcf(cfg: CosimConfig) -> str:
    sx, sy = cfg.world.size_m
    step_s = cfg.physics_step_ms / 1000.0
    parts = [
        '<mujoco model="coorp-cosim">',
        f'<option timestep="{step_s!r}" gravity="0 0 -9.81" integrator="implicitfast"/>',
        "<worldbody>",
        f'<geom name="floor" type="plane" size="{sx / 2!r} {sy / 2!r} 0.1" contype="0" '
        'conaffinity="0" group="2"/>',
    ]
    for o in cfg.world.obstacles:
        (cx, cy), (lx, ly), h = o.center_m, o.size_m, o.height_m
        parts.append(
            f'<geom name="obstacle:{o.name}" type="box" pos="{cx!r} {cy!r} {h / 2!r}" '
            f'size="{lx / 2!r} {ly / 2!r} {h / 2!r}" contype="1" conaffinity="1" '
            f'group="{_OBSTACLE_GROUP}"/>'
        )
    for r in cfg.robots:
        x, y = r.start_m
        half_h = 0.1
        # Ground robots collide with obstacles and each other; aerial ones only with
        # each other (they fly above the obstacles).
        bits = 2 if r.kind is RobotKind.AERIAL else 1
        geom = (
            f'<geom name="robot:{r.name}" type="cylinder" size="{r.radius_m!r} {half_h!r}" '
            f'mass="{_MASS_KG!r}" contype="{bits}" conaffinity="{bits}" group="0"/>'
        )
        if r.kind is RobotKind.STATIC:
            parts.append(f'<body name="{r.name}" pos="{x!r} {y!r} {r.altitude_m!r}">{geom}</body>')
            continue
        parts.append(
            f'<body name="{r.name}" pos="0 0 {r.altitude_m!r}">'
            f'<joint name="{r.name}:x" type="slide" axis="1 0 0" damping="0"/>'
            f'<joint name="{r.name}:y" type="slide" axis="0 1 0" damping="0"/>'
            f'<joint name="{r.name}:yaw" type="hinge" axis="0 0 1" damping="0"/>'
            f"{geom}</body>"
        )
    parts.append("</worldbody><actuator>")
    kv = _KV_PER_KG * _MASS_KG
    for r in cfg.robots:
        if r.kind is RobotKind.STATIC:
            continue
        inertia = 0.5 * _MASS_KG * r.radius_m**2
        parts.append(
            f'<velocity joint="{r.name}:x" kv="{kv!r}"/>'
            f'<velocity joint="{r.name}:y" kv="{kv!r}"/>'
            f'<velocity joint="{r.name}:yaw" kv="{_KV_PER_KG * inertia * 5!r}"/>'
        )
    parts.append("</actuator></mujoco>")
    return "".join(parts)


class World:
    """One MuJoCo model and its data; robots in ``cfg.robots`` order."""

    def __init__(self, cfg: CosimConfig) -> None:
        mj = import_mujoco()
        self._mj = mj
        self.cfg = cfg
        self.xml = _mjcf(cfg)
        self.model = mj.MjModel.from_xml_string(self.xml)
        self.data = mj.MjData(self.model)
        m = self.model
        robots = []
        act = 0
        for i, r in enumerate(cfg.robots):
            body = mj.mj_name2id(m, mj.mjtObj.mjOBJ_BODY, r.name)
            if r.kind is RobotKind.STATIC:
                robots.append(
                    _Robot(i, r.name, r.kind, r.radius_m, r.altitude_m, body,
                           -1, -1, -1, -1, -1, -1, -1)
                )  # fmt: skip
                continue
            j = [
                mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, f"{r.name}:{a}") for a in ("x", "y", "yaw")
            ]
            q = [int(m.jnt_qposadr[k]) for k in j]
            v = [int(m.jnt_dofadr[k]) for k in j]
            robots.append(_Robot(i, r.name, r.kind, r.radius_m, r.altitude_m, body,
                                 q[0], q[1], q[2], v[0], v[1], v[2], act))  # fmt: skip
            act += 3
        self.robots = tuple(robots)
        self.index = {r.name: r.index for r in self.robots}
        self.moving = tuple(r for r in self.robots if r.qx >= 0)
        for rb, c in zip(self.robots, cfg.robots, strict=True):
            if rb.qx >= 0:
                self.data.qpos[rb.qx] = c.start_m[0]
                self.data.qpos[rb.qy] = c.start_m[1]
                self.data.qpos[rb.qt] = math.radians(c.heading_deg)
        self._static_pose = {
            rb.index: (c.start_m[0], c.start_m[1], math.radians(c.heading_deg))
            for rb, c in zip(self.robots, cfg.robots, strict=True)
            if rb.qx < 0
        }
        mj.mj_forward(m, self.data)
        # Index arrays for vectorised reads and actuator writes.
        self._qx = np.array([r.qx for r in self.moving], np.int64)
        self._qy = np.array([r.qy for r in self.moving], np.int64)
        self._qt = np.array([r.qt for r in self.moving], np.int64)
        self._vx = np.array([r.vx for r in self.moving], np.int64)
        self._vy = np.array([r.vy for r in self.moving], np.int64)
        self._act = np.array([r.act for r in self.moving], np.int64)
        self._geom_robot = {
            mj.mj_name2id(m, mj.mjtObj.mjOBJ_GEOM, f"robot:{r.name}"): r.index for r in self.robots
        }
        self._groups = np.zeros(6, np.uint8)
        self._groups[_OBSTACLE_GROUP] = 1
        self._gid = np.zeros(1, np.int32)
        self._ray_origin = np.zeros(3)
        self._ray_dir = np.zeros(3)
        self._ray_cache: dict[tuple[int, int], tuple[tuple[float, ...], tuple[float, int]]] = {}
        self._touching: set[tuple[int, int]] = set()
        self.steps = 0
        # The obstacle boxes as MuJoCo placed them, for the vectorised line-of-sight
        # test: their faces in the world frame (the MJCF writes them axis-aligned).
        obs = [g for g in range(m.ngeom) if int(m.geom_group[g]) == _OBSTACLE_GROUP]
        centre = np.array(self.data.geom_xpos[obs], float).reshape(-1, 3)
        rot = np.array(self.data.geom_xmat[obs], float).reshape(-1, 3, 3)
        half = np.array(m.geom_size[obs], float).reshape(-1, 3)
        if any(int(m.geom_type[g]) != int(mj.mjtGeom.mjGEOM_BOX) for g in obs) or not (
            np.array_equal(rot, np.broadcast_to(np.eye(3), rot.shape))
        ):
            raise ConfigurationError("every obstacle geom must be an axis-aligned box")
        self._box_lo = centre - half
        self._box_hi = centre + half
        self._pair_p = np.zeros((len(self.robots), 3))
        self._pair_p[:, 2] = [r.altitude_m for r in self.robots]

    # -- state -------------------------------------------------------------------------
    def poses(self) -> np.ndarray:
        """``(n, 3)`` array of (x m, y m, yaw rad) per robot, in ``cfg.robots`` order."""
        out = np.empty((len(self.robots), 3))
        q = self.data.qpos
        for r in self.robots:
            if r.qx >= 0:
                out[r.index] = (q[r.qx], q[r.qy], q[r.qt])
            else:
                out[r.index] = self._static_pose[r.index]
        return out

    def pose(self, i: int) -> tuple[float, float, float]:
        r = self.robots[i]
        if r.qx < 0:
            return self._static_pose[i]
        q = self.data.qpos
        return float(q[r.qx]), float(q[r.qy]), float(q[r.qt])

    def speed(self, i: int) -> float:
        r = self.robots[i]
        if r.qx < 0:
            return 0.0
        v = self.data.qvel
        return math.hypot(float(v[r.vx]), float(v[r.vy]))

    def position3(self, i: int) -> np.ndarray:
        x, y, _ = self.pose(i)
        return np.array([x, y, self.robots[i].altitude_m])

    # -- stepping ----------------------------------------------------------------------
    def step(self, v: np.ndarray, w: np.ndarray) -> list[tuple[int, int]]:
        """One physics step with unicycle commands ``v`` (m/s), ``w`` (rad/s) for the
        moving robots (``self.moving`` order); returns contacts that began in it, as
        (robot, robot) or (robot, -1) for an obstacle."""
        d = self.data
        th = d.qpos[self._qt]
        ctrl = d.ctrl
        ctrl[self._act] = v * np.cos(th)
        ctrl[self._act + 1] = v * np.sin(th)
        ctrl[self._act + 2] = w
        self._mj.mj_step(self.model, d)
        self.steps += 1
        if d.ncon == 0 and not self._touching:
            return []
        now: set[tuple[int, int]] = set()
        for c in d.contact[: d.ncon]:
            a = self._geom_robot.get(int(c.geom1), -1)
            b = self._geom_robot.get(int(c.geom2), -1)
            if a < 0 and b < 0:
                continue
            now.add((min(a, b), max(a, b)) if a >= 0 and b >= 0 else (max(a, b), -1))
        began = sorted(now - self._touching)
        self._touching = now
        return began

    # -- radio geometry ----------------------------------------------------------------
    def pair_geometry(
        self, a: np.ndarray, b: np.ndarray, poses: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Distance (m, 3-D) and obstacles crossed for every pair ``(a[k], b[k])`` of
        robots at ``poses`` (:meth:`poses`' layout), all pairs at once: the segment
        between the two antennas against each obstacle box (slab test). A box counts when
        the segment passes through any part of it. For robots outside the obstacles (a
        ground robot's centre cannot enter one; an aerial one flies above) this is what
        :meth:`walls_between`'s ray casts count (a test checks it); they differ only for
        a segment with both ends inside one box, which rays cast from inside it do not
        see."""
        p = self._pair_p
        p[:, :2] = poses[:, :2]
        pa = p[a]
        seg = p[b] - pa
        dist: np.ndarray = np.sqrt(np.einsum("pi,pi->p", seg, seg))
        if not len(self._box_lo):
            return dist, np.zeros(len(a), np.int64)
        rel = pa[:, None, :]
        d = seg[:, None, :]
        # Where the segment crosses each pair of faces (as a fraction of its length). A
        # segment parallel to an axis (d = 0: two robots at the same altitude) gives
        # -inf..inf between the faces and an empty interval outside them.
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (self._box_lo - rel) / d
            t2 = (self._box_hi - rel) / d
        t_in = np.minimum(t1, t2).max(axis=2)
        t_out = np.maximum(t1, t2).min(axis=2)
        hit = (t_out > np.maximum(t_in, 0.0)) & (t_in < 1.0)
        walls: np.ndarray = hit.sum(axis=1)
        return dist, walls

    def walls_between(self, i: int, j: int) -> tuple[float, int]:
        """Distance (m, 3-D) between robots ``i`` and ``j`` and the number of obstacles the
        straight line between them crosses (``mj_ray``, obstacles only). A pair whose two
        positions have not changed since its last query is answered from a cache."""
        ax, ay, _ = self.pose(i)
        bx, by, _ = self.pose(j)
        az, bz = self.robots[i].altitude_m, self.robots[j].altitude_m
        where = (ax, ay, az, bx, by, bz)
        cached = self._ray_cache.get((i, j))
        if cached is not None and cached[0] == where:
            return cached[1]
        dx, dy, dz = bx - ax, by - ay, bz - az
        dist = math.sqrt(dx * dx + dy * dy + dz * dz)
        walls = 0
        if dist > 0.0:
            ux, uy, uz = dx / dist, dy / dist, dz / dist
            u = self._ray_dir
            u[0], u[1], u[2] = ux, uy, uz
            origin = self._ray_origin
            travelled = 0.0
            last = -1
            mj_ray = self._mj.mj_ray
            for _ in range(64):
                origin[0], origin[1], origin[2] = (
                    ax + ux * travelled, ay + uy * travelled, az + uz * travelled,
                )  # fmt: skip
                hit = mj_ray(self.model, self.data, origin, u, self._groups, 1, -1, self._gid)
                if hit < 0 or travelled + hit >= dist:
                    break
                g = int(self._gid[0])
                # A ray from inside a box reports its exit: entry and exit count once.
                if g != last:
                    walls += 1
                    last = g
                else:
                    last = -1
                travelled += hit + 1e-6
        out = (dist, walls)
        self._ray_cache[(i, j)] = (where, out)
        return out
