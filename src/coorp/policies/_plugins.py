"""Policies from outside Coorp: a Python file (``--policy-module``) or an entry point.

A user's policy is a :class:`~coorp.policies.Policy` subclass decorated with
:func:`~coorp.policies.register_policy`. Two ways to make it known:

* :func:`load_policy_module` imports a file; importing it runs the decorator.
* Installed packages declare an entry point in the group ``coorp.policies``
  (``[project.entry-points."coorp.policies"] mine = "mypkg.policies"``); the value is a
  module (importing it registers) or a policy class (registered if it is not yet).
  :func:`load_entry_point_policies` loads them all, once; :func:`~coorp.policies.get_policy`
  calls it before it reports an unknown name.

Every failure is a :class:`~coorp.UsageError` naming the file or entry point: a missing
file, a file that raises while it is imported, a file that registers no policy.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import sys
import traceback
from pathlib import Path

from coorp._errors import CoorpError, UsageError
from coorp.policies._base import Policy
from coorp.policies._registry import _REGISTRY, add_policy_finder, register_policy

__all__ = [
    "ENTRY_POINT_GROUP",
    "load_entry_point_policies",
    "load_policy_module",
    "loaded_policy_modules",
]

#: The entry-point group installed packages use to contribute policies.
ENTRY_POINT_GROUP = "coorp.policies"

#: Files loaded so far (resolved path -> names they registered): loading twice is a no-op.
_MODULES: dict[Path, list[str]] = {}
_ENTRY_POINTS_LOADED: list[str] | None = None


def loaded_policy_modules() -> list[Path]:
    """The policy files loaded in this process, in load order (for worker processes that
    must load them again, e.g. under the ``spawn`` start method or on Ray)."""
    return list(_MODULES)


def _where(exc: BaseException, path: Path) -> str:
    """``" (line N)"`` of the deepest frame of ``exc`` inside ``path``, if any."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.lineno is not None:
        line = exc.lineno
    return f" (line {line})" if line is not None else ""


def load_policy_module(path: str | Path) -> list[str]:
    """Import the Python file ``path``; return the policy names it registered.

    Raises :class:`UsageError` if the file does not exist, is not a ``.py`` file, raises
    while it is imported, or registers no policy.
    """
    given = Path(path)
    p = given.expanduser().resolve()
    if p in _MODULES:
        return list(_MODULES[p])
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "no such file"
        raise UsageError(f"--policy-module {given}: {what}; give a Python file (.py)")
    if p.suffix != ".py":
        raise UsageError(f"--policy-module {given}: not a .py file")
    # A stable, unique module name: pickled policy objects name their class by module.
    digest = hashlib.sha256(str(p).encode()).hexdigest()[:10]
    mod_name = f"coorp_user_policy_{p.stem.replace('-', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise UsageError(f"--policy-module {given}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    before = set(_REGISTRY)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except CoorpError as exc:
        sys.modules.pop(mod_name, None)
        raise UsageError(f"--policy-module {given}{_where(exc, p)}: {exc}") from None
    except BaseException as exc:  # the user's code: report any failure, never a traceback
        sys.modules.pop(mod_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError(
            f"--policy-module {given} raised {type(exc).__name__}{_where(exc, p)} while "
            f"being imported: {exc}"
        ) from None
    names = [n for n in _REGISTRY if n not in before]
    if not names:
        sys.modules.pop(mod_name, None)
        raise UsageError(
            f"--policy-module {given} registered no policy: decorate a subclass of "
            "coorp.policies.Policy with @register_policy (see docs/policies.md)"
        )
    _MODULES[p] = names
    return list(names)


def load_entry_point_policies() -> list[str]:
    """Load every ``coorp.policies`` entry point (once per process); return the names
    they registered. An entry point that fails to load raises :class:`UsageError`
    naming it and its distribution."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED is not None:
        return list(_ENTRY_POINTS_LOADED)
    _ENTRY_POINTS_LOADED = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        where = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP}, {dist})"
        before = set(_REGISTRY)
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Policy):
                register_policy(obj)
        except CoorpError as exc:
            raise UsageError(f"{where}: {exc}") from None
        except Exception as exc:
            raise UsageError(f"{where} raised {type(exc).__name__}: {exc}") from None
        _ENTRY_POINTS_LOADED += [n for n in _REGISTRY if n not in before]
    return list(_ENTRY_POINTS_LOADED)


add_policy_finder(load_entry_point_policies)
