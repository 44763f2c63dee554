"""Co-simulation behaviour on tiny worlds and short simulated times (<= 1 s)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_world import tiny

from coorp.cosim import Coupling, Radio, parse_cosim, run_cosim
from coorp.cosim._config import RadioConfig
from coorp.cosim._world import World
from coorp.scenario import parse_scenario
from coorp.sim import Simulation

SEC = 1_000_000_000
WALL = {"name": "wall", "center_m": [1.0, 2.0], "size_m": [0.4, 6.0], "height_m": 2.5}


def test_nlos_lowers_the_mcs() -> None:
    radio = Radio(RadioConfig(), spatial_streams=2, width_mhz=80)
    los, nlos = radio.link(12.0, 0), radio.link(12.0, 2)
    assert nlos.rx_dbm == pytest.approx(los.rx_dbm - 14.0)  # 7 dB per wall (TGax SS2)
    assert nlos.mcs < los.mcs
    # Free space up to the 10 m breakpoint, 35 dB/decade beyond.
    assert radio.path_loss_db(10.0, 0) - radio.path_loss_db(1.0, 0) == pytest.approx(20.0)
    assert radio.path_loss_db(100.0, 0) - radio.path_loss_db(10.0, 0) == pytest.approx(35.0)


def test_rays_count_the_walls_between_robots() -> None:
    world = World(parse_cosim(tiny(world={"obstacles": [WALL]})).cosim)
    dist, walls = world.walls_between(0, 1)
    assert walls == 1 and dist == pytest.approx(np.hypot(2.0, 1.0 - 0.1))
    open_world = World(parse_cosim(tiny()).cosim)
    assert open_world.walls_between(0, 1)[1] == 0


def test_a_wall_in_the_world_lowers_the_links_mcs() -> None:
    far = tiny(world={"obstacles": [WALL]})
    far["cosim"]["robots"][0]["start_m"] = [-6.0, 0.0]
    clear = tiny()
    clear["cosim"]["robots"][0]["start_m"] = [-6.0, 0.0]
    blocked = run_cosim(parse_cosim(far), "edca", duration_ns=SEC // 5)
    los = run_cosim(parse_cosim(clear), "edca", duration_ns=SEC // 5)
    assert blocked.link_walls[0, 0] == 1 and los.link_walls[0, 0] == 0
    assert blocked.link_mcs[0, 0] < los.link_mcs[0, 0]


def test_link_table_hook_changes_rate_and_loss() -> None:
    sc = parse_scenario({"stations": [{"name": "a"}, {"name": "b", "position_m": [3, 0]}],
                         "links": {"packet_errors": True}})  # fmt: skip
    sim = Simulation(sc)
    links = sim.links
    good = links.error_prob(0, 1, 1500)
    links.set_link(0, 1, 2, -90.0)
    assert links.mcs(0, 1) == 2 and links.rate_code(0, 1) == 2
    assert links.mcs_table is sim.channel._mcs  # the MAC reads the same table
    assert links.error_prob(0, 1, 1500) > good
    assert links.mcs(1, 0) == 7  # one direction only


def test_exact_coupling_has_no_sync_error_and_follows_the_route() -> None:
    r = run_cosim(parse_cosim(tiny()), "edca", duration_ns=SEC)
    assert r.coupling == "exact"
    assert r.sync_inject_ns.size > 0 and not r.sync_inject_ns.any()
    assert r.sync_apply_ns.size == 0
    # A delivered command acts from the next step: quantization below one step.
    assert r.quantization_ns.size > 0
    assert r.quantization_ns.min() >= 0 and r.quantization_ns.max() < r.step_ns
    # The robot moved along its route (north) and stayed close to the reference.
    y = r.poses[:, 1, 1]
    assert y[-1] > 0.4
    assert r.tracking_error_m.max() < 0.3
    assert r.collisions_robot == r.collisions_obstacle == 0


def test_late_commands_change_the_trajectory() -> None:
    fast = tiny()
    slow = tiny()
    slow["workload"]["mpc"]["inference_us"] = 60_000.0  # every command 55 ms later
    a = run_cosim(parse_cosim(fast), "edca", duration_ns=SEC)
    b = run_cosim(parse_cosim(slow), "edca", duration_ns=SEC)
    assert np.median(b.actuation_age_ns) > np.median(a.actuation_age_ns) + 50_000_000
    assert not np.array_equal(a.poses, b.poses)
    assert b.tracking_error_m.mean() > a.tracking_error_m.mean()


def test_stale_commands_stop_the_robot() -> None:
    d = tiny(staleness_limit_ms=5.0)  # shorter than the 33 ms loop period
    stopped = run_cosim(parse_cosim(d), "edca", duration_ns=SEC)
    moving = run_cosim(parse_cosim(tiny()), "edca", duration_ns=SEC)
    assert stopped.stopped_fraction > 0.5 and moving.stopped_fraction == 0.0
    assert stopped.poses[-1, 1, 1] < moving.poses[-1, 1, 1]


@pytest.mark.parametrize("coupling", [Coupling.FIXED_WINDOW, Coupling.VELOCITY_WINDOW])
def test_window_couplings_have_a_sync_error_within_the_window(coupling: Coupling) -> None:
    r = run_cosim(parse_cosim(tiny(window_ms=5.0)), "edca", duration_ns=SEC // 2,
                  coupling=coupling)  # fmt: skip
    assert r.coupling == coupling.value
    assert r.sync_inject_ns.max() > 0 and r.sync_apply_ns.max() > 0
    limit = 5_000_000 if coupling is Coupling.FIXED_WINDOW else 5_000_000 + 2_000_000
    assert r.sync_inject_ns.max() < limit and r.sync_apply_ns.max() <= limit


def test_same_scenario_and_seed_give_identical_outcomes(tmp_path) -> None:
    from coorp.cosim._trace import Tracer

    cs = parse_cosim(tiny(world={"obstacles": [WALL]}))
    out = []
    for k in range(2):
        tr = Tracer(tmp_path / f"t{k}.mcap")
        r = run_cosim(cs, "coorp", duration_ns=SEC // 2, tracer=tr)
        tr.close()
        out.append(r)
    a, b = out
    sa, sb = a.summary(), b.summary()
    sa.pop("wall_s"), sb.pop("wall_s")
    assert sa == sb
    assert a.poses.tobytes() == b.poses.tobytes()
    assert a.reaction_ns.tobytes() == b.reaction_ns.tobytes()
    assert (tmp_path / "t0.mcap").read_bytes() == (tmp_path / "t1.mcap").read_bytes()
    c = run_cosim(cs, "coorp", seed=cs.scenario.seed + 1, duration_ns=SEC // 2)
    assert c.reaction_ns.tobytes() != a.reaction_ns.tobytes()


def test_an_aerial_robot_sees_over_the_wall_a_ground_robot_does_not() -> None:
    d = tiny(world={"obstacles": [WALL]})
    d["cosim"]["robots"][0]["altitude_m"] = 3.0  # the leader's antenna on a pole
    d["cosim"]["robots"].append({"name": "drone", "kind": "aerial", "start_m": [2.0, 0.5],
                                 "altitude_m": 6.0, "max_speed_m_s": 4.0, "heading_deg": 90,
                                 "speed_m_s": 2.0, "waypoints_m": [[2.0, 6.0]]})  # fmt: skip
    world = World(parse_cosim(d).cosim)
    assert world.walls_between(0, 1)[1] == 1  # ground robot behind the wall
    assert world.walls_between(0, 2)[1] == 0  # the drone flies above it
    r = run_cosim(parse_cosim(d), "edca", duration_ns=SEC // 2)
    drone = r.robots.index("drone")
    # Twice the ground robot's reference speed: it got further along its route.
    assert r.poses[-1, drone, 1] - 0.5 > 1.5 * (r.poses[-1, 1, 1] - 0.0)


def test_a_formation_keeps_its_spacing() -> None:
    d = tiny(task={"kind": "formation", "route_m": [[0.0, 6.0]], "speed_m_s": 0.8,
                   "start_ms": 20.0})  # fmt: skip
    d["cosim"]["robots"][1].update(start_m=[1.0, 0.0], waypoints_m=[], offset_m=[1.0, 0.0])
    d["cosim"]["robots"].append({"name": "r2", "start_m": [-1.0, 0.0], "heading_deg": 90,
                                 "offset_m": [-1.0, 0.0]})  # fmt: skip
    r = run_cosim(parse_cosim(d), "edca", duration_ns=SEC)
    both = r.poses[:, 1:, :2]
    assert both[-1, :, 1].min() > 0.4  # both moved north
    gap = np.hypot(*(both[:, 0] - both[:, 1]).T)
    assert abs(gap - 2.0).max() < 0.1  # side by side, 2 m apart
    # The smallest surface gap of any pair (the leader's pole is nearer at the start).
    assert 0.0 < r.min_separation_m <= gap.min() - 0.4 + 1e-9


def test_outcomes_are_identical_across_processes(tmp_path) -> None:
    """Two interpreters with different hash seeds: the same digest of poses, reaction
    times and the MCAP trace (no set or dict order leaks into the results)."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import hashlib, json, sys\n"
        "from coorp.cosim import parse_cosim, run_cosim\n"
        "from coorp.cosim._trace import Tracer\n"
        "d = json.loads(sys.argv[1])\n"
        "tr = Tracer(sys.argv[2])\n"
        "r = run_cosim(parse_cosim(d), 'coorp', duration_ns=300_000_000, tracer=tr)\n"
        "tr.close()\n"
        "h = hashlib.sha256(r.poses.tobytes() + r.reaction_ns.tobytes())\n"
        "h.update(open(sys.argv[2], 'rb').read())\n"
        "print(h.hexdigest())\n"
    )
    data = json.dumps(tiny(world={"obstacles": [WALL]}))
    digests = []
    for k, hash_seed in enumerate(("1", "2")):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONWARNINGS": "ignore"}
        out = subprocess.run(
            [sys.executable, str(script), data, str(tmp_path / f"{k}.mcap")],
            capture_output=True, text=True, env=env, timeout=120, check=True,
        )  # fmt: skip
        digests.append(out.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]


def test_leader_prediction_compensates_late_poses() -> None:
    slow = tiny()
    slow["workload"]["mpc"]["inference_us"] = 60_000.0  # every command from a 60 ms old pose
    plain = run_cosim(parse_cosim(slow), "edca", duration_ns=2 * SEC)
    slow["cosim"]["leader_prediction"] = True
    predicted = run_cosim(parse_cosim(slow), "edca", duration_ns=2 * SEC)
    assert predicted.tracking_error_m.mean() < 0.7 * plain.tracking_error_m.mean()
    # One estimate per command; the prediction lands much nearer the robot's true pose.
    assert plain.estimate_error_m.size == predicted.estimate_error_m.size > 20
    assert predicted.estimate_error_m.mean() < 0.3 * plain.estimate_error_m.mean()
