"""Suite-wide hooks: the ``realtime`` marker (tests/suite_split.py)."""

from __future__ import annotations

from suite_split import pytest_collection_modifyitems

__all__ = ["pytest_collection_modifyitems"]
