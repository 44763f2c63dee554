"""docs/scenarios.md must match the scenario models: every field, its default, its limits.

Run this file as a script to print the field tables generated from the pydantic models
(paste them into docs/scenarios.md when a model changes)::

    .venv/bin/python tests/scenario/test_scenario_docs.py
"""

from __future__ import annotations

import enum
import re
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from coorp import scenario as sc_pkg

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"

#: (TOML location, model) in the order the document presents them.
SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("top level", sc_pkg.Scenario),
    ("[phy]", sc_pkg.PhyConfig),
    ("[mac]", sc_pkg.MacConfig),
    ("[mac.edca.<AC>]", sc_pkg.EdcaOverride),
    ("[hw_queue]", sc_pkg.HwQueueConfig),
    ("[[stations]]", sc_pkg.StationConfig),
    ("[links]", sc_pkg.LinkConfig),
    ("[links.pathloss]", sc_pkg.PathLossConfig),
    ("[[links.overrides]]", sc_pkg.LinkOverride),
    ('[[flows]] kind = "datagram"', sc_pkg.DatagramFlow),
    ('[[flows]] kind = "bulk"', sc_pkg.BulkFlow),
    ("[workload]", sc_pkg.WorkloadConfig),
    ("[workload.mpc]", sc_pkg.MpcConfig),
    ("[workload.drlc]", sc_pkg.DrlcConfig),
    ("[[workload.ls_flows]]", sc_pkg.LsFlowConfig),
    ("[[workload.link_changes]]", sc_pkg.LinkChange),
    ("[policy.coorp]", sc_pkg.CoorpOptions),
    ("[policy.schedwifi]", sc_pkg.SchedWifiOptions),
    ("[policy.ofdma]", sc_pkg.OfdmaOptions),
    ("[policy.rtwt]", sc_pkg.RtwtOptions),
    ("[tcp]", sc_pkg.TcpConfig),
]


def _type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType) and all(
        isinstance(a, type) and issubclass(a, BaseModel) for a in typing.get_args(ann)
    ):
        return "table"
    if origin is typing.Literal:
        return " \\| ".join(repr(a) if isinstance(a, str) else str(a) for a in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(ann))
    if origin in (list, tuple, dict):
        args = ", ".join(_type_name(a) for a in typing.get_args(ann) if a is not Ellipsis)
        return f"{origin.__name__}[{args}]"
    if ann is type(None):
        return "none"
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return " \\| ".join(repr(m.value) for m in ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "table"
    return getattr(ann, "__name__", str(ann))


def _default(field: Any) -> str:
    if field.default is PydanticUndefined:
        if field.default_factory is not None:
            value = field.default_factory()
            return "(section defaults)" if isinstance(value, BaseModel) else f"`{value!r}`"
        return "**required**"
    value = field.default
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value}`"


def _limits(field: Any) -> str:
    out = []
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            if isinstance(m, getattr(at, attr.capitalize())):
                bound = getattr(m, attr)
                if isinstance(bound, int) and bound > 2**32 and bound & (bound - 1) == 0:
                    bound = f"2^{bound.bit_length() - 1}"
                out.append(f"{sym} {bound}")
        if isinstance(m, at.MinLen):
            out.append(f"length ≥ {m.min_length}")
        if isinstance(m, at.MaxLen):
            out.append(f"length ≤ {m.max_length}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            out.append(f"matches `{pattern}`")
    return ", ".join(out)


def field_rows(model: type[BaseModel]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for name, f in model.model_fields.items():
        rows.append((name, _type_name(f.annotation), _default(f), _limits(f), f.description or ""))
    return rows


def render_tables() -> str:
    out = []
    for where, model in SECTIONS:
        out.append(f"#### `{where}` ({model.__name__})\n")
        out.append("| key | type | default | limits | notes |")
        out.append("|---|---|---|---|---|")
        for name, typ, default, limits, desc in field_rows(model):
            out.append(f"| `{name}` | {typ} | {default} | {limits} | {desc} |")
        out.append("")
    return "\n".join(out)


@pytest.fixture(scope="module")
def doc() -> str:
    if not DOC.exists():
        pytest.fail(f"{DOC} is missing")
    return DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize(("where", "model"), SECTIONS, ids=[s[0] for s in SECTIONS])
def test_every_field_is_documented_with_its_default(
    doc: str, where: str, model: type[BaseModel]
) -> None:
    heading = f"#### `{where}` ({model.__name__})"
    assert heading in doc, f"no table for {where}"
    table = doc.split(heading, 1)[1].split("\n#", 1)[0]
    documented = dict(re.findall(r"^\| `([a-z_]+)` \|(.*)$", table, flags=re.M))
    assert set(documented) == set(model.model_fields), where
    for name, _typ, default, limits, _desc in field_rows(model):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", documented[name])]
        assert cells[1] == default, (where, name)
        assert cells[2] == limits, (where, name)


def test_every_model_is_covered() -> None:
    covered = {m for _, m in SECTIONS} | {sc_pkg.PolicyOptions}  # policy: two sub-tables
    exported = {
        getattr(sc_pkg, n) for n in sc_pkg.__all__
        if isinstance(getattr(sc_pkg, n), type) and issubclass(getattr(sc_pkg, n), BaseModel)
    }  # fmt: skip
    assert exported <= covered


@pytest.mark.parametrize(
    "enum_cls", [sc_pkg.AccessCategory, sc_pkg.HwQueueMode, sc_pkg.RetryPolicy, sc_pkg.SyncMode]
)
def test_every_enum_value_is_documented(doc: str, enum_cls: type[enum.Enum]) -> None:
    for member in enum_cls:
        assert f"`{member.value}`" in doc or f'"{member.value}"' in doc, member


if __name__ == "__main__":
    print(render_tables())
