"""Override combinations of a sweep, and their labels in tables and legends.

Applying one override to a scenario is :func:`coorp.scenario.apply_overrides`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from coorp.scenario import override_label as label

__all__ = ["combinations", "label", "split_overrides"]


def combinations(overrides: Mapping[str, Sequence[Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of override values, keys in the given order (``[()]`` if none)."""
    keys = list(overrides)
    return [tuple(zip(keys, vals, strict=True)) for vals in itertools.product(*overrides.values())]


def split_overrides(labels: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The ``key=value`` parts every label shares, and each label without them (for tables
    and legends; ``"defaults"`` if nothing is left)."""
    split = {lab: lab.split("; ") if lab else [] for lab in labels}
    common = set.intersection(*(set(p) for p in split.values())) if split else set()
    first = next(iter(split.values()), [])
    shared = "; ".join(p for p in first if p in common)
    rest = {lab: "; ".join(p for p in parts if p not in common) or "defaults"
            for lab, parts in split.items()}  # fmt: skip
    return shared, rest
