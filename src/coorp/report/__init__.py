"""Reports: policy comparisons and their figures."""

from coorp.report._compare import BH_ONLY, Comparison, PolicyRun, compare
from coorp.report._plots import plot_comparison

__all__ = ["BH_ONLY", "Comparison", "PolicyRun", "compare", "plot_comparison"]
