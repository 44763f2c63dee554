"""Reports: policy comparisons, their figures and raw tables (a fleet's per channel and
per cell too).

The figure style (policy styles, formats, ``save_figure``) lives on the ground floor,
:mod:`coorp.figures`, and is re-exported here.
"""

from coorp.figures import (
    FIGURE_FORMATS,
    PolicyStyle,
    parse_formats,
    policy_style,
    policy_styles,
    register_policy_style,
    save_figure,
)
from coorp.report._compare import (
    BH_ONLY,
    FLEET_BLOCKS,
    Comparison,
    PolicyRun,
    check_policy,
    compare,
    deadline_ms,
    default_policies,
    deployable,
    run_policy,
)
from coorp.report._fleet import (
    FleetCell,
    fleet_cells_from_aggregate,
    fleet_cells_from_json,
    fleet_figures,
    render_fleet,
    write_fleet_figures,
)
from coorp.report._plots import comparison_figures, plot_comparison, plot_run
from coorp.report._raw import RAW_TABLES, write_comparison_raw_tables, write_raw_tables

__all__ = [
    "BH_ONLY",
    "FIGURE_FORMATS",
    "FLEET_BLOCKS",
    "RAW_TABLES",
    "Comparison",
    "FleetCell",
    "PolicyRun",
    "PolicyStyle",
    "check_policy",
    "compare",
    "comparison_figures",
    "deadline_ms",
    "default_policies",
    "deployable",
    "fleet_cells_from_aggregate",
    "fleet_cells_from_json",
    "fleet_figures",
    "parse_formats",
    "plot_comparison",
    "plot_run",
    "policy_style",
    "policy_styles",
    "register_policy_style",
    "render_fleet",
    "run_policy",
    "save_figure",
    "write_comparison_raw_tables",
    "write_fleet_figures",
    "write_raw_tables",
]
