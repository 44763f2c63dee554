"""The built-in simulator of one shared 802.11ac or 802.11ax channel.

``simulate(scenario, seed=...)`` is the one-call API; :class:`Simulation` is the
programmable one (the workload layer and policies use it). See ``docs/simulator.md``.

The hot modules may be compiled with mypyc (same source, same results, several times
faster; see ``coorp._accel``). Compiled modules are used only while the sources are
exactly those they were built from: after an edit the plain Python modules are loaded
instead (with a warning), so a stale build never runs old code. ``COORP_PURE=1``
forces the plain modules. :data:`COMPILED` says which ones are in use.
"""

from coorp._accel import load as _load

#: Whether the mypyc-compiled simulator modules are in use.
COMPILED = _load("coorp.sim")

from coorp.sim.driver import (  # noqa: E402
    FOREVER,
    AckGateHooks,
    AdmitAll,
    AirtimeBudgetHooks,
    DriverHooks,
    DriverView,
    RunHooks,
)
from coorp.sim.engine import Simulation, simulate  # noqa: E402
from coorp.sim.mac import ChannelStats  # noqa: E402
from coorp.sim.ofdma import UlOfdma, UlOfdmaConfig, UlOfdmaStats  # noqa: E402
from coorp.sim.results import FlowStats, SimResult, StationStats  # noqa: E402

__all__ = [
    "COMPILED",
    "FOREVER",
    "AckGateHooks",
    "AdmitAll",
    "AirtimeBudgetHooks",
    "ChannelStats",
    "DriverHooks",
    "DriverView",
    "FlowStats",
    "RunHooks",
    "SimResult",
    "Simulation",
    "StationStats",
    "UlOfdma",
    "UlOfdmaConfig",
    "UlOfdmaStats",
    "simulate",
]
