"""Quick simulator speed probe: N saturated bulk uplinks to one AP (default scenario shape).

    .venv/bin/python benchmarks/_speed_probe.py 5 5        # 5 stations, 5 simulated s
    .venv/bin/python benchmarks/_speed_probe.py 40 2 3     # 40 stations, 2 s, best of 3
    .venv/bin/python benchmarks/_speed_probe.py 5 2 1 prof # with a profile

Prints throughput, collisions, exchanges and wall seconds per simulated second (the
best of the repeats: the machine is shared, the minimum is the least disturbed run).
"""

import cProfile
import pstats
import sys

from coorp.scenario import parse_scenario
from coorp.sim import simulate

n = int(sys.argv[1])
dur = float(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
d = {
    "stations": [{"name": "ap"}] + [{"name": f"s{i}"} for i in range(n)],
    "flows": [{"kind": "bulk", "name": f"b{i}", "src": f"s{i}", "dst": "ap"} for i in range(n)],
}
sc = parse_scenario(d)
if len(sys.argv) > 4:
    prof = cProfile.Profile()
    r = prof.runcall(simulate, sc, seed=1, duration_ns=int(dur * 1e9))
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    best = r.wall_s
else:
    best = float("inf")
    for _ in range(reps):
        r = simulate(sc, seed=1, duration_ns=int(dur * 1e9))
        best = min(best, r.wall_s)
print(
    n, round(r.total_throughput_mbps, 1), r.channel.collisions, r.channel.exchanges,
    "wall/sim-s", round(best / dur, 4), r.events_processed,
)  # fmt: skip
