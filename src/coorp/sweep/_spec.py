"""What a sweep runs: the spec (TOML file or flags), seed ranges, overrides, scenario names.

Every check here happens before any simulation runs, and every error names where the
bad input came from (the sweep file or ``<command line>``), the field, the value and
what is allowed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from coorp._errors import ScenarioProblem, UsageError
from coorp.scenario import problems_from_validation
from coorp.scenario import resolve_scenario as scenario_resolver
from coorp.seeds import parse_seeds

__all__ = [
    "SweepSpec",
    "SweepSpecError",
    "load_sweep_spec",
    "parse_override",
    "parse_sweep_spec",
    "resolve_scenario",
]


class SweepSpecError(UsageError):
    """A sweep file (or the flags standing for one) is invalid; one line per problem."""

    def __init__(self, source: str, problems: Sequence[ScenarioProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [f"invalid sweep {source}:"] + [f"  - {p.render()}" for p in self.problems]
        super().__init__("\n".join(lines))


def _split_top_level(text: str) -> list[str]:
    """Split at commas that are not inside brackets or quotes (``[1,2],3`` -> 2 parts)."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _literal(text: str) -> Any:
    """A TOML literal (``1000``, ``2.5``, ``true``, ``"x"``, ``[1, 2]``) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_override(text: str) -> tuple[str, list[Any]]:
    """``"coorp.margin_us=1000,2000"`` -> ``("coorp.margin_us", [1000, 2000])``.

    Values are TOML literals (numbers, ``true``/``false``, quoted strings, lists); anything
    else is taken as a string (``bsp``). Raises :class:`UsageError` naming the flag.
    """
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise UsageError(
            f"--set {text!r}: expected KEY=VALUE[,VALUE...], e.g. --set coorp.margin_us=1000,2000"
        )
    parts = _split_top_level(values)
    if any(p == "" for p in parts):
        raise UsageError(f"--set {text!r}: empty value in the list {values!r}")
    return key, [_literal(p) for p in parts]


def resolve_scenario(ref: str, base_dir: Path | None = None) -> Path:
    """A scenario file path, or a built-in name (``crl-5``), for a sweep.

    A relative path is first tried next to the sweep file (``base_dir``), then as
    :func:`coorp.scenario.resolve_scenario` takes it (the current directory, then the
    built-in names); its :class:`UsageError` lists the built-in names.
    """
    if base_dir is not None and (base_dir / ref).is_file():
        return base_dir / ref
    return scenario_resolver(ref)


class SweepSpec(BaseModel):
    """Scenarios × policies × seeds × override combinations, each run for ``duration_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenarios: list[str] = Field(
        min_length=1, description="scenario files or built-in names (crl-2, crl-5, ...)"
    )
    policies: list[str] | None = Field(
        None, min_length=1, description="registered policy names (default: every one)"
    )
    seeds: list[int] = Field(
        default_factory=lambda: [1], description="'1-10', '1,3,5', 5 or [1, 2, 3]"
    )
    duration_s: float | None = Field(
        None, gt=0, le=86_400, description="simulated seconds (default: each scenario's)"
    )
    overrides: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="dotted scenario key -> values, e.g. 'coorp.margin_us' = [1000, 2000]",
    )

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v: Any) -> list[int]:
        return parse_seeds(v)

    @field_validator("scenarios", "policies", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",")]
        return v

    @field_validator("scenarios", "policies")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if any(not p for p in v):
            raise ValueError("empty name in the list")
        dupes = sorted({p for p in v if v.count(p) > 1})
        if dupes:
            raise ValueError(f"listed twice: {dupes}")
        return v

    @field_validator("overrides", mode="before")
    @classmethod
    def _values_as_lists(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        out = {}
        for key, values in v.items():
            vals = list(values) if isinstance(values, list | tuple) else [values]
            if not vals:
                raise ValueError(f"override {key!r} has no values")
            out[key] = vals
        return out


def parse_sweep_spec(data: Mapping[str, Any], *, source: str = "<command line>") -> SweepSpec:
    """Validate sweep data (from a file or flags); errors name ``source`` and each field."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SweepSpecError(source, problems_from_validation(exc, SweepSpec, data)) from None


def load_sweep_spec(path: Path) -> SweepSpec:
    """Read a sweep TOML file (see ``docs/sweep.md``); scenario paths in it are relative to
    the file's folder."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepSpecError(
            str(path), [ScenarioProblem("", str(path), "file not found")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepSpecError(
            str(path), [ScenarioProblem("", str(path), f"cannot read: {exc}")]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SweepSpecError(
            str(path), [ScenarioProblem("", "<TOML>", f"not valid TOML: {exc}")]
        ) from None
    return parse_sweep_spec(data, source=str(path))
