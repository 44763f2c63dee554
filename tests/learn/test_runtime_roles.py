"""The ``coorp learn --runtime`` role processes: how they send and what CPU share they take."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from coorp.learn._runtime.role import Role


def test_sends_keep_their_order_per_peer_and_peers_go_concurrently() -> None:
    """The leader hands a model to every peer at once: a send to one peer that has not
    finished holds back only that peer's later sends (the runtime then puts one message
    at a time on the air, the next one already connected)."""
    role = Role.__new__(Role)  # only the send queues: no team, no inbox
    role.pools, role.futures, role.timeout = {}, [], 10.0
    done: list[str] = []
    b_ran = threading.Event()

    def first_to_a() -> None:
        assert b_ran.wait(10), "the send to b waited for the send to a"
        done.append("a1")

    def to_b() -> None:
        done.append("b1")
        b_ran.set()

    role.submit("a", first_to_a)
    role.submit("a", lambda: done.append("a2"))
    role.submit("b", to_b)
    role.settle()
    role.close_pools()
    assert done.index("b1") < done.index("a1") < done.index("a2")


def test_a_role_process_takes_the_agents_cpu_share() -> None:
    """Each role runs its runtime beside its training on one interpreter, so the whole
    process takes ``coorp agent``'s default share (nice -10) and switches threads every
    0.5 ms; where the kernel refuses, it says so and goes on."""
    code = (
        "import os, sys; from coorp.learn._runtime.__main__ import _prioritise; "
        "_prioritise('r1'); print(os.getpriority(os.PRIO_PROCESS, 0), sys.getswitchinterval())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    nice, switch = out.stdout.split()
    assert float(switch) == 0.0005
    if os.geteuid() == 0:
        assert int(nice) == -10 and out.stderr == ""
    elif int(nice) != -10:
        assert "r1: cannot set CPU scheduling nice -10" in out.stderr
