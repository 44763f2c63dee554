"""``coorp sweep``: scenarios × policies × seeds × overrides, cached, on local cores or Ray,
summarised with 95% confidence intervals (``docs/sweep.md``).

``plan_sweep(spec)`` checks everything and lists the tasks; ``run_sweep(plan)`` runs the
ones not in the cache; ``save_sweep(result, out, manifest)`` writes the long table, the
aggregate and the figures.

``mean_ci``, ``MeanCI``, ``t_quantile_975`` and ``parse_seeds`` live on the ground floor
(:mod:`coorp.stats`, :mod:`coorp.seeds`), ``apply_overrides``, ``canonical_key`` and
``OverrideError`` in :mod:`coorp.scenario`; they are re-exported here.
"""

from coorp.scenario import OverrideError, apply_overrides, canonical_key
from coorp.seeds import parse_seeds
from coorp.stats import MeanCI, mean_ci, t_quantile_975
from coorp.sweep._compare import multi_seed_json
from coorp.sweep._plan import SweepPlan, Task, code_version, plan_sweep
from coorp.sweep._plots import plot_sweep, sweep_figures
from coorp.sweep._results import (
    LONG_COLUMNS,
    aggregate,
    aggregate_warnings,
    clean_json,
    load_rows,
    render_aggregate,
    write_aggregate,
    write_rows,
)
from coorp.sweep._run import (
    METRICS,
    WARNING_SEP,
    Outcome,
    Progress,
    RunCache,
    Runner,
    SweepResult,
    run_sweep,
    simulate_task,
)
from coorp.sweep._save import save_sweep
from coorp.sweep._spec import (
    SweepSpec,
    SweepSpecError,
    load_sweep_spec,
    parse_override,
    parse_sweep_spec,
    resolve_scenario,
)

__all__ = [
    "LONG_COLUMNS",
    "METRICS",
    "WARNING_SEP",
    "MeanCI",
    "Outcome",
    "OverrideError",
    "Progress",
    "RunCache",
    "Runner",
    "SweepPlan",
    "SweepResult",
    "SweepSpec",
    "SweepSpecError",
    "Task",
    "aggregate",
    "aggregate_warnings",
    "apply_overrides",
    "canonical_key",
    "clean_json",
    "code_version",
    "load_rows",
    "load_sweep_spec",
    "mean_ci",
    "multi_seed_json",
    "parse_override",
    "parse_seeds",
    "parse_sweep_spec",
    "plan_sweep",
    "plot_sweep",
    "render_aggregate",
    "resolve_scenario",
    "run_sweep",
    "save_sweep",
    "simulate_task",
    "sweep_figures",
    "t_quantile_975",
    "write_aggregate",
    "write_rows",
]
