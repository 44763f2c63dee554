"""Optional dependencies that several packages share, imported when first needed with an
error that names the extra installing them (ground floor: imports only
:mod:`coorp._errors`)."""

from __future__ import annotations

from typing import Any

from coorp._errors import ConfigurationError

__all__ = ["import_mujoco"]


def import_mujoco() -> Any:
    """The ``mujoco`` module (the co-simulation's physics and the learning task's
    ``physics="mujoco"``), or a :class:`~coorp.ConfigurationError` saying how to get it."""
    try:
        import mujoco
    except ImportError as exc:
        raise ConfigurationError(
            "MuJoCo is not installed (the co-simulation and the learning task's "
            "physics='mujoco' need it): pip install 'coorp[cosim]' or 'coorp[learn]' "
            f"(or `make`, which installs both): {exc}"
        ) from None
    return mujoco
