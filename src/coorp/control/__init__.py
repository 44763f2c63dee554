"""COORP and baseline decision logic: pure, clock-injected, no I/O (paper §IV, §VI).

Every object here receives time as an argument (``now_ns``, integer nanoseconds) and
returns a decision; none reads a clock, sleeps, opens a socket or draws a random
number. The built-in simulator and the real Linux runtime drive the same code.

* Global preemption (Algorithm 1): :class:`GlobalController` on the leader,
  :class:`BulkClient` on every robot.
* Local preemption: :class:`SendTimeModel` per LS flow, merged into protection
  windows by :class:`ProtectionPlanner`; :class:`CompletionTimeTable` and
  :class:`Gate` (Algorithm 2) decide whether the NIC may take another bulk packet.
* A fleet's co-channel teams: :class:`CellLeader` per cell, leaders that elect a
  coordinator per channel (Algorithm 1 across teams), per-team when cut off.
* SchedWiFi baseline: :func:`stw_duration_ns` (Eq. 4), :class:`SchedWifiPlanner`
  and :class:`TimeAwareShaper`.

See ``docs/control.md`` for the exact rules and defaults. The modules may run compiled
with mypyc (same code, same results; ``coorp._accel``).
"""

from coorp._accel import load as _load

_load("coorp.control")  # the compiled modules when fresh, else the plain ones

from coorp.control._cells import CellActions, CellLeader, CellStats, PeerKind, PeerMessage  # noqa: E402
from coorp.control._ctt import CompletionTimeTable  # noqa: E402
from coorp.control._errors import ForeignGrantError, UnknownFlowError, UnknownRobotError  # noqa: E402
from coorp.control._gate import Gate, GateDecision, GateStats, decide_against  # noqa: E402
from coorp.control._interval import Interval  # noqa: E402
from coorp.control._permits import BulkClient, GlobalController, Grant, PermitStats, PermitUpdate  # noqa: E402
from coorp.control._schedwifi import (  # noqa: E402
    PeriodicWindow,
    SchedWifiPlanner,
    TimeAwareShaper,
    stw_duration_ns,
)
from coorp.control._timemodel import SendTimeModel  # noqa: E402
from coorp.control._windows import ProtectionPlanner, WindowSource, first_window, merge_intervals  # noqa: E402

__all__ = [
    "BulkClient",
    "CellActions",
    "CellLeader",
    "CellStats",
    "CompletionTimeTable",
    "ForeignGrantError",
    "Gate",
    "GateDecision",
    "GateStats",
    "GlobalController",
    "Grant",
    "Interval",
    "PeerKind",
    "PeerMessage",
    "PeriodicWindow",
    "PermitStats",
    "PermitUpdate",
    "ProtectionPlanner",
    "SchedWifiPlanner",
    "SendTimeModel",
    "TimeAwareShaper",
    "UnknownFlowError",
    "UnknownRobotError",
    "WindowSource",
    "decide_against",
    "first_window",
    "merge_intervals",
    "stw_duration_ns",
]
