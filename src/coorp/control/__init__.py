"""COORP and baseline decision logic: pure, clock-injected, no I/O (paper §IV, §VI).

Every object here receives time as an argument (``now_ns``, integer nanoseconds) and
returns a decision; none reads a clock, sleeps, opens a socket or draws a random
number. The built-in simulator and the real Linux runtime drive the same code.

* Global preemption (Algorithm 1): :class:`GlobalController` on the leader,
  :class:`BulkClient` on every robot.
"""

from coorp.control._errors import ForeignGrantError, UnknownFlowError, UnknownRobotError
from coorp.control._interval import Interval
from coorp.control._permits import BulkClient, GlobalController, Grant, PermitStats, PermitUpdate

__all__ = [
    "BulkClient",
    "ForeignGrantError",
    "GlobalController",
    "Grant",
    "Interval",
    "PermitStats",
    "PermitUpdate",
    "UnknownFlowError",
    "UnknownRobotError",
]
