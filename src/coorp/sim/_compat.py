"""Optional compilation of the simulator with mypyc (see ``coorp.sim.__init__``).

``mypyc_attr`` marks classes that must stay ordinary Python classes when the simulator
modules are compiled; without ``mypy_extensions`` installed it does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - a plain install without mypy

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        def keep(cls: _T) -> _T:
            return cls

        return keep


__all__ = ["mypyc_attr"]
