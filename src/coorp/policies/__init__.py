"""Network policies for a simulated robot team, by name.

``get_policy("coorp")`` returns the class; ``policy_names()`` lists what is registered.
Shipped: ``edca``, ``schedwifi``, ``coorp``, ``coorp-global``, ``coorp-local``, the
reference bound ``oracle`` (not deployable: ``Policy.deployable``, ``policy_label``), and on
802.11ax channels only (``Policy.standards``) ``ofdma``, ``rtwt`` and ``coorp-rtwt``. To add
one, subclass :class:`Policy` and decorate it with :func:`register_policy`
(``docs/policies.md``); check it with :func:`coorp.testing.check_policy`. The CLI loads
a user's file with ``--policy-module`` (:func:`load_policy_module`) and installed
packages' ``coorp.policies`` entry points (:func:`load_entry_point_policies`). The
driver hooks of the gated policies may run compiled with mypyc (``coorp._accel``).

A fleet (``[fleet]``: several cells and channels) has policies of its own, by the same
names (:func:`get_fleet_policy`, :func:`fleet_policy_names`): ``edca``, ``schedwifi``,
``coorp`` (one bulk sender per channel), ``coorp-team`` (per team only) and ``oracle``.
"""

from coorp._accel import load as _load

_load("coorp.policies")  # the compiled hooks when fresh, else the plain ones

# Importing the modules registers the shipped policies; the baselines come first.
# isort: off
from coorp.policies import _edca  # noqa: E402, F401
from coorp.policies import _schedwifi  # noqa: E402, F401
from coorp.policies import _coorp  # noqa: E402, F401
from coorp.policies import _oracle  # noqa: E402, F401
from coorp.policies import _ofdma  # noqa: E402, F401
from coorp.policies import _rtwt  # noqa: E402, F401
from coorp.policies import _fleet  # noqa: E402, F401
from coorp.policies import _fleet_schedwifi  # noqa: E402, F401
from coorp.policies import _fleet_coorp  # noqa: E402, F401

# isort: on
from coorp.policies._base import Policy, Team  # noqa: E402
from coorp.policies._coorp import (  # noqa: E402
    CoorpGlobalPolicy,
    CoorpLocalPolicy,
    CoorpPaperPolicy,
    CoorpPolicy,
)
from coorp.policies._edca import EdcaPolicy  # noqa: E402
from coorp.policies._fleet import (  # noqa: E402
    Fleet,
    FleetPolicy,
    fleet_policy_names,
    get_fleet_policy,
    register_fleet_policy,
)
from coorp.policies._hooks import GatedHooks  # noqa: E402
from coorp.policies._ofdma import OfdmaPolicy, ofdma_config  # noqa: E402
from coorp.policies._oracle import OracleHooks, OraclePolicy, OracleStats  # noqa: E402
from coorp.policies._plugins import (  # noqa: E402
    ENTRY_POINT_GROUP,
    load_entry_point_policies,
    load_policy_module,
    loaded_policy_modules,
)
from coorp.policies._registry import get_policy, policy_label, policy_names, register_policy  # noqa: E402
from coorp.policies._rtwt import (  # noqa: E402
    CoorpRtwtPolicy,
    RtwtHooks,
    RtwtPolicy,
    ls_message_airtime_ns,
    rtwt_schedule,
)
from coorp.policies._schedwifi import SchedWifiPolicy  # noqa: E402

__all__ = [
    "ENTRY_POINT_GROUP",
    "CoorpGlobalPolicy",
    "CoorpLocalPolicy",
    "CoorpPaperPolicy",
    "CoorpPolicy",
    "CoorpRtwtPolicy",
    "EdcaPolicy",
    "Fleet",
    "FleetPolicy",
    "GatedHooks",
    "OfdmaPolicy",
    "OracleHooks",
    "OraclePolicy",
    "OracleStats",
    "Policy",
    "RtwtHooks",
    "RtwtPolicy",
    "SchedWifiPolicy",
    "Team",
    "fleet_policy_names",
    "get_fleet_policy",
    "get_policy",
    "load_entry_point_policies",
    "load_policy_module",
    "loaded_policy_modules",
    "ls_message_airtime_ns",
    "ofdma_config",
    "policy_label",
    "policy_names",
    "register_fleet_policy",
    "register_policy",
    "rtwt_schedule",
]
