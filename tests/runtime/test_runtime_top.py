"""What ``coorp top`` shows: reports turned into rates at the leader, latency merged
from the receiving inboxes, pages, and the table."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from rich.console import Console

from cli_run import run_cli
from coorp.cli._runtime._watch import status_table
from coorp.runtime import TeamStatus
from coorp.runtime.inbox._latency_book import LatencyBook
from coorp.runtime.leader._board import TeamBoard
from coorp.runtime.robot._report import Reporter, ReportPart
from coorp.runtime.wire._format import (
    AgentReport,
    FlowSummary,
    LatencySummary,
    decode_message,
    encode_message,
)

S = 1_000_000_000


def report(ls: int, bulk: int, paused_ns: int, lat: list[LatencySummary] | None = None,
           flows: list[FlowSummary] | None = None) -> AgentReport:  # fmt: skip
    return AgentReport("coordinated", ls, 1, bulk, paused_ns, 0, lat or [], flows or [], 2)


def test_two_reports_make_rates_and_receivers_say_the_latency() -> None:
    board = TeamBoard(["leader", "r1", "r2"])
    board.record("r1", 10 * S, report(ls=300, bulk=10_000_000, paused_ns=0))
    board.record("r1", 12 * S, report(ls=360, bulk=22_500_000, paused_ns=S // 2,
                                      flows=[FlowSummary("10.0.0.1:9000", 5, True)]))  # fmt: skip
    # The leader's inbox measured r1's LS; another robot's inbox saw a little of it.
    board.record("leader", 12 * S, report(0, 0, 0, lat=[LatencySummary("r1", 900, 3, 400, 5200)]))
    board.record("r2", 12 * S, report(0, 0, 0, lat=[LatencySummary("r1", 100, 1, 900, 2100)]))
    rows = {r.robot: r for r in board.rows(12 * S + 300_000_000, {"leader", "r1"})}
    r1 = rows["r1"]
    assert r1.ls_rate_hz == 30.0  # 60 sends in 2 s
    assert r1.bulk_mbps == 50.0  # 12.5 MB in 2 s
    assert r1.gate_paused == 0.25  # 0.5 s of 2 s
    assert (r1.ls_received, r1.ls_late) == (1000, 4)
    assert (r1.ls_p50_ms, r1.ls_p99_ms) == (0.4, 5.2)  # the busiest inbox's p50, the worst p99
    assert r1.age_ms == 300 and r1.connected and r1.intercepted[0].active
    assert not rows["r2"].connected and rows["r2"].ls_rate_hz == 0.0  # one report: no rate
    assert rows["leader"].ls_p50_ms is None  # nobody received the leader's LS


def test_pages_cover_a_large_team() -> None:
    robots = [f"r{i}" for i in range(70)]
    board = TeamBoard(robots)
    pages = [board.page(off, 0, set(), ["r3"], ["r4"]) for off in (0, 32, 64)]
    assert [len(p.rows) for p in pages] == [32, 32, 6] and pages[0].total == 70
    assert [r.robot for p in pages for r in p.rows] == robots
    assert all(len(encode_message(p)) < 16 * 1024 for p in pages)  # fits a control frame
    assert decode_message(encode_message(pages[1])) == pages[1]


def test_reporter_sums_its_sources_and_survives_a_broken_one() -> None:
    book = LatencyBook()
    for ms in (1, 2, 3, 40):
        book.record("leader", ms * 1_000_000, late=ms > 33)

    def broken() -> ReportPart:
        raise RuntimeError("a source failed")

    rep = Reporter(
        mode=lambda: "coordinated",
        ls_flows=lambda: 2,
        books=[book],
        sources=[lambda: ReportPart(ls_sends=5, bulk_bytes=7), broken,
                 lambda: ReportPart(ls_sends=1, relayed=3)],
        send=lambda r: None,
    )  # fmt: skip
    r = rep.report()
    assert (r.ls_sends, r.bulk_bytes, r.relayed, r.ls_flows) == (6, 7, 3, 2)
    (lat,) = r.latency
    assert (lat.sender, lat.received, lat.late) == ("leader", 4, 1)
    assert lat.p50_us == 2500 and 38_000 < lat.p99_us <= 40_000


def test_the_table_shows_holder_queue_and_rows() -> None:
    board = TeamBoard(["r1", "r2"])
    board.record("r1", 0, report(0, 0, 0, flows=[FlowSummary("10.0.0.1:29500", 9, True)]))
    status = TeamStatus(("r1",), ("r2",), tuple(board.rows(0, {"r1"})))
    console = Console(record=True, width=160)
    console.print(status_table(status, "team t"))
    text = console.export_text()
    assert "permit: r1   waiting: r2" in text
    assert "10.0.0.1:29500*" in text and "r2 (gone)" in text
    assert status.to_json()["robots"][0]["intercepted"][0]["dest"] == "10.0.0.1:29500"


def test_a_leader_that_is_not_there_is_named_with_where_its_address_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "k.hex").write_text("ab" * 32)
    (tmp_path / "k.hex").chmod(0o600)
    team = tmp_path / "ok.toml"
    team.write_text('[team]\nrobots = ["a"]\nkey_file = "k.hex"\n'
                    '[agent]\nleader = "127.0.0.1:9"\n')  # fmt: skip
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run_cli(capsys, "top", "--config", str(team), "--leader",
                           f"127.0.0.1:{port}", "--count", "1")  # fmt: skip
    assert code == 1
    assert f"leader 127.0.0.1:{port} (from --leader): connection refused" in err
    assert "Errno" not in err and "ok.toml" not in err
    code, _, err = run_cli(capsys, "top", "--config", str(team), "--count", "1")
    assert code == 1 and f"(from agent.leader in {team})" in err


def test_a_gone_or_silent_robot_shows_no_rate_and_no_connections() -> None:
    board = TeamBoard(["r1", "r2"])
    flows = [FlowSummary("10.0.0.1:9000", 5, True)]
    for robot in ("r1", "r2"):
        board.record(robot, 10 * S, report(ls=300, bulk=10_000_000, paused_ns=0, flows=flows))
        board.record(robot, 11 * S, report(ls=330, bulk=16_250_000, paused_ns=0, flows=flows))
    now = 11 * S + 500_000_000
    rows = {r.robot: r for r in board.rows(now, {"r1", "r2"})}
    assert rows["r1"].bulk_mbps == 50.0 and rows["r1"].intercepted  # reporting: its rate
    rows = {r.robot: r for r in board.rows(now, {"r1"})}  # r2's agent left
    gone = rows["r2"]
    assert (gone.mode, gone.bulk_mbps, gone.ls_rate_hz, gone.intercepted) == ("gone", 0.0, 0.0, [])
    later = {r.robot: r for r in board.rows(now + 3 * S, {"r1", "r2"})}  # silent for 3.5 s
    assert later["r1"].bulk_mbps == 0.0 and later["r1"].intercepted == []


def test_top_piped_prints_the_whole_table(capsys: pytest.CaptureFixture[str]) -> None:
    from coorp.cli._runtime._watch import _console

    board = TeamBoard(["a-robot-with-a-long-name", "r2"])
    flows = [FlowSummary(f"10.0.0.{i}:29500", 9, True) for i in range(3)]
    board.record("a-robot-with-a-long-name", 0, report(0, 0, 0, flows=flows))
    status = TeamStatus((), (), tuple(board.rows(0, {"a-robot-with-a-long-name"})))
    _console().print(status_table(status, "team t"))  # stdout is not a terminal here
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if "a-robot-with-a-long-name" in ln)
    assert "10.0.0.0:29500*, 10.0.0.1:29500*, 10.0.0.2:29500*" in row  # not cut at 80
    assert len(row) > 80
