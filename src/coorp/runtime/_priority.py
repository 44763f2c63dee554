"""The agent's share of a busy CPU: LS observation and the bulk engine must run on time
(beneath every wing: the team file validates ``agent.scheduling`` with it).

A robot's CPUs are busy (perception, MPC, training). The agent's work is small but
late work is wrong work: the relay's pacer decides a chunk may go, and if the process
then waits 20 ms for a CPU the chunk goes out inside the protection window it was
meant to avoid; a bulk stream waiting for its permit or its budget answers late. So
``coorp agent`` asks the kernel for a larger share (the team file's
``agent.scheduling``):

* ``nice:N`` (default ``nice:-10``): the CFS/EEVDF weight of nice -10 is about 9× that
  of nice 0, so against busy processes at nice 0 the agent gets the CPU almost as soon
  as it wakes, and still cannot take it from the robot's own programs for long (it
  sleeps between chunks and polls). Lowering a nice value needs ``CAP_SYS_NICE`` or
  ``RLIMIT_NICE`` (``ulimit -e``); root has it.
* ``rr:P`` / ``fifo:P``: a real-time class (priority 1–99): the agent preempts every
  normal process at once, including the robot's control programs, bounded only by the
  kernel's real-time throttling (``kernel.sched_rt_runtime_us``). For hosts whose
  control stack runs real-time itself. Needs ``CAP_SYS_NICE`` or ``RLIMIT_RTPRIO``.
* ``none``: leave it as the process started.

Why not a cgroup weight: the same share, but it needs a delegated cgroup v2 subtree
and write access to it, which a systemd unit's ``CPUWeight=`` gives more simply than
the agent could itself (docs/runtime.md).

Threads the process starts afterwards inherit the setting. :func:`scheduling_check`
is ``coorp doctor``'s probe: may this process raise its share, and how far.
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Scheduling", "apply_scheduling", "parse_scheduling", "scheduling_check"]

_FORM = re.compile(r"^\s*(none|nice|rr|fifo)\s*(?::\s*(-?\d+)\s*)?$")


@dataclass(frozen=True, slots=True)
class Scheduling:
    kind: Literal["none", "nice", "rr", "fifo"]
    value: int = 0

    def describe(self) -> str:
        return "unchanged" if self.kind == "none" else f"{self.kind} {self.value}"


def parse_scheduling(text: str) -> Scheduling:
    """``none``, ``nice:N`` (-20..19), ``rr:P`` or ``fifo:P`` (1..99)."""
    m = _FORM.match(text)
    if m is None or (m.group(1) != "none") != (m.group(2) is not None):
        raise ValueError(
            f"{text!r}: expected none, nice:N (N in -20..19), rr:P or fifo:P (P in 1..99)"
        )
    kind = m.group(1)
    if kind == "none":
        return Scheduling("none")
    value = int(m.group(2))
    if kind == "nice" and not -20 <= value <= 19:
        raise ValueError(f"{text!r}: a nice value is -20..19")
    if kind in ("rr", "fifo") and not 1 <= value <= 99:
        raise ValueError(f"{text!r}: a real-time priority is 1..99")
    return Scheduling(kind, value)  # type: ignore[arg-type]


def apply_scheduling(s: Scheduling) -> str:
    """Set this process's scheduling; what is now in effect. Raises PermissionError
    (with what would allow it) when the kernel refuses."""
    if s.kind == "none":
        return current_scheduling()
    try:
        if s.kind == "nice":
            os.setpriority(os.PRIO_PROCESS, 0, s.value)
        else:
            policy = os.SCHED_RR if s.kind == "rr" else os.SCHED_FIFO
            os.sched_setscheduler(0, policy, os.sched_param(s.value))
    except PermissionError:
        need = "RLIMIT_NICE (ulimit -e)" if s.kind == "nice" else "RLIMIT_RTPRIO (ulimit -r)"
        raise PermissionError(
            f"cannot set CPU scheduling {s.describe()}: it needs CAP_SYS_NICE or {need}; "
            f"now {current_scheduling()}"
        ) from None
    return current_scheduling()


def current_scheduling() -> str:
    policy = os.sched_getscheduler(0)
    if policy in (os.SCHED_RR, os.SCHED_FIFO):
        name = "rr" if policy == os.SCHED_RR else "fifo"
        return f"{name} {os.sched_getparam(0).sched_priority}"
    return f"nice {os.getpriority(os.PRIO_PROCESS, 0)}"


def scheduling_check() -> tuple[bool, bool, str]:
    """(may raise the nice value's share, may use a real-time class, detail) for this
    process; nothing is left changed."""
    nice_ok = _probe_nice()
    rt_limit = resource.getrlimit(resource.RLIMIT_RTPRIO)[0]
    root_like = os.geteuid() == 0 or _has_cap_sys_nice()
    rt_ok = root_like or rt_limit == resource.RLIM_INFINITY or rt_limit >= 1
    runtime = _read("/proc/sys/kernel/sched_rt_runtime_us")
    detail = (
        f"nice: {'may be lowered' if nice_ok else 'may not be lowered'} "
        f"(RLIMIT_NICE {_limit(resource.RLIMIT_NICE)}); real-time: "
        f"{'allowed' if rt_ok else 'not allowed'} (RLIMIT_RTPRIO {_limit(resource.RLIMIT_RTPRIO)}"
        f"{', sched_rt_runtime_us ' + runtime if runtime else ''})"
    )
    return nice_ok, rt_ok, detail


def _probe_nice() -> bool:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before <= -20:
        return True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, before - 1)
    except PermissionError:
        return False
    os.setpriority(os.PRIO_PROCESS, 0, before)  # raising it back is always allowed
    return True


def _has_cap_sys_nice() -> bool:
    text = _read("/proc/self/status") or ""
    m = re.search(r"^CapEff:\s*([0-9a-f]+)", text, re.M)
    return m is not None and bool(int(m.group(1), 16) >> 23 & 1)  # CAP_SYS_NICE = 23


def _limit(which: int) -> str:
    soft = resource.getrlimit(which)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None
