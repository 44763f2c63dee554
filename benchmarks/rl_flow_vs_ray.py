"""coorp.flow against Ray on the same reactors: PPO iteration time, sampling throughput,
broadcast+gather of 1-100 MB (thesis seed, chapter 1). A script form of
``coorp bench rl`` (same options, same JSON); see docs/learn.md for what is timed.

    python benchmarks/rl_flow_vs_ray.py --workers 2,4 --json results/bench/rl.json
"""

from __future__ import annotations

import sys

from coorp.cli import main

if __name__ == "__main__":
    main(["bench", "rl", *sys.argv[1:]])
