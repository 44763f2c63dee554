"""Team capacity benchmark (``coorp bench team``): how many robots at what rate fit.

Robots 1..N send S-byte messages at f Hz to the leader, which echoes them; the sweep
over N, f, S runs on several carriers (the simulated channel, coorp.runtime, raw UDP,
Cyclone DDS, Zenoh in network namespaces behind a rate-limited bottleneck), with and
without bulk traffic, and fits the seed's Communication Scaling Limit Volume
CSLV = N·f·S: the load at which p99 RTT crosses a bound or loss crosses a limit.
See ``docs/sizing.md``.
"""

from __future__ import annotations

from coorp.teambench import _builtin  # noqa: F401  (registers the shipped carriers)
from coorp.teambench._carriers import CARRIERS, Carrier, CellMeasurement, register_carrier
from coorp.teambench._config import TeamBenchConfig, load_config
from coorp.teambench._fit import CslvFit, fit_cslv
from coorp.teambench._report import render_tables, write_outputs
from coorp.teambench._run import TeamBenchResult, run_team

__all__ = [
    "CARRIERS",
    "Carrier",
    "CellMeasurement",
    "CslvFit",
    "TeamBenchConfig",
    "TeamBenchResult",
    "fit_cslv",
    "load_config",
    "register_carrier",
    "render_tables",
    "run_team",
    "write_outputs",
]
