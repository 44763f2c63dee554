"""``coorp.emulate._hosts`` without namespaces: how the CPUs are split between the
emulator and the stations' receive processing, and the mask's validation."""

from __future__ import annotations

import pytest

from coorp._errors import UsageError
from coorp.emulate._hosts import Hosts, cpu_split


@pytest.mark.parametrize(
    ("allowed", "plan"),
    [
        ({0, 1}, (1, "1")),
        ({0, 1, 2, 3}, (3, "7")),
        ({2, 5}, (5, "4")),  # a restricted affinity: only the CPUs it may use
        ([7, 3, 3], (7, "8")),
        ({0}, None),  # one CPU: nothing to split
        (set(), None),
        ({0, 40, 69}, (69, f"{(1 << 0) | (1 << 40):x}")),
    ],
)
def test_the_emulator_takes_the_highest_cpu_and_the_mask_the_rest(
    allowed: set[int], plan: tuple[int, str] | None
) -> None:
    assert cpu_split(allowed) == plan


@pytest.mark.parametrize("mask", ["", "0x3", "3; reboot", "G", "1" * 65])
def test_a_mask_that_is_not_plain_hex_is_refused_before_anything_runs(mask: str) -> None:
    hosts = Hosts(["leader", "r1"], {"leader": "10.77.0.1", "r1": "10.77.0.11"})
    with pytest.raises(UsageError, match="hex digits expected"):
        hosts.steer_receives(mask)
