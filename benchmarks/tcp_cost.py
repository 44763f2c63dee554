"""What the TCP sender model changes for a policy: a ``--policy-module`` with one variant,
and, run as a script, the TCP counters behind the numbers.

``coorp-free-acks`` is ``coorp`` without holding the team's TCP acks (``gate_acks =
False``), everything else equal, so that ``coorp`` against it isolates what held acks
cost, and each policy with ``--set tcp.sender=cubic`` against ``tcp.sender=none`` what
the gate's pauses and held acks cost once a TCP window decides what the sender may
send (docs/simulator.md, "TCP senders"; docs/control.md)::

    for tcp in none reno cubic; do
      coorp compare crl-5 --policy-module benchmarks/tcp_cost.py \\
          --policies edca,coorp,coorp-free-acks,oracle --seeds 1-5 \\
          --set tcp.sender=$tcp --json results/tcp-cost-$tcp.json
    done
    python benchmarks/tcp_cost.py --policies edca,coorp,coorp-free-acks --seeds 1-5 \\
        --tcp cubic --json results/tcp-cost-counters.json

The script sums, per policy and over the seeds, each kind of bulk flow's TCP counters
(``SimResult.tcp``: the workers' uploads ``update:*``, the leader's model downloads
``model:*`` and data partitions ``data:*``), and the MAC's drops of their segments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from coorp.policies import CoorpPolicy, register_policy


@register_policy
class CoorpFreeAcks(CoorpPolicy):
    name = "coorp-free-acks"
    summary = "coorp without holding the team's TCP acks (gate_acks = False)"
    gate_acks = False


COUNTERS = ("timeouts", "spurious_timeouts", "retransmits", "fast_recoveries",
            "idle_restarts", "delayed_acks")  # fmt: skip


def counters(scenario: str, policy: str, seed: int, tcp: str) -> dict[str, Any]:
    from coorp.scenario import apply_overrides, load_scenario, resolve_scenario
    from coorp.workload import run_crl

    sc = load_scenario(resolve_scenario(scenario))
    sc = apply_overrides(sc, [("tcp.sender", tcp)], source=scenario)
    res = run_crl(sc, policy, seed=seed, timeseries=False).sim
    out: dict[str, Any] = {}
    for name, stats in res.tcp.items():
        kind = name.split(":", 1)[0]
        agg = out.setdefault(kind, dict.fromkeys((*COUNTERS, "mac_drops"), 0))
        for k in COUNTERS:
            agg[k] += stats[k]
        agg["mac_drops"] += res.flows[name].dropped_packets
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenario", default="crl-5")
    ap.add_argument("--policies", default="edca,coorp,coorp-free-acks")
    ap.add_argument("--seeds", default="1-5", help="a range a-b or a comma list")
    ap.add_argument("--tcp", default="cubic", help="[tcp] sender: reno or cubic")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if "-" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    load_before = os.getloadavg()
    table: dict[str, dict[str, dict[str, int]]] = {}
    for policy in args.policies.split(","):
        total: dict[str, dict[str, int]] = {}
        for seed in seeds:
            for kind, agg in counters(args.scenario, policy, seed, args.tcp).items():
                t = total.setdefault(kind, dict.fromkeys(agg, 0))
                for k, v in agg.items():
                    t[k] += v
        table[policy] = total
        for kind, t in sorted(total.items()):
            print(f"{policy:16s} {kind:7s} " + " ".join(f"{k}={v}" for k, v in t.items()))
    load_after = os.getloadavg()
    print(f"{args.scenario}, tcp={args.tcp}, seeds {seeds}: sums over the seeds; "
          f"load average before {load_before}, after {load_after}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": " ".join(["python benchmarks/tcp_cost.py", *sys.argv[1:]]),
            "scenario": args.scenario, "tcp": args.tcp, "seeds": seeds,
            "load_average_before": load_before, "load_average_after": load_after,
            "counters": table,
        }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
