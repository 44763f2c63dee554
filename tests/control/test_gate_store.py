"""The gate's two stores of pending packets give the same answers.

The gate keeps the packets it saw enqueued in a fast store (records in id order,
while the driver numbers its runs in order) and turns to a dict of every packet when
that rule breaks (ids reused or out of order, the ``max_pending`` bound). The dict is
the plain, obvious store; here a gate forced to use it and a normal gate see the same
random traffic, including out-of-order and unknown completions, discards, reused ids
and a tiny bound, and must agree on every answer, counter and sample.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.control import CompletionTimeTable, Gate, ProtectionPlanner

MS = 1_000_000

_op = st.tuples(
    st.integers(0, 7),  # kind
    st.integers(1, 12),  # count
    st.integers(0, 3 * MS),  # time step
    st.integers(0, 1_000),  # a choice (which packets, which id)
)


def _gate(realized: bool, buckets: bool, max_pending: int, dict_only: bool) -> Gate:
    edges = (1 * MS, 2 * MS, 4 * MS) if buckets else ()
    ctt = CompletionTimeTable(max_depth=40, samples_per_depth=8, lead_edges_ns=edges)
    gate = Gate(
        ProtectionPlanner(margin_ns=500_000), ctt, realized=realized,
        max_pending=max_pending, max_explore_backoff=4,
    )  # fmt: skip
    if dict_only:
        gate._fast = False
        gate._fast_allowed = False
    return gate


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, max_size=80),
    realized=st.booleans(),
    buckets=st.booleans(),
    max_pending=st.sampled_from([2, 5, 40, 65_536]),
)
def test_the_fast_store_answers_as_the_dict(
    ops: list[tuple[int, int, int, int]], realized: bool, buckets: bool, max_pending: int
) -> None:
    fast = _gate(realized, buckets, max_pending, dict_only=False)
    slow = _gate(realized, buckets, max_pending, dict_only=True)
    now, pid, sends = 0, 0, 0
    ring: list[int] = []  # ids in the NIC (as the driver sees them), oldest first
    for kind, count, step, pick in ops:
        now += step
        if now >= sends * 10 * MS:  # a periodic LS send every 10 ms
            for g in (fast, slow):
                assert isinstance(g.planner, ProtectionPlanner)
                g.planner.observe("ls", now)
                g.on_ls_send(now)
            sends = now // (10 * MS) + 1
        if kind <= 1:  # the driver offers a run
            got = {g.admit_run(now, pid, count, len(ring)) for g in (fast, slow)}
            assert len(got) == 1
            ring += range(pid, pid + got.pop())
            pid += count
        elif kind == 2:  # announced without asking (TCP acks)
            for g in (fast, slow):
                g.on_enqueue_run(pid, count, now, len(ring))
            ring += range(pid, pid + count)
            pid += count
        elif kind == 3 and ring:  # a run from the middle of the ring completes
            at = pick % len(ring)
            done = ring[at : at + count]
            ring = ring[:at] + ring[at + count :]
            start = done[0]
            n = next((i for i, q in enumerate(done) if q != start + i), len(done))
            for g in (fast, slow):
                g.on_complete_run(start, n, now)
            ring = [q for q in ring if not start <= q < start + n] + done[n:]
        elif kind == 4 and ring:  # the oldest complete, one call
            done, ring = ring[:count], ring[count:]
            for g in (fast, slow):
                g.on_complete_run(done[0], count, now)  # may include unknown ids
        elif kind == 5 and ring:  # one packet dropped
            q = ring.pop(pick % len(ring))
            for g in (fast, slow):
                g.on_discard(q)
        elif kind == 6:  # an id reused, or one far behind (a recycled buffer)
            q = max(0, pid - 1 - pick % 30)
            for g in (fast, slow):
                g.on_enqueue(q, now, len(ring))
            if q not in ring:
                ring.append(q)
        else:  # an unknown completion
            for g in (fast, slow):
                g.on_complete(10**9 + pick, now)
        assert fast.stats == slow.stats
        assert fast.pending == slow.pending
        assert fast.exploring == slow.exploring
        assert fast.admits(now, len(ring)) == slow.admits(now, len(ring))
        # admits_run is admits at each depth in turn, up to the first refusal, and asks
        # nothing that changes the gate.
        before = fast.stats
        n = fast.admits_run(now, count, len(ring))
        prefix = 0
        while prefix < count and fast.admits(now, len(ring) + prefix):
            prefix += 1
        assert n == prefix and fast.stats == before
    for d in range(41):
        assert fast.ctt.samples(d) == slow.ctt.samples(d)
        assert fast.ctt.query(d) == slow.ctt.query(d)
