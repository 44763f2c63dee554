"""Reports: policy comparisons, their figures, raw tables and plot styles."""

from coorp.report._compare import BH_ONLY, Comparison, PolicyRun, compare, deployable
from coorp.report._plots import (
    FIGURE_FORMATS,
    comparison_figures,
    parse_formats,
    plot_comparison,
    plot_run,
    save_figure,
)
from coorp.report._raw import RAW_TABLES, write_comparison_raw_tables, write_raw_tables
from coorp.report._style import PolicyStyle, policy_style, policy_styles, register_policy_style

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
    "save_figure",
    "write_comparison_raw_tables",
    "write_raw_tables",
]
