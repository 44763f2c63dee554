"""The futex wake word: one call wakes every waiting process, no lost wake-ups, cleanup.

Waiters are forked processes and threads that only use :mod:`coorp.transport._machine._wake`
(no iceoryx2), so the tests are quick. Nothing synchronizes with sleeps: a test waits
(bounded) until the kernel reports the waiters asleep in a futex call on the wake word
(``/proc/<task>/syscall``) and then counts the waiters one system call woke (the
kernel's return value).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

from coorp._errors import ConfigurationError, UsageError
from coorp.transport import Bus, Reach, Topic, Wake
from coorp.transport._machine import _shm, _wake

from .conftest import needs_iceoryx2

pytestmark = pytest.mark.skipif(
    _wake.futex_supported() is not None, reason=f"no futex here: {_wake.futex_supported()}"
)

_BOUND_S = 10.0  # every wait in these tests ends by then, whatever the load


@pytest.fixture
def topic_name(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # Sleeps end by wake-up here, not by the safety-net timeout, whatever the load.
    monkeypatch.setattr(_wake, "MAX_SLEEP_S", _BOUND_S)
    yield name
    assert not os.path.exists(_wake.segment_path(name)), "wake file left behind"


def _in_futex(task: str, addr: int) -> bool:
    """Whether the task sleeps in a futex call on ``addr`` (not, say, on the GIL)."""
    try:
        with open(f"{task}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    nr = _wake._syscall[1] if _wake._syscall else -1
    return len(fields) > 1 and fields[0] == str(nr) and int(fields[1], 16) == addr


def _await_asleep(tasks: list[str], addr: int) -> None:
    """Until every task sleeps on the wake word (bounded; yields the CPU between reads)."""
    end = time.monotonic() + _BOUND_S
    while not all(_in_futex(t, addr) for t in tasks):
        assert time.monotonic() < end, "waiters never went to sleep"
        os.sched_yield()


def _child_wait(seg: _wake.WakeSegment, uid: int, seen: int, w: int) -> None:
    """Forked child: sleep until the word leaves ``seen``; report how many waits it took."""
    code = 1
    try:
        waiter = _wake.Waiter(seg, uid)
        end = time.monotonic() + _BOUND_S
        waits = 0
        while waiter.value() == seen and time.monotonic() < end:
            waiter.wait(seen, int(_BOUND_S * 1e9))
            waits += 1
        os.write(w, f"{waiter.value() - seen} {waits}\n".encode())
        code = 0
    finally:
        os._exit(code)


def test_one_call_wakes_every_waiting_process(topic_name: str) -> None:
    n = 3
    seg = _wake.acquire(topic_name)
    try:
        seen = seg.value
        r, w = os.pipe()
        pids = []
        for i in range(n):
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child_wait(seg, i, seen, w)
            pids.append(pid)
        os.close(w)
        try:
            _await_asleep([f"/proc/{pid}" for pid in pids], seg.word_addr)
            woken = seg.wake_all()  # the only wake-up any child gets
            reports = b""
            while reports.count(b"\n") < n:
                chunk = os.read(r, 4096)
                if not chunk:
                    break
                reports += chunk
        finally:
            for pid in pids:
                _, status = os.waitpid(pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0
            os.close(r)
        assert woken == n
        # Each child saw the word advance by exactly one, after one sleep (woken, not
        # timed out: its timeout was longer than the whole test may take).
        assert sorted(reports.decode().split("\n")[:n]) == ["1 1"] * n
    finally:
        _wake.release(seg)


def test_wake_before_wait_is_not_lost(topic_name: str) -> None:
    seg = _wake.acquire(topic_name)
    try:
        waiter = _wake.Waiter(seg, 1)
        seen = waiter.value()
        assert seg.wake_all() == 0  # nobody sleeps yet
        # The word moved since `seen`: the kernel refuses to sleep (True, not a timeout).
        assert waiter.wait(seen, int(_BOUND_S * 1e9)) is True
        seen = waiter.value()
        waiter.wake()  # the per-subscriber wake-up moves the word too
        assert waiter.value() == (seen + 1) & 0xFFFFFFFF
        assert waiter.wait(seen, int(_BOUND_S * 1e9)) is True
        # A wait on the current value with a zero timeout times out (False).
        assert waiter.wait(waiter.value(), 0) is False
    finally:
        _wake.release(seg)


def test_own_wake_reaches_only_its_waiter(topic_name: str) -> None:
    seg = _wake.acquire(topic_name)
    try:
        waiters = [_wake.Waiter(seg, uid) for uid in (1, 2)]
        assert waiters[0].bits != waiters[1].bits
        seen = seg.value
        tids = [0, 0]
        woken: list[bool | None] = [None, None]
        started = threading.Barrier(3, timeout=_BOUND_S)

        def body(i: int) -> None:
            tids[i] = threading.get_native_id()
            started.wait()
            woken[i] = waiters[i].wait(seen, int(_BOUND_S * 1e9))

        threads = [threading.Thread(target=body, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        try:
            started.wait()
            _await_asleep([f"/proc/self/task/{tid}" for tid in tids], seg.word_addr)
            assert seg.wake_bits(waiters[0].bits) == 1  # thread 0 alone
            threads[0].join(_BOUND_S)
            assert woken[0] is True
            assert threads[1].is_alive() and woken[1] is None
        finally:
            woken_last = seg.wake_all()
            for t in threads:
                t.join(_BOUND_S)
        assert woken_last == 1 and woken[1] is True
    finally:
        _wake.release(seg)


def test_last_user_removes_the_file(topic_name: str) -> None:
    path = _wake.segment_path(topic_name)
    first = _wake.acquire(topic_name)
    second = _wake.acquire(topic_name)  # same process: one registration, counted
    assert second is first and os.path.exists(path)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # another process joins and leaves; the file must stay for us
        code = 1
        try:
            os.close(r)
            seg = _wake.acquire(topic_name)
            assert seg is not first
            _wake.release(seg)
            os.write(w, b"1" if os.path.exists(path) else b"0")
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        assert os.read(r, 1) == b"1"
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    _wake.release(first)
    assert os.path.exists(path)
    _wake.release(second)
    assert not os.path.exists(path)


def _crash_holding(topic_name: str) -> None:
    """A forked child registers in the wake file and dies without leaving it."""
    pid = os.fork()
    if pid == 0:
        try:
            _wake._table.clear()  # the parent's registrations are not the child's
            _wake.acquire(topic_name)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def test_stale_file_of_a_crashed_run_is_replaced_and_swept(topic_name: str) -> None:
    path = _wake.segment_path(topic_name)
    _crash_holding(topic_name)
    assert os.path.exists(path)
    seg = _wake.acquire(topic_name)  # every registered process is gone: re-initialised
    assert seg.replaced_stale
    _wake.release(seg)
    assert not os.path.exists(path)

    _crash_holding(topic_name)
    assert os.path.exists(path)
    assert _wake.sweep_stale() >= 1
    assert not os.path.exists(path)


def _exit_holding(topic_name: str) -> None:
    _wake.acquire(topic_name)  # and return without release (the bus never closed)


def test_process_exiting_without_release_leaves_no_file(topic_name: str) -> None:
    import multiprocessing

    for method in ("fork", "spawn"):
        proc = multiprocessing.get_context(method).Process(target=_exit_holding, args=(topic_name,))
        proc.start()
        proc.join(_BOUND_S)
        assert proc.exitcode == 0
        assert not os.path.exists(_wake.segment_path(topic_name)), method


def test_sweep_keeps_files_in_use(topic_name: str) -> None:
    seg = _wake.acquire(topic_name)
    try:
        _wake.sweep_stale()
        assert os.path.exists(_wake.segment_path(topic_name))
    finally:
        _wake.release(seg)


# -- through the bus --------------------------------------------------------------------


@needs_iceoryx2
def test_futex_and_iceoryx2_subscribers_share_a_topic(topic_name: str) -> None:
    topic = Topic(name=topic_name, type=np.ndarray, max_payload=1 << 16)
    buses = [
        Bus(f"w{i}", reach=Reach.MACHINE, wake=mode)
        for i, mode in enumerate(("futex", "iceoryx2", "auto", "auto"))
    ]
    try:
        subs = [b.subscriber(topic) for b in buses[:3]]
        assert subs[0]._waiter is not None and subs[1]._waiter is None
        pubs = [buses[3].publisher(topic), buses[2].publisher(topic)]
        for k, pub in enumerate(pubs):
            pub.publish(np.full(8, k))
        for sub in subs:  # buses[2]'s sub gets its own bus's message in-process
            got = []
            for _ in range(2):
                msg = sub.receive(timeout=_BOUND_S)
                assert msg is not None
                got.append(int(msg.value[0]))
                msg.release()
            assert sorted(got) == [0, 1]
        assert os.path.exists(_wake.segment_path(topic_name))
        # A subscriber leaves, another joins: the new one sleeps on the same word.
        subs[0].close()
        late = buses[0].subscriber(topic)
        done: list[object] = []
        t = threading.Thread(target=lambda: done.append(late.receive(timeout=_BOUND_S)))
        t.start()
        pubs[0].publish(np.full(8, 7))
        t.join(_BOUND_S)
        assert done and done[0] is not None
    finally:
        for b in buses:
            b.close()


@needs_iceoryx2
def test_blocked_receive_is_woken_by_wake_and_in_process_delivery(topic_name: str) -> None:
    topic = Topic(name=topic_name, type=bytes)
    with Bus("w-local", reach=Reach.PROCESS | Reach.MACHINE, wake="futex") as bus:
        sub = bus.subscriber(topic)
        waiter = sub._waiter
        assert waiter is not None
        # Not receiving: an in-process delivery queues without touching the futex word.
        before = waiter.value()
        bus.publisher(topic).publish(b"queued")
        assert waiter.value() == before
        msg = sub.receive(timeout=_BOUND_S)
        assert msg is not None and bytes(msg.value) == b"queued"
        # A wake() racing the receive's start (the generation is read by the caller, as
        # areceive does) is never lost: before the wait it ends the receive, during the
        # wait it wakes it. No sleep decides which.
        results: list[object] = []
        generation = sub._wake_generation
        t = threading.Thread(target=lambda: results.append(sub._receive(_BOUND_S, generation)))
        t.start()
        sub.wake()
        t.join(_BOUND_S)
        assert results == [None]
        # An in-process delivery wakes a running receive.
        t = threading.Thread(target=lambda: results.append(sub.receive(timeout=_BOUND_S)))
        t.start()
        _await_asleep([f"/proc/self/task/{t.native_id}"], waiter.segment.word_addr)
        bus.publisher(topic).publish(b"here")
        t.join(_BOUND_S)
        assert results[1] is not None


def test_bad_wake_mode_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"wake='nope'.*allowed: 'auto', 'futex', 'iceoryx2'"):
        Bus("w-bad", reach=Reach.PROCESS, wake="nope")


def test_wake_modes_are_an_enum_and_their_values_work_too() -> None:
    assert [Wake.parse(v) for v in ("auto", "futex", "iceoryx2")] == list(Wake)
    assert Wake.parse(Wake.FUTEX) is Wake.FUTEX
    with Bus("w-enum", reach=Reach.PROCESS, wake=Wake.ICEORYX2) as bus:
        assert bus.shm is None  # no machine reach: the mode is checked, nothing opened


@needs_iceoryx2
def test_without_futex_one_notice_and_iceoryx2_waits(
    topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_wake, "_probed", True)
    monkeypatch.setattr(_wake, "_reason", "futex unavailable (test)")
    monkeypatch.setattr(_shm, "_noticed", False)
    with pytest.raises(ConfigurationError, match="futex unavailable"):
        Bus("w-f", reach=Reach.MACHINE, wake="futex")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Bus("w-a", reach=Reach.MACHINE) as a, Bus("w-b", reach=Reach.MACHINE) as b:
            sub = b.subscriber(Topic(name=topic_name, type=bytes))
            assert sub._waiter is None
            a.publisher(Topic(name=topic_name, type=bytes)).publish(b"x")
            msg = sub.receive(timeout=_BOUND_S)
            assert msg is not None and bytes(msg.value) == b"x"
            msg.release()
    notices = [w for w in caught if "futex unavailable" in str(w.message)]
    assert len(notices) == 1
