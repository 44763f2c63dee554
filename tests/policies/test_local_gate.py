"""Local preemption: the gate keeps the shared NIC ring short when LS packets arrive."""

from __future__ import annotations

import numpy as np
import pytest

from coorp.workload import run_crl
from crl_scenarios import crl_scenario


def denials(stats: dict[str, object]) -> int:
    gate = stats["gate"]
    assert isinstance(gate, dict)
    return sum(g["denied_ahead"] + g["denied_inside"] for g in gate.values())


@pytest.mark.parametrize("seed", [3, 4])
def test_gate_shortens_the_ring_ahead_of_ls_packets(seed: int) -> None:
    # 2.5 s: the first epoch ends around 1.2-1.7 s depending on the seed (one must finish).
    sc = crl_scenario(3, duration_s=2.5, seed=seed)
    edca = run_crl(sc, "edca")
    local = run_crl(sc, "coorp-local")
    assert edca.ls_hw_depths.size > 100 and local.ls_hw_depths.size > 100
    # Under EDCA, bulk packets pile up in the shared ring ahead of LS packets...
    assert np.mean(edca.ls_hw_depths) > 10
    # ...the gate cuts the mean depth an LS packet sees by at least 40%...
    assert np.mean(local.ls_hw_depths) < 0.6 * np.mean(edca.ls_hw_depths)
    # ...because it denied bulk packets ahead of protection windows.
    assert denials(local.policy_stats) > 0
    assert "permits" not in local.policy_stats  # gate only
    assert local.bh_bytes > 0 and len(local.epochs) >= 1


def test_without_a_gate_nothing_is_denied() -> None:
    result = run_crl(crl_scenario(2, duration_s=1.0), "coorp-global")
    assert "gate" not in result.policy_stats
    full = run_crl(crl_scenario(2, duration_s=1.0), "coorp")
    assert set(full.policy_stats["gate"]) == {"leader", "r1", "r2"}
