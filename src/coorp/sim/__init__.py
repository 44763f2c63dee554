"""The built-in simulator of one shared 802.11ac channel.

``simulate(scenario, seed=...)`` is the one-call API; :class:`Simulation` is the
programmable one (the workload layer and policies use it). See ``docs/simulator.md``.
"""

from coorp.sim.driver import FOREVER, AdmitAll, DriverHooks, DriverView
from coorp.sim.engine import Simulation, simulate
from coorp.sim.mac import ChannelStats
from coorp.sim.results import FlowStats, SimResult, StationStats

__all__ = [
    "FOREVER",
    "AdmitAll",
    "ChannelStats",
    "DriverHooks",
    "DriverView",
    "FlowStats",
    "SimResult",
    "Simulation",
    "StationStats",
    "simulate",
]
