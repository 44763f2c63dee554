"""The policy registry: names -> policy classes. No ``if policy == ...`` anywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from coorp._errors import UsageError
from coorp.phy import PhyStandard
from coorp.policies._base import Policy

__all__ = [
    "add_policy_finder",
    "get_policy",
    "policy_label",
    "policy_names",
    "register_policy",
]

_REGISTRY: dict[str, type[Policy]] = {}
#: Asked, in order, to register more policies before a name is reported unknown (the
#: installed entry points: :mod:`._plugins` adds its loader here, so the registry needs
#: no knowledge of where plugins come from).
_FINDERS: list[Callable[[], object]] = []
P = TypeVar("P", bound=type[Policy])


def add_policy_finder(finder: Callable[[], object]) -> None:
    """Have :func:`get_policy` call ``finder()`` (which registers policies) before it
    reports a name unknown."""
    if finder not in _FINDERS:
        _FINDERS.append(finder)


def register_policy(cls: P) -> P:
    """Class decorator: make ``cls`` available as ``cls.name`` (names are unique)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{cls.__qualname__} must set a non-empty class attribute 'name'")
    if not isinstance(getattr(cls, "summary", None), str):
        raise UsageError(f"policy {name!r} must set a class attribute 'summary' (one line)")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise UsageError(f"policy name {name!r} is already registered by {existing.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def get_policy(name: str) -> type[Policy]:
    """The policy class registered as ``name``; installed ``coorp.policies`` entry points
    are loaded before a name is reported unknown."""
    cls = _REGISTRY.get(name)
    for finder in _FINDERS:
        if cls is not None:
            break
        finder()
        cls = _REGISTRY.get(name)
    if cls is None:
        raise UsageError(
            f"unknown policy {name!r}; available: {', '.join(policy_names())} (a policy of "
            "your own: --policy-module FILE.py or a 'coorp.policies' entry point)"
        )
    return cls


def policy_names(standard: PhyStandard | None = None) -> list[str]:
    """Every registered policy, in registration order; with ``standard``, only those
    that run on that PHY standard (``Policy.standards``)."""
    if standard is None:
        return list(_REGISTRY)
    return [n for n, cls in _REGISTRY.items() if standard in cls.standards]


def policy_label(name: str) -> str:
    """How reports name a policy: ``name``, with " (not deployable)" for a reference bound
    (``Policy.deployable = False``, e.g. ``oracle``). An unregistered name is kept."""
    cls = _REGISTRY.get(name)
    return f"{name} (not deployable)" if cls is not None and not cls.deployable else name
