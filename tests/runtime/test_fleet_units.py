"""A fleet's runtime pieces without sockets: the team file's ``[fleet]`` (validated,
clear errors), which cell a robot is in (its default route), following it, and the
peer frame's bounds."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from coorp._errors import PeerError
from coorp.runtime import (
    Roaming,
    RoamingCell,
    TeamFileError,
    bssid_reader,
    default_gateway,
    load_team_config,
    team_settings,
)
from coorp.runtime.robot._roam import CellFollower
from coorp.runtime.wire import PeerFrame
from coorp.runtime.wire._format import decode_message, encode_message


def cell(name: str, channel: int, net: int) -> str:
    return (
        f'[[fleet.cells]]\nname = "{name}"\nchannel = {channel}\n'
        f'leader = "10.0.{net}.2:7400"\ngateway = "10.0.{net}.1"\n'
    )


CELL_A, CELL_B = cell("cell-a", 36, 1), cell("cell-b", 36, 2)
MANY = "[" + ", ".join(f'"r{i}"' for i in range(70)) + "]"


def team(tmp_path: Path, fleet: str, robots: str = '["r1", "r2"]') -> Path:
    path = tmp_path / "team.toml"
    path.write_text(f"[team]\nrobots = {robots}\n" + fleet)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(TeamFileError) as exc:
        load_team_config(path)
    return str(exc.value)


def test_a_fleet_team_file_gives_each_cell_its_peers_and_agents_their_cells(tmp_path: Path) -> None:
    c = cell("cell-c", 52, 3)
    cfg = load_team_config(team(tmp_path, "[fleet]\nlocate_every_ms = 20\n" + CELL_A + CELL_B + c))
    assert cfg.fleet is not None
    assert [x.name for x in cfg.fleet.peers_of("cell-b")] == ["cell-a", "cell-b"]
    assert [x.name for x in cfg.fleet.peers_of("cell-c")] == ["cell-c"]
    roaming = team_settings(cfg).roaming
    assert roaming is not None and roaming.every_s == pytest.approx(0.02)
    assert roaming.cell_at("10.0.2.1") == RoamingCell("cell-b", "10.0.2.1", ("10.0.2.2", 7400))
    assert roaming.cell_at("10.9.9.9") is None


@pytest.mark.parametrize(
    ("fleet", "robots", "expected"),
    [
        (CELL_A + CELL_A, '["r1"]', "cell names must be unique; repeated: cell-a"),
        (CELL_A, '["cell-a"]', "cell-a also named in team.robots"),
        (
            CELL_A + CELL_B.replace("10.0.2.1", "10.0.1.1"),
            '["r1"]',
            "two cells with gateway 10.0.1.1",
        ),
        (CELL_A.replace('gateway = "10.0.1.1"\n', ""), '["r1"]', "no gateway, but fleet.locate"),
        (CELL_A.replace("10.0.1.2:7400", "nowhere"), '["r1"]', "fleet.cells[0].leader = 'nowhere'"),
        (CELL_A.replace("channel = 36", "channel = 0"), '["r1"]', "fleet.cells[0].channel = 0"),
        ("[fleet]\npeer_heartbeat_ms = 600\n" + CELL_A, '["r1"]', "at least twice"),
        ('[fleet]\nlocate = "bssid"\n' + CELL_A, '["r1"]', "fleet.locate = 'bssid'"),
        ("[leader]\nlimit = 65\n" + CELL_A, MANY, "at most 64 BH senders"),
        (
            '[fleet]\nlocate = "bssid"\n' + CELL_A + 'bssids = ["02:00:00:00:01:01"]\n',
            '["r1"]',
            "fleet.locate = 'bssid' needs fleet.bssid_file",
        ),
        (
            '[fleet]\nlocate = "bssid"\nbssid_file = "bssid"\n' + CELL_A,
            '["r1"]',
            "'bssid': give an absolute path",
        ),
        (CELL_A + 'bssids = ["02:00:00:00:01"]\n', '["r1"]', "expected a BSSID, six hex bytes"),
        (
            CELL_A
            + 'bssids = ["02:00:00:00:01:01"]\n'
            + CELL_B
            + 'bssids = ["02:00:00:00:01:01"]\n',
            '["r1"]',
            "BSSID 02:00:00:00:01:01 listed in two cells",
        ),
        ('[leader]\ndownlink = ["r1"]\n' + CELL_A, '["r1"]', "leader.downlink: a fleet's cells"),
    ],
)
def test_bad_fleet_sections_are_named(
    tmp_path: Path, fleet: str, robots: str, expected: str
) -> None:
    assert expected in error_of(team(tmp_path, fleet, robots))


ROUTES = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    "eth0\t00000000\t0201000A\t0003\t0\t0\t600\t00000000\t0\t0\t0\n"
    "eth1\t00000000\t0102000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
)


def test_default_gateway_is_the_lowest_metric_default_route(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(ROUTES)
    assert default_gateway(str(table)) == "10.0.2.1"
    table.write_text(ROUTES.splitlines(keepends=True)[0] + ROUTES.splitlines(keepends=True)[1])
    assert default_gateway(str(table)) is None  # no default route
    assert default_gateway(str(tmp_path / "missing")) is None


class FakeLink:
    robot = "r1"

    def __init__(self) -> None:
        self.moved_to: list[tuple[str, int]] = []

    def move_to(self, leader: tuple[str, int]) -> None:
        self.moved_to.append(leader)


def test_the_follower_moves_the_link_when_the_gateway_names_another_cell() -> None:
    a = RoamingCell("cell-a", "10.0.1.1", ("10.0.1.2", 7400))
    b = RoamingCell("cell-b", "10.0.2.1", ("10.0.2.2", 7400))
    where = ["10.0.1.1"]
    link = FakeLink()
    follower = CellFollower(link, Roaming((a, b), locate=lambda: where[0]), a,  # type: ignore[arg-type]
                            clock=lambda: 7)  # fmt: skip
    assert follower.check() == a and link.moved_to == []
    where[0] = "10.0.2.1"  # the roam
    assert follower.check() == b and link.moved_to == [b.leader]
    where[0] = "192.168.9.1"  # a gateway of no cell: stay with cell-b's leader
    assert follower.check() == b and link.moved_to == [b.leader]
    assert follower.moves == [(7, "cell-a", "cell-b")]


def test_peer_frames_are_bounded_and_strictly_typed() -> None:
    ok = PeerFrame(kind="state", src="cell-a", dst="cell-b", holders=[("r1", 5)], waiting=["r2"])
    assert decode_message(encode_message(ok)) == ok
    for bad in (
        PeerFrame(kind="state", src="cell-a", dst="cell-b", waiting=["r"] * 129),
        PeerFrame(kind="grant", src="cell-a", dst="cell-b", robot="r1\n"),
    ):
        with pytest.raises(PeerError):
            decode_message(encode_message(bad))
    raw = msgspec.msgpack.encode(["peer", "vote", "cell-a", "cell-b"])  # no such kind
    with pytest.raises(PeerError, match=r"vote|kind|Invalid"):
        decode_message(raw)


def test_transparent_rules_spare_every_cells_leader(tmp_path: Path) -> None:
    """A robot that roams keeps its kernel rules: they never intercept a connection to
    any cell's leader, whichever it is in."""
    from coorp.cli._runtime._daemons import _coorp_ports

    other = cell("cell-c", 52, 3).replace(":7400", ":7411")
    cfg = load_team_config(team(tmp_path, CELL_A + other))
    assert {7400, 7411} <= set(_coorp_ports(cfg, None, None))


def test_leader_cell_flag_errors_exit_2_naming_the_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    from coorp.cli import main

    key = tmp_path / "team.key"
    key.write_text("5e" * 32 + "\n")
    key.chmod(0o600)
    with_fleet = (
        team(tmp_path, CELL_A).read_text().replace("[team]\n", '[team]\nkey_file = "team.key"\n')
    )
    (tmp_path / "fleet.toml").write_text(with_fleet)
    (tmp_path / "plain.toml").write_text('[team]\nkey_file = "team.key"\nrobots = ["r1"]\n')
    for cfg, cell_name, why in (
        ("fleet.toml", "cell-z", "--cell 'cell-z' is not in fleet.cells"),
        ("plain.toml", "cell-a", "has no [fleet] section"),
    ):
        logger = logging.getLogger("coorp")
        before = list(logger.handlers)
        try:
            with pytest.raises(SystemExit) as exit_:
                main(["leader", "--config", str(tmp_path / cfg), "--cell", cell_name])
        finally:
            for h in logger.handlers[len(before) :]:
                logger.removeHandler(h)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and why in err and "Traceback" not in err, err


def test_a_robot_roaming_inside_one_subnet_follows_its_bssid(tmp_path: Path) -> None:
    # Two APs of one subnet (one gateway): the associated BSSID tells the cells apart.
    # No WiFi stack here: the file stands for what a wpa_supplicant action script
    # (or an `iw event` hook) writes on each association.
    where = tmp_path / "bssid"
    fleet = (
        f'[fleet]\nlocate = "bssid"\nbssid_file = "{where}"\n'
        + CELL_A.replace('gateway = "10.0.1.1"\n', "")
        + 'bssids = ["02:00:00:00:01:01", "02:00:00:00:01:02"]\n'
        + CELL_B.replace('gateway = "10.0.2.1"\n', "")
        + 'bssids = ["02:00:00:00:02:01"]\n'
    )
    roaming = team_settings(load_team_config(team(tmp_path, fleet))).roaming
    assert roaming is not None and roaming.by == "bssid" and roaming.watch is None
    a, b = roaming.cells
    assert roaming.locate() is None  # no file yet: not associated
    where.write_text("02:00:00:00:01:02\n")
    assert roaming.cell_at(roaming.locate()) == a
    link = FakeLink()
    follower = CellFollower(link, roaming, a, clock=lambda: 3)  # type: ignore[arg-type]
    where.write_text("02:00:00:00:02:01\n")  # the roam
    assert follower.check() == b and link.moved_to == [b.leader]
    for junk in ("", "not-a-bssid\n", "02:00:00:00:09:09\n"):  # none of a cell: stay
        where.write_text(junk)
        assert follower.check() == b
    assert bssid_reader(str(tmp_path / "missing"))() is None
    where.write_text("02:00:00:00:01:01")
    assert bssid_reader(str(where))() == "02:00:00:00:01:01"
    assert follower.check() == a and follower.moves == [
        (3, "cell-a", "cell-b"),
        (3, "cell-b", "cell-a"),
    ]
