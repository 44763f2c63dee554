"""Coordinated robotic learning on the simulated channel: the MPC loop and DRLC epochs.

:func:`run_crl` runs one scenario's workload under one policy and returns the metrics
``coorp compare`` reports.
"""

from coorp.workload._drlc import Drlc, EpochRecord
from coorp.workload._mpc import LoopRecord, MpcLoop
from coorp.workload._run import CrlResult, run_crl

__all__ = ["CrlResult", "Drlc", "EpochRecord", "LoopRecord", "MpcLoop", "run_crl"]
