"""Tools for people writing their own policies.

:func:`check_policy` is a conformance checker in the spirit of Gymnasium's
``check_env``: give it a :class:`~coorp.policies.Policy` subclass (registered or not)
and it runs the class on a tiny coordinated-robotic-learning team, twice, checking the
Policy and DriverHooks contracts. It raises :class:`PolicyConformanceError` listing
every problem found, or returns a :class:`ConformanceReport`::

    from coorp.testing import check_policy
    check_policy(MyPolicy)

See ``docs/policies.md``.
"""

from coorp.testing._conformance import (
    ConformanceReport,
    PolicyConformanceError,
    check_policy,
    conformance_scenario,
)

__all__ = ["ConformanceReport", "PolicyConformanceError", "check_policy", "conformance_scenario"]
