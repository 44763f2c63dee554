"""What runs on one robot of a real team (threads API).

Sends a 30 Hz perception to the leader robot's inbox and, every ``--every-s``
seconds, a parameter update as a coordinated bulk message; prints what it received.

    coorp leader --config examples/team-example.toml            # on the leader host
    python examples/runtime_robot.py --config examples/team-example.toml \\
        --robot r1 --dest 192.168.50.1:7401                      # on robot r1
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import coorp.runtime as rt


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", required=True, help="the team file")
    p.add_argument("--robot", required=True)
    p.add_argument("--dest", required=True, help="inbox of the leader robot (host:port)")
    p.add_argument("--update-mb", type=float, default=40)
    p.add_argument("--every-s", type=float, default=10)
    p.add_argument("--duration-s", type=float, default=60)
    args = p.parse_args()

    with rt.join_config(args.config, args.robot) as team:
        print(team.marking["ls"].describe(), "|", team.marking["bh"].describe())
        print("mode:", team.mode)
        perception = team.latency_sensitive("perception", args.dest, period_ms=33.3, deadline_ms=33)
        params = team.bulk("params", args.dest)

        def learner() -> None:
            update = os.urandom(int(args.update_mb * 1e6))
            end = time.monotonic() + args.duration_s
            while time.monotonic() < end:
                r = params.send(update, timeout_s=args.every_s * 10)
                print(
                    f"update #{r.msg_id}: {r.duration_ns / 1e9:.2f} s, permit wait "
                    f"{r.permit_wait_ns / 1e9:.2f} s, {r.preemptions} preemptions, "
                    f"mode {team.mode}"
                )
                time.sleep(max(0.0, args.every_s - r.duration_ns / 1e9))

        threading.Thread(target=learner, daemon=True).start()
        next_t = time.monotonic()
        end = next_t + args.duration_s
        while next_t < end:
            perception.send(b"\0" * 12_000)  # a camera frame, in a real robot
            next_t += 1 / 30
            time.sleep(max(0.0, next_t - time.monotonic()))
        print(team.stats()["ls"]["perception"])


if __name__ == "__main__":
    main()
