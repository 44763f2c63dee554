"""Scenario files: the validated, plain-data description of a simulated channel."""

from ._load import load_scenario, parse_scenario
from ._models import (
    AccessCategory,
    BulkFlow,
    DatagramFlow,
    EdcaOverride,
    Flow,
    HwQueueConfig,
    HwQueueMode,
    LinkConfig,
    LinkOverride,
    MacConfig,
    PathLossConfig,
    PhyConfig,
    RetryPolicy,
    Scenario,
    StationConfig,
)

__all__ = [
    "AccessCategory",
    "BulkFlow",
    "DatagramFlow",
    "EdcaOverride",
    "Flow",
    "HwQueueConfig",
    "HwQueueMode",
    "LinkConfig",
    "LinkOverride",
    "MacConfig",
    "PathLossConfig",
    "PhyConfig",
    "RetryPolicy",
    "Scenario",
    "StationConfig",
    "load_scenario",
    "parse_scenario",
]
