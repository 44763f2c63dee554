"""Test helper: policies registered for a while, the registry as it was afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from coorp.policies import Policy, _registry, register_policy


@contextmanager
def registered(*policies: type[Policy]) -> Iterator[None]:
    """Register ``policies``; on leaving, undo every registration made meanwhile."""
    saved = dict(_registry._REGISTRY)
    try:
        for cls in policies:
            register_policy(cls)
        yield
    finally:
        _registry._REGISTRY.clear()
        _registry._REGISTRY.update(saved)
