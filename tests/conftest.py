"""Suite-wide hooks: the ``realtime`` marker (tests/suite_split.py), and Hypothesis
without its per-example deadline.

Hypothesis fails an example that runs longer than 200 ms by default: a wall-clock
assertion, which this suite does not make (speed belongs in ``benchmarks/``). On a
loaded 2-core machine a property test's example took 530 ms and failed
``tests/control/test_ctt.py`` although the property held.
"""

from __future__ import annotations

from hypothesis import settings

from suite_split import pytest_collection_modifyitems

settings.register_profile("coorp", deadline=None)
settings.load_profile("coorp")

__all__ = ["pytest_collection_modifyitems"]
