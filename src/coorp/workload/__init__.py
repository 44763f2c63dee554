"""Coordinated robotic learning on the simulated channel: the MPC loop and DRLC epochs.

:func:`run_crl` runs one scenario's workload under one policy and returns the metrics
``coorp compare`` reports, its raw tables (:meth:`CrlResult.tables`) and the warnings of a
run too short for what it reports (:meth:`CrlResult.warnings`,
:func:`comparison_warnings`). :func:`run_fleet` does the same for a fleet (``[fleet]``:
every robot's loop and learning with its cell's leader, hand-overs included).
"""

from coorp._accel import load as _load

_load("coorp.workload")  # the fleet loop compiled when fresh, else the plain one

from coorp.workload._drlc import Drlc, EpochRecord  # noqa: E402
from coorp.workload._fleet import FleetResult, run_fleet  # noqa: E402
from coorp.workload._fleetloop import FleetLearning, FleetLoop  # noqa: E402
from coorp.workload._mpc import LoopRecord, MpcLoop  # noqa: E402
from coorp.workload._run import CrlResult, comparison_warnings, run_crl  # noqa: E402
from coorp.workload._series import BIN_NS, SAMPLE_NS, Sampler  # noqa: E402

__all__ = [
    "BIN_NS",
    "SAMPLE_NS",
    "CrlResult",
    "Drlc",
    "EpochRecord",
    "FleetLearning",
    "FleetLoop",
    "FleetResult",
    "LoopRecord",
    "MpcLoop",
    "Sampler",
    "comparison_warnings",
    "run_crl",
    "run_fleet",
]
