"""Reports: policy comparisons, their figures and raw tables.

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
    Comparison,
    PolicyRun,
    compare,
    deployable,
    run_policy,
)
from coorp.report._plots import comparison_figures, plot_comparison, plot_run
from coorp.report._raw import RAW_TABLES, write_comparison_raw_tables, write_raw_tables

__all__ = [
    "BH_ONLY",
    "FIGURE_FORMATS",
    "RAW_TABLES",
    "Comparison",
    "PolicyRun",
    "PolicyStyle",
    "compare",
    "comparison_figures",
    "deployable",
    "parse_formats",
    "plot_comparison",
    "plot_run",
    "policy_style",
    "policy_styles",
    "register_policy_style",
    "run_policy",
    "save_figure",
    "write_comparison_raw_tables",
    "write_raw_tables",
]
