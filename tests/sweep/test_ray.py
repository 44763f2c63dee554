"""The same sweep on a local Ray instance and on the process pool: identical results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coorp.sweep import RunCache, parse_sweep_spec, plan_sweep, run_sweep

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'coorp[ray]'")


@pytest.mark.slow
def test_ray_tasks_give_the_pool_results_bit_for_bit(tmp_path: Path, tiny: Path) -> None:
    spec = parse_sweep_spec({"scenarios": [str(tiny)], "policies": ["edca", "coorp-local"],
                             "seeds": "1-2", "duration_s": 1.0})  # fmt: skip
    plan = plan_sweep(spec)
    pool = run_sweep(plan, jobs=2, version="v")
    on_ray = run_sweep(plan, jobs=2, use_ray=True, cache=RunCache(tmp_path / "c"), version="v")
    assert on_ray.executed == len(plan.tasks) == 6
    assert not ray.is_initialized()  # the local instance it started is shut down again
    assert json.dumps(on_ray.rows()) == json.dumps(pool.rows())
    # Ray's results went to the cache like any other: a rerun needs no Ray at all.
    again = run_sweep(plan, jobs=1, cache=RunCache(tmp_path / "c"), version="v")
    assert again.executed == 0 and json.dumps(again.rows()) == json.dumps(pool.rows())
