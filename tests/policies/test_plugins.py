"""A user's policy: loaded from a file (--policy-module) or an entry point."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from coorp import UsageError
from coorp.policies import (
    _plugins,
    _registry,
    get_policy,
    load_entry_point_policies,
    load_policy_module,
    loaded_policy_modules,
    policy_names,
)

POLICY = """
from coorp.policies import EdcaPolicy, register_policy

@register_policy
class {cls}(EdcaPolicy):
    name = "{name}"
    summary = "EDCA under another name (a test plugin)"
"""


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers into a copy of the registry, which is restored afterwards."""
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    monkeypatch.setattr(_plugins, "_REGISTRY", _registry._REGISTRY)
    monkeypatch.setattr(_plugins, "_MODULES", {})
    monkeypatch.setattr(_plugins, "_ENTRY_POINTS_LOADED", None)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_a_file_registers_its_policy(tmp_path: Path) -> None:
    path = _write(tmp_path, "my_policy.py", POLICY.format(cls="Mine", name="mine"))
    assert load_policy_module(path) == ["mine"]
    assert get_policy("mine").summary.startswith("EDCA under another name")
    assert "mine" in policy_names()
    assert loaded_policy_modules() == [path.resolve()]
    # Loading the same file again is a no-op, not a "registered twice" error.
    assert load_policy_module(str(path)) == ["mine"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--policy-module .*nope\.py: no such file"):
        load_policy_module(tmp_path / "nope.py")
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(UsageError, match=r"x\.txt: not a \.py file"):
        load_policy_module(tmp_path / "x.txt")


def test_a_file_that_raises_is_reported_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.py", "import os\n\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(UsageError) as info:
        load_policy_module(path)
    assert str(info.value) == (
        f"--policy-module {path} raised RuntimeError (line 3) while being imported: no GPU here"
    )
    bad = _write(tmp_path, "syntax.py", "def f(:\n")
    with pytest.raises(UsageError, match=r"raised SyntaxError \(line 1\)"):
        load_policy_module(bad)
    assert not any(m.startswith("coorp_user_policy_broken") for m in sys.modules)


def test_a_file_that_registers_nothing_says_what_to_do(tmp_path: Path) -> None:
    path = _write(tmp_path, "empty.py", "X = 1\n")
    with pytest.raises(UsageError, match="registered no policy: decorate a subclass"):
        load_policy_module(path)


def test_a_name_clash_names_the_existing_policy(tmp_path: Path) -> None:
    path = _write(tmp_path, "clash.py", POLICY.format(cls="Clash", name="edca"))
    with pytest.raises(UsageError, match=r"clash\.py \(line \d+\): policy name 'edca' is alre"):
        load_policy_module(path)


class _FakeEntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = f"fake:{name}"
        self.dist = None
        self._value = value

    def load(self) -> Any:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


def test_entry_points_register_classes_and_load_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coorp.policies import EdcaPolicy

    cls = type("EpPolicy", (EdcaPolicy,), {"name": "ep-policy", "summary": "from an ep"})
    seen = []

    def entry_points(*, group: str) -> list[_FakeEntryPoint]:
        seen.append(group)
        return [_FakeEntryPoint("ep", cls)]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    # get_policy loads entry points before it calls a name unknown.
    assert get_policy("ep-policy") is cls
    assert load_entry_point_policies() == ["ep-policy"]
    assert seen == ["coorp.policies"]  # loaded once


def test_a_broken_entry_point_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda *, group: [_FakeEntryPoint("bad", ImportError("No module named 'x'"))],
    )
    with pytest.raises(UsageError) as info:
        get_policy("whatever")
    assert str(info.value) == (
        "entry point 'bad' = 'fake:bad' (group coorp.policies, ?) raised ImportError: "
        "No module named 'x'"
    )
