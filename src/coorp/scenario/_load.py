"""Reading scenario files: TOML -> :class:`Scenario`, with errors a person can act on."""

from __future__ import annotations

import importlib.resources
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, get_args, overload

from pydantic import BaseModel, ValidationError

from coorp._errors import ScenarioError, ScenarioProblem, UsageError

from ._models import Scenario

__all__ = [
    "builtin_scenarios",
    "load_scenario",
    "parse_scenario",
    "problems_from_validation",
    "resolve_scenario",
]

M = TypeVar("M", bound=BaseModel)


def _builtin_dir() -> Path | None:
    """Where the shipped scenarios are: ``coorp/scenarios`` inside an installed wheel
    (pyproject's ``force-include``), else the repository's ``scenarios/`` next to
    ``src/`` (an editable install or a source checkout)."""
    packaged = importlib.resources.files("coorp") / "scenarios"
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "scenarios"
    return checkout if checkout.is_dir() else None


def builtin_scenarios() -> dict[str, Path]:
    """The scenarios shipped with Coorp: name (file stem, e.g. ``"crl-5"``) -> file."""
    d = _builtin_dir()
    if d is None:
        return {}
    return {p.stem: p for p in sorted(d.glob("*.toml"))}


def resolve_scenario(name_or_path: str | Path) -> Path:
    """The scenario file meant by ``name_or_path``: an existing file as given, else a
    built-in scenario by name (``crl-10``, ``crl-10.toml`` or ``scenarios/crl-10.toml``,
    from any directory).

    Raises :class:`UsageError` naming what was given and listing the built-in names.
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    builtin = builtin_scenarios()
    stem = p.name.removesuffix(".toml")
    # A bare name, or the repository-relative path the docs use (scenarios/crl-5.toml).
    if stem in builtin and p.parent in (Path(), Path("scenarios")):
        return builtin[stem]
    if p.is_dir():
        what = "is a directory, not a scenario file"
    else:
        what = "no such file and no built-in scenario of that name"
    names = ", ".join(builtin) or "none found (is the package installed completely?)"
    raise UsageError(f"scenario {str(name_or_path)!r}: {what}; built-in scenarios: {names}")


@overload
def load_scenario(path: str | Path) -> Scenario: ...
@overload
def load_scenario(path: str | Path, model: type[M]) -> M: ...
def load_scenario(path: str | Path, model: type[BaseModel] = Scenario) -> BaseModel:
    """Read and validate a scenario TOML file (or any config model given as ``model``).

    Raises :class:`ScenarioError` naming the file, each bad field, its value and what is
    allowed; never a bare pydantic or TOML traceback.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(str(p), [ScenarioProblem("", str(p), "file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(p), [ScenarioProblem("", str(p), f"cannot read: {exc}")]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(
            str(p), [ScenarioProblem("", "<TOML>", f"not valid TOML: {exc}")]
        ) from None
    return parse_scenario(data, source=str(p), model=model)


@overload
def parse_scenario(data: Mapping[str, Any], *, source: str = ...) -> Scenario: ...
@overload
def parse_scenario(data: Mapping[str, Any], *, source: str = ..., model: type[M]) -> M: ...
def parse_scenario(
    data: Mapping[str, Any], *, source: str = "<data>", model: type[BaseModel] = Scenario
) -> BaseModel:
    """Validate already-parsed scenario data (e.g. a dict built in code)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(source, problems_from_validation(exc, model, data)) from None


def problems_from_validation(
    exc: ValidationError, model: type[BaseModel], data: Mapping[str, Any]
) -> list[ScenarioProblem]:
    """pydantic's errors for ``data`` against ``model`` as problems that name the field
    (in the file's own spelling), the value and what is allowed there; any file format
    validated with a pydantic model (sweep, cosim and team-bench files) reports this way."""
    problems = []
    for err in exc.errors(include_url=False):
        field = _render_loc(model, err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, Mapping | list):
            # A whole section failed a cross-field rule; the message names the fields.
            value = ScenarioProblem.NO_VALUE
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, err["loc"][:-1])
            msg = f"unknown key; allowed here: {', '.join(allowed)}" if allowed else "unknown key"
        elif err["type"] == "literal_error" or err["type"] == "enum":
            msg = msg.replace("Input should be", "allowed:")
        problems.append(ScenarioProblem(field, value, msg))
    return problems


def _render_loc(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``("flows", 0, "bulk", "src")`` -> ``"flows[0].src"`` (union tags dropped)."""
    tags = {_kind(m) for m in _all_models(model)} - {None}
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in tags:
            out += f".{part}" if out else str(part)
    return out


def _all_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    stack = [model]
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.append(m)
        for f in m.model_fields.values():
            stack.extend(_models_in(f.annotation))
    return seen


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model at ``loc``, walking nested models, lists and tagged unions.

    Pydantic puts a tagged union's tag (e.g. ``"bulk"``) into the location, so a path
    part that is no field name selects the union member whose ``kind`` default matches.
    """
    candidates: list[type[BaseModel]] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        by_tag = [c for c in candidates if _kind(c) == part]
        if by_tag:
            candidates = by_tag
            continue
        fields = [c.model_fields[part] for c in candidates if part in c.model_fields]
        if not fields:
            return []
        candidates = _models_in(fields[0].annotation)
    return sorted(candidates[0].model_fields) if len(candidates) == 1 else []


def _kind(model: type[BaseModel]) -> object:
    field = model.model_fields.get("kind")
    return None if field is None else field.default


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
        else:
            stack.extend(get_args(a))
    return found
