"""Optional compilation of the simulator with mypyc (see ``coorp.sim.__init__``).

``mypyc_attr`` marks classes that must stay ordinary Python classes when the simulator
modules are compiled; without ``mypy_extensions`` installed it does nothing. It is
``coorp._accel``'s, named here so that the simulator's modules keep one import.
"""

from __future__ import annotations

from coorp._accel import mypyc_attr

__all__ = ["mypyc_attr"]
