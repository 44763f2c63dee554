"""The leader's tracking controller and the robots' reference routes.

Each worker follows a patrol route at a reference speed. The leader closes the loop
over the network: from a robot's last perceived pose it computes a velocity command
``(v, ω)`` with a discrete-time LQR on the unicycle's tracking-error dynamics,
linearised about the reference (Kanayama et al. 1990; Klančar & Škrjanc 2007)::

    e = R(θ)ᵀ (p_ref − p),  e_θ = θ_ref − θ
    e' = A e + B u,  A = [[0, ω_r, 0], [−ω_r, 0, v_r], [0, 0, 0]],  B = [[1, 0], [0, 0], [0, 1]]
    u = (v_r cos e_θ − v, ω_r − ω) = −K e

``K`` comes from the discrete algebraic Riccati equation solved by SciPy
(``scipy.linalg.solve_discrete_are``) for the loop period, once per reference speed.
The command is clipped to the robot's limits.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from coorp._errors import ConfigurationError

__all__ = [
    "LqrTracker",
    "Route",
    "drive_unicycle",
    "wrap_angle",
]


def wrap_angle(a: float) -> float:
    return (a + math.pi) % (2.0 * math.pi) - math.pi


class Route:
    """A polyline from the start through the waypoints, followed at a constant speed
    from ``start_s``; ``laps`` > 1 closes it back to the first waypoint each lap."""

    def __init__(
        self,
        start: tuple[float, float],
        waypoints: list[tuple[float, float]],
        speed_m_s: float,
        start_s: float,
        laps: int = 1,
    ) -> None:
        pts = [start, *waypoints]
        for _ in range(laps - 1):
            pts += [*waypoints]
        self.points = np.array(pts, float)
        seg = np.diff(self.points, axis=0)
        self.lengths = np.hypot(seg[:, 0], seg[:, 1])
        self.cum = np.concatenate([[0.0], np.cumsum(self.lengths)])
        self.total_m = float(self.cum[-1])
        self.speed = speed_m_s
        self.start_s = start_s
        self.end_s = start_s + self.total_m / speed_m_s
        self.goal = (float(self.points[-1, 0]), float(self.points[-1, 1]))
        self._heading0 = (
            math.atan2(seg[0, 1], seg[0, 0]) if len(seg) and self.lengths[0] > 0 else 0.0
        )

    def at(self, t_s: float) -> tuple[float, float, float, float]:
        """Reference (x, y, heading, speed) at time ``t_s``."""
        s = (t_s - self.start_s) * self.speed
        if s <= 0.0:
            x, y = self.points[0]
            return float(x), float(y), self._heading0, 0.0
        if s >= self.total_m:
            x, y = self.points[-1]
            k = len(self.lengths) - 1
            dx, dy = self.points[k + 1] - self.points[k]
            return float(x), float(y), math.atan2(dy, dx), 0.0
        k = int(np.searchsorted(self.cum, s, side="right")) - 1
        k = min(k, len(self.lengths) - 1)
        f = (s - self.cum[k]) / self.lengths[k] if self.lengths[k] > 0 else 0.0
        a, b = self.points[k], self.points[k + 1]
        x, y = a + f * (b - a)
        return float(x), float(y), math.atan2(b[1] - a[1], b[0] - a[0]), self.speed


@functools.cache
def _lqr_gain(v_r: float, period_s: float, q: tuple[float, float, float],
              r: tuple[float, float]) -> np.ndarray:  # fmt: skip
    try:
        from scipy.linalg import solve_discrete_are
    except ImportError as exc:
        raise ConfigurationError(
            f"the co-simulation's LQR needs SciPy: pip install 'coorp[cosim]': {exc}"
        ) from None
    # Straight-line reference (ω_r = 0): the gain for turns is the same to first order.
    a = np.eye(3) + period_s * np.array([[0.0, 0.0, 0.0], [0.0, 0.0, v_r], [0.0, 0.0, 0.0]])
    b = period_s * np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    qm, rm = np.diag(q), np.diag(r)
    p = solve_discrete_are(a, b, qm, rm)
    k: np.ndarray = np.linalg.solve(rm + b.T @ p @ b, b.T @ p @ a)
    return k


@dataclass(frozen=True, slots=True)
class LqrTracker:
    period_s: float
    max_speed_m_s: float
    max_turn_rad_s: float
    q: tuple[float, float, float] = (4.0, 4.0, 1.0)
    r: tuple[float, float] = (1.0, 1.0)

    def command(
        self, pose: tuple[float, float, float], ref: tuple[float, float, float, float]
    ) -> tuple[float, float]:
        """``(v m/s, ω rad/s)`` that steers ``pose`` onto the reference ``ref``."""
        x, y, th = pose
        xr, yr, thr, vr = ref
        c, s = math.cos(th), math.sin(th)
        dx, dy = xr - x, yr - y
        e = np.array([c * dx + s * dy, -s * dx + c * dy, wrap_angle(thr - th)])
        # A minimum linearisation speed keeps the lateral error controllable at rest.
        k = _lqr_gain(max(vr, 0.2), self.period_s, self.q, self.r)
        u = -k @ e
        v = vr * math.cos(e[2]) - float(u[0])
        w = -float(u[1])
        v = min(max(v, -self.max_speed_m_s), self.max_speed_m_s)
        w = min(max(w, -self.max_turn_rad_s), self.max_turn_rad_s)
        return v, w


def drive_unicycle(
    x: float, y: float, th: float, v: float, w: float, dt: float
) -> tuple[float, float, float]:
    """The unicycle integrated exactly over ``dt`` s at constant ``(v, w)``."""
    if abs(w) < 1e-9:
        return x + v * math.cos(th) * dt, y + v * math.sin(th) * dt, th
    th2 = th + w * dt
    return (x + v / w * (math.sin(th2) - math.sin(th)),
            y - v / w * (math.cos(th2) - math.cos(th)), th2)  # fmt: skip
