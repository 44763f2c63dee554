"""Robots that move: MuJoCo physics and the channel simulator on one integer-ns timeline.

:func:`load_cosim` reads a scenario with a ``[cosim]`` section; :func:`run_cosim` runs
one policy and seed and returns a :class:`CosimResult` (tracking error, separation,
collisions, completion, reaction times, sync error). See docs/cosim.md.
"""

from coorp.cosim._config import (
    CosimConfig,
    CosimScenario,
    Coupling,
    RobotKind,
    load_cosim,
    parse_cosim,
)
from coorp.cosim._fleet import run_cosim
from coorp.cosim._radio import LinkState, Radio
from coorp.cosim._report import METRICS, aggregate, plot_cosim
from coorp.cosim._result import CosimResult
from coorp.cosim._run import CosimRun
from coorp.cosim._trace import Tracer

__all__ = [
    "METRICS",
    "CosimConfig",
    "CosimResult",
    "CosimRun",
    "CosimScenario",
    "Coupling",
    "LinkState",
    "Radio",
    "RobotKind",
    "Tracer",
    "aggregate",
    "load_cosim",
    "parse_cosim",
    "plot_cosim",
    "run_cosim",
]
