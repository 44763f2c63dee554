"""Golden equivalence of the policies: a CRL run computes exactly what it computed before.

Like ``tests/sim/test_golden_equivalence.py`` (whose digest this reuses), one of the few
places where a stored expected value is legitimate. The digests in
``golden_policy_digests.json`` were computed by the code *before* the control algorithms
and the policies' driver hooks were compiled and reworked for speed (run-level driver
hooks, a completion-time table without sorted insertion, a gate that keeps one record
per run); they pin every policy's behaviour across that work: for a fixed scenario and
seed, the channel trace, every counter, the message table, the LS ring depths, the MPC
loops, the epochs and the policy's own statistics must stay bit-identical. They say
nothing about whether the behaviour is right (the other policy tests do that).

The cases exercise every shipped policy and the paths the speed work touched: packet
errors and drops (retries, a transfer whose dropped bytes are sent again), per-AC rings,
ten robots. ``make test`` runs them with the compiled modules and, in a subprocess, with
the plain Python ones. A digest may only be regenerated when a change is *meant* to alter
results, with the reason in the commit message. The cases that A-MPDUs per receiver and
TID changed when they became the default (issue 36) also run with ``consecutive``
(``name@consecutive``) against their digest from before::

    COORP_REGEN_GOLDEN=1 .venv/bin/pytest -q tests/policies/test_golden_policies.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coorp._accel import compiled, describe
from coorp.scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    parse_scenario,
    resolve_scenario,
)
from coorp.workload import run_crl
from golden_digest import digest

GOLDEN = Path(__file__).with_name("golden_policy_digests.json")
REGEN = os.environ.get("COORP_REGEN_GOLDEN") == "1"
DURATION_NS = 2_500_000_000


def _variant(base: str, name: str, **over: dict[str, Any]) -> Scenario:
    """A shipped scenario with some sections changed: epochs of 8 data items (bulk data
    flows from 0.3 s on, not after 2.2 s) plus ``over``."""
    doc = tomllib.loads(resolve_scenario(base).read_text())
    doc["name"] = name
    doc["workload"]["drlc"]["batch_items"] = 8
    for section, values in over.items():
        doc.setdefault(section, {}).update(values)
    return parse_scenario(doc, source=name)


def _run(scenario: Callable[[], Scenario], policy: str, seed: int) -> str:
    r = run_crl(scenario(), policy, seed=seed, duration_ns=DURATION_NS, trace=True)
    extra = {
        "loops": [repr(lp) for lp in r.loops],
        "epochs": [repr(e) for e in r.epochs],
        "policy": r.policy_stats,
        "timeseries": {k: v.tolist() for k, v in r.timeseries.items()},
        "ls_latency": r.ls_latency_ns.tolist(),
        "bh_bytes": r.bh_bytes,
    }
    return digest(r.sim, extra)


def _small5() -> Scenario:
    return _variant("crl-5", "crl-5-small")


def _small10() -> Scenario:
    return _variant("crl-10", "crl-10-small")


def _errors() -> Scenario:
    return _variant("crl-5", "crl-5-errors", links={"packet_errors": True}, mac={"retry_limit": 2})


def _per_ac() -> Scenario:
    return _variant("crl-5", "crl-5-per-ac", hw_queue={"mode": "per_ac"})


def _toml5() -> Scenario:
    return load_scenario(resolve_scenario("crl-5"))


_POLICIES = ("edca", "schedwifi", "coorp", "coorp-global", "coorp-local", "coorp-paper", "oracle")

#: name: (scenario, policy, seed)
_SPECS: dict[str, tuple[Callable[[], Scenario], str, int]] = {
    **{f"crl-5/{p}": (_small5, p, 1) for p in _POLICIES},
    "crl-5/coorp/seed-2": (_small5, "coorp", 2),
    "crl-10/coorp": (_small10, "coorp", 1),
    "crl-10/coorp-paper": (_small10, "coorp-paper", 1),
    "errors/coorp": (_errors, "coorp", 1),
    "errors/coorp-paper": (_errors, "coorp-paper", 1),
    "errors/schedwifi": (_errors, "schedwifi", 1),
    "per-ac/coorp": (_per_ac, "coorp", 1),
    "crl-5-toml/coorp": (_toml5, "coorp", 3),
}
#: The cases whose results A-MPDUs per receiver and TID changed when they became the
#: default (issue 36); each runs with ``consecutive`` too, against its digest before.
CHANGED_BY_GROUPING = ["crl-5/edca", "crl-5/schedwifi", "errors/schedwifi"]


def _case(name: str, grouping: str | None = None) -> Callable[[], str]:
    scenario, policy, seed = _SPECS[name]

    def build() -> Scenario:
        sc = scenario()
        if grouping is None:
            return sc
        return apply_overrides(sc, [("mac.ampdu_grouping", grouping)], source=sc.name)

    return lambda: _run(build, policy, seed)


CASES: dict[str, Callable[[], str]] = {name: _case(name) for name in _SPECS}
CASES.update({f"{n}@consecutive": _case(n, "consecutive") for n in CHANGED_BY_GROUPING})


def _stored() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.fixture(scope="module")
def stored() -> dict[str, str]:
    if REGEN:
        fresh = {name: case() for name, case in CASES.items()}
        GOLDEN.write_text(json.dumps(fresh, indent=2, sort_keys=True) + "\n")
    return _stored()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_policy_digest(name: str, stored: dict[str, str]) -> None:
    assert name in stored, f"no golden digest for {name}; see the module docstring"
    assert CASES[name]() == stored[name], f"{name}: the run's results changed"


@pytest.mark.skipif(not compiled(), reason=f"compiled modules: {describe()}")
def test_plain_python_policies_give_the_same_digests(stored: dict[str, str]) -> None:
    """With the compiled simulator, control and hooks in use above, the plain Python
    modules must agree too."""
    code = (
        "import json, sys; sys.path[:0] = sys.argv[1:]; "
        "import coorp._accel as a; assert not a.compiled(); "
        "import test_golden_policies as g; "
        "print(json.dumps({n: c() for n, c in g.CASES.items()}))"
    )
    here = Path(__file__).parent
    out = subprocess.run(
        [sys.executable, "-c", code, str(here), str(here.parent)],
        env={**os.environ, "COORP_PURE": "1"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == stored
