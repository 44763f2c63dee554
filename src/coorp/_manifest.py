"""Run manifests: what produced a result (scenario, seed, code version, packages, time)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["build_manifest", "git_commit", "json_safe", "write_json"]

_PACKAGES = ("coorp", "numpy", "pydantic", "msgspec", "pyarrow", "matplotlib", "typer", "rich")


def git_commit() -> dict[str, Any]:
    """The commit of the source tree coorp was imported from, and whether it is dirty."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": commit, "dirty": dirty}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def build_manifest(
    *,
    scenario: Mapping[str, Any],
    scenario_path: str | None,
    seed: int,
    wall_s: float,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "tool": "coorp",
        "argv": sys.argv,
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "scenario_path": scenario_path,
        "scenario": dict(scenario),
        "seed": seed,
        "git": git_commit(),
        "packages": _versions(),
        "platform": platform.platform(),
        "wall_s": round(wall_s, 6),
        **(dict(extra) if extra else {}),
    }


def json_safe(value: Any) -> Any:
    """``value`` with every NaN and infinity (nested in dicts, lists, tuples) as None:
    JSON has neither."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
