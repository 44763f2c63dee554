"""What ``coorp bench team`` sweeps: robots × rate × size × carrier × bulk, validated.

A small TOML file (``--config``) or the command's flags give the same fields; unknown
keys and out-of-range values are refused naming the field, the value and what is allowed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from coorp._errors import UsageError
from coorp.scenario import problems_from_validation
from coorp.teambench._carriers import CARRIERS

__all__ = ["BULK_MODES", "MAX_LS_BYTES", "TeamBenchConfig", "load_config"]

#: What runs next to the echo traffic: nothing, plain TCP bulk (uncoordinated), or
#: coorp.runtime's coordinated bulk streams (permits + local preemption).
BULK_MODES = ("none", "tcp", "coorp")
#: The largest LS payload every carrier takes (one coorp.runtime LS datagram holds
#: 64,963 bytes; a little room for the carriers' own headers).
MAX_LS_BYTES = 60_000

BulkMode = Literal["none", "tcp", "coorp"]


class TeamBenchConfig(BaseModel):
    """One sweep. Every list is swept; each combination is one cell, run ``repetitions``
    times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    robots: list[int] = Field(default=[1, 2, 4, 8], min_length=1, description="team sizes N")
    rates_hz: list[float] = Field(default=[10.0, 30.0, 100.0], min_length=1)
    sizes_bytes: list[int] = Field(default=[1000, 4250, 16000], min_length=1)
    carriers: list[str] = Field(
        default=["sim", "udp", "coorp", "dds-rel", "zenoh-rel"], min_length=1
    )
    bulk: list[BulkMode] = Field(default=["none"], min_length=1)
    duration_s: float = Field(2.0, ge=0.2, le=60.0, description="sending time per cell")
    drain_s: float = Field(1.0, ge=0.05, le=10.0, description="wait for late echoes")
    repetitions: int = Field(1, ge=1, le=50)
    bound_ms: float = Field(33.0, gt=0, le=10_000, description="p99 RTT bound of the CSLV")
    loss_limit: float = Field(0.01, ge=0, lt=1, description="loss fraction bound of the CSLV")
    rate_mbit: float = Field(50.0, gt=0, le=10_000, description="namespace bottleneck rate")
    queue_ms: float = Field(100.0, gt=0, le=2_000, description="bottleneck queue (tbf latency)")
    bulk_message_bytes: int = Field(524_288, ge=16_384, le=64 * 1024 * 1024)
    scenario: str = Field("crl-5", description="PHY/MAC/NIC queues of the simulated channel")
    seed: int = Field(1, ge=0, lt=2**63)

    @field_validator("robots")
    @classmethod
    def _robots(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if not 1 <= n <= 32]
        if bad:
            raise ValueError(f"team sizes must be 1..32 robots; got {bad}")
        return sorted(set(v))

    @field_validator("rates_hz")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        bad = [f for f in v if not 0.5 <= f <= 1000]
        if bad:
            raise ValueError(f"rates must be 0.5..1000 Hz; got {bad}")
        return sorted(set(v))

    @field_validator("sizes_bytes")
    @classmethod
    def _sizes(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not 16 <= s <= MAX_LS_BYTES]
        if bad:
            raise ValueError(f"message sizes must be 16..{MAX_LS_BYTES} bytes; got {bad}")
        return sorted(set(v))

    @field_validator("carriers")
    @classmethod
    def _carriers(cls, v: list[str]) -> list[str]:
        bad = [c for c in v if c not in CARRIERS]
        if bad:
            raise ValueError(f"unknown carrier(s) {bad}; allowed: {', '.join(CARRIERS)}")
        return list(dict.fromkeys(v))

    @field_validator("bulk")
    @classmethod
    def _bulk(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))

    def cells_per_repetition(self) -> int:
        return len(self.robots) * len(self.rates_hz) * len(self.sizes_bytes)


def _invalid(source: str, exc: ValidationError, data: Mapping[str, Any]) -> UsageError:
    problems = problems_from_validation(exc, TeamBenchConfig, data)
    lines = [f"invalid team benchmark config {source}:"]
    lines += [f"  - {p.render()}" for p in problems]
    return UsageError("\n".join(lines))


def load_config(
    path: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> TeamBenchConfig:
    """The sweep from a TOML file (if given) with ``overrides`` (the flags) on top."""
    data: dict[str, Any] = {}
    source = "(flags)"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"--config {path}: no such file") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"--config {path}: cannot read it as TOML: {exc}") from None
        if overrides:
            source += " with flags"
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return TeamBenchConfig.model_validate(data)
    except ValidationError as exc:
        raise _invalid(source, exc, data) from None
