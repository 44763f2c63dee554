"""Parameter overrides: a dotted key into the scenario, a value, and re-validation
(``coorp sweep --set``, sweep files, ``coorp learn``).

``coorp.margin_us`` is shorthand for ``policy.coorp.margin_us`` (likewise ``schedwifi.``,
``ofdma.`` and ``rtwt.``).
The scenario is dumped, the key set, and the whole scenario validated again, so an
override can never produce a scenario that a file could not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coorp._errors import ScenarioError, UsageError

from ._load import parse_scenario
from ._models import Scenario

__all__ = ["OverrideError", "apply_overrides", "canonical_key", "override_label"]

#: Short prefixes and what they stand for.
SHORTHANDS = {
    "coorp": "policy.coorp",
    "schedwifi": "policy.schedwifi",
    "ofdma": "policy.ofdma",
    "rtwt": "policy.rtwt",
}

#: Keys a sweep sets by other means.
_RESERVED = {
    "seed": "seeds are swept with --seeds / `seeds` in the sweep file",
    "duration_s": "use --duration / `duration_s` in the sweep file",
    "name": "the scenario's name labels its results",
}


class OverrideError(UsageError):
    """An override names a key the scenario does not have, or a value it does not allow."""


def canonical_key(key: str) -> str:
    """``coorp.margin_us`` -> ``policy.coorp.margin_us``; other keys unchanged."""
    head, dot, rest = key.partition(".")
    return f"{SHORTHANDS[head]}.{rest}" if dot and head in SHORTHANDS else key


def override_label(combo: Sequence[tuple[str, Any]]) -> str:
    """``coorp.margin_us=1000; workload.drlc.sync=bsp`` (empty string: no override)."""
    return "; ".join(f"{k}={_show(v)}" for k, v in combo)


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _walk_error(key: str, path: list[str], i: int, why: str) -> OverrideError:
    where = ".".join(path[: i + 1])
    return OverrideError(f"override {key!r}: {where} {why}")


def apply_overrides(
    scenario: Scenario, combo: Sequence[tuple[str, Any]], *, source: str, origin: str = "--set"
) -> Scenario:
    """``scenario`` with every ``(key, value)`` of ``combo`` set, validated again.

    Raises :class:`OverrideError` naming ``origin`` (the flag or sweep file), the key, the
    value and what is allowed there.
    """
    if not combo:
        return scenario
    data = scenario.model_dump(mode="json")
    for key, value in combo:
        full = canonical_key(key)
        path = full.split(".")
        if path[0] in _RESERVED and len(path) == 1:
            raise OverrideError(f"{origin} {key}: cannot be overridden; {_RESERVED[path[0]]}")
        node: Any = data
        for i, part in enumerate(path):
            last = i == len(path) - 1
            if isinstance(node, dict):
                if part not in node:
                    allowed = ", ".join(sorted(node))
                    raise _walk_error(key, path, i, f"is not a scenario key; allowed: {allowed}")
                if last:
                    node[part] = value
                elif node[part] is None:
                    raise _walk_error(key, path, i, f"is not set in {source}, nothing to override")
                else:
                    node = node[part]
            elif isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise _walk_error(
                        key,
                        path,
                        i,
                        f"is not an index of a list of {len(node)} (0-{len(node) - 1})",
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            else:
                raise _walk_error(key, path, i - 1, "is a value, not a section")
    try:
        return parse_scenario(data, source=source)
    except ScenarioError as exc:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in combo)
        problems = "\n".join(f"  - {p.render()}" for p in exc.problems)
        raise OverrideError(f"{origin} {shown} is invalid for {source}:\n{problems}") from None
