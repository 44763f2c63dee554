"""Every robot pair's link follows the physics world: leader–worker and worker–worker."""

from __future__ import annotations

import numpy as np
from tiny_world import tiny

from coorp.cosim import CosimRun, parse_cosim
from coorp.cosim._world import World

SEC = 1_000_000_000


def _two_workers() -> dict:
    """r1 drives north from (2, 0); r2 waits at (-4, 4). A short wall at x = -1 blocks
    the r1–r2 line at the start and no longer does once r1 is ~0.7 m further north; the
    leader at the origin sees both all along. Low transmit power so that the wall's
    7 dB show in the MCS."""
    d = tiny(
        world={"obstacles": [
            {"name": "w", "center_m": [-1.0, 2.0], "size_m": [0.4, 0.6], "height_m": 2.5},
        ]},
        radio={"tx_power_dbm": 5.0},
    )  # fmt: skip
    d["cosim"]["robots"].append({"name": "r2", "start_m": [-4.0, 4.0], "heading_deg": 90,
                                 "waypoints_m": [[-4.0, 4.2]], "speed_m_s": 0.1})  # fmt: skip
    return d


def _table_matches_geometry(run: CosimRun, a: int, b: int) -> tuple[int, float]:
    """The channel's link a -> b and b -> a are what the radio model gives for the
    world's current geometry (ray-cast walls); returns (walls, rx dBm)."""
    dist, walls = run.world.walls_between(a, b)
    want = run.radio.link(dist, walls)
    links = run.sim.links
    for s, d in ((a, b), (b, a)):
        assert links.mcs(s, d) == want.mcs
        assert links.rx_power_dbm(s, d) == want.rx_dbm
    return walls, want.rx_dbm


def test_worker_to_worker_links_follow_positions_and_walls() -> None:
    run = CosimRun(parse_cosim(_two_workers()), "edca")
    i1, i2 = run.world.index["r1"], run.world.index["r2"]
    walls0, rx0 = _table_matches_geometry(run, i1, i2)  # set before the policy plans
    assert walls0 == 1
    run.run(SEC)
    walls1, rx1 = _table_matches_geometry(run, i1, i2)
    assert walls1 == 0 and rx1 > rx0 + 5.0  # the wall's 7 dB, less the longer distance
    assert run.world.pose(i1)[1] > 0.5  # r1 did drive out of the shadow
    # The leader's links follow too.
    _table_matches_geometry(run, run.world.index["leader"], i1)
    _table_matches_geometry(run, run.world.index["leader"], i2)


def test_all_pairs_geometry_agrees_with_ray_casts() -> None:
    """The vectorised segment–box test (every pair at once) counts the walls that
    MuJoCo's mj_ray counts, for random robot positions outside the obstacles, ground
    and aerial robots mixed (an aerial one sees over a 2.5 m shelf)."""
    d = tiny(world={"size_m": [20.0, 20.0], "obstacles": [
        {"name": "a", "center_m": [0.0, 2.0], "size_m": [8.0, 0.6], "height_m": 2.5},
        {"name": "b", "center_m": [0.0, -2.0], "size_m": [8.0, 1.0], "height_m": 2.5},
        {"name": "c", "center_m": [5.0, 0.0], "size_m": [0.4, 6.0], "height_m": 4.0},
    ]})  # fmt: skip
    d["cosim"]["robots"][0]["altitude_m"] = 3.0
    d["cosim"]["robots"] += [
        {"name": "g2", "start_m": [-3.0, 0.0], "waypoints_m": [[-3.0, 1.0]]},
        {"name": "air", "kind": "aerial", "start_m": [3.0, 5.0], "altitude_m": 5.0,
         "waypoints_m": [[3.0, 6.0]]},
    ]  # fmt: skip
    cfg = parse_cosim(d).cosim
    world = World(cfg)
    n = len(world.robots)
    a, b = np.triu_indices(n, 1)
    rng = np.random.default_rng(7)
    obstacles = cfg.world.obstacles
    seen = set()
    for _ in range(150):
        poses = world.poses()
        for r in world.moving:
            while True:
                x, y = rng.uniform(-9.0, 9.0, 2)
                if not any(abs(x - o.center_m[0]) <= o.size_m[0] / 2
                           and abs(y - o.center_m[1]) <= o.size_m[1] / 2
                           for o in obstacles):  # fmt: skip
                    break
            world.data.qpos[r.qx], world.data.qpos[r.qy] = x, y
            poses[r.index, :2] = x, y
        dist, walls = world.pair_geometry(a, b, poses)
        for k in range(len(a)):
            ray_dist, ray_walls = world.walls_between(int(a[k]), int(b[k]))
            assert walls[k] == ray_walls
            assert dist[k] == ray_dist or abs(dist[k] - ray_dist) < 1e-12
            seen.add(ray_walls)
    assert seen >= {0, 1, 2}  # the positions exercised clear, one-wall and two-wall lines


def test_vectorised_rate_adaptation_matches_the_link_budget() -> None:
    """Radio.links picks, for each received power, the MCS coorp.phy's link budget picks
    (the highest whose sensitivity plus margin is met; -1 below MCS 0)."""
    from coorp.cosim import Radio
    from coorp.cosim._config import RadioConfig
    from coorp.phy import LinkBudget

    for nss, width, margin in ((2, 80, 0.0), (1, 20, 3.0), (3, 80, 0.0), (2, 160, 1.5)):
        radio = Radio(RadioConfig(margin_db=margin), spatial_streams=nss, width_mhz=width)
        dist = np.linspace(1.0, 150.0, 400)
        walls = np.arange(400) % 3
        rx, best = radio.links(dist, walls)
        budget = LinkBudget(margin_db=margin)
        want = [budget.best_mcs_at(float(p), nss, width) for p in rx]
        assert best.tolist() == [-1 if m is None else m for m in want]
        assert len(set(best.tolist())) >= 5  # the powers spanned several MCS
