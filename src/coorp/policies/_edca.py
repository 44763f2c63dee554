"""Plain EDCA: LS in AC_VO, BH in AC_BE, no coordination (the prioritized baseline)."""

from __future__ import annotations

from coorp.policies._base import Policy
from coorp.policies._registry import register_policy

__all__ = ["EdcaPolicy"]


@register_policy
class EdcaPolicy(Policy):
    name = "edca"
    summary = "802.11 EDCA priorities only: LS in AC_VO, bulk in AC_BE, no coordination"
