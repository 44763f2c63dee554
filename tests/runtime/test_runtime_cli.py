"""``coorp leader`` / ``coorp agent`` as processes on loopback, and their errors."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_netns import Proc

_coorp = Path(sys.executable).with_name("coorp")
COORP = (
    [str(_coorp)]
    if _coorp.exists()
    else [sys.executable, "-c", "from coorp.cli import main; main()"]
)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for p in started:
            p.kill()


def start(procs: list[Proc], *args: str, logs_to_stdout: bool = False) -> Proc:
    err = subprocess.STDOUT if logs_to_stdout else subprocess.PIPE
    p = Proc(args[0], subprocess.Popen([*COORP, *args], stdout=subprocess.PIPE, stderr=err))
    procs.append(p)
    return p


def team(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "team.key").write_text("a1" * 32)
    (tmp_path / "team.key").chmod(0o600)
    path = tmp_path / "team.toml"
    path.write_text(
        '[team]\nrobots = ["ld", "r1"]\nkey_file = "team.key"\nteam_key_fallback = true\n'
        '[leader]\nlisten = "127.0.0.1:0"\n' + extra
    )
    return path


def test_bad_config_and_flags_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coorp.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('[team]\nrobots = ["a"]\n[leader]\nlimit = 2\n')
    for args in (
        ["leader", "--config", str(bad)],
        ["leader", "--config", str(tmp_path / "missing.toml")],
        ["agent", "--config", str(team(tmp_path)), "--robot", "nobody"],
        ["agent", "--config", str(team(tmp_path)), "--robot", "r1", "--send", "x"],
        ["leader", "--config", str(team(tmp_path)), "--listen", "nonsense"],
    ):
        logger = logging.getLogger("coorp")
        before = list(logger.handlers)
        try:
            with pytest.raises(SystemExit) as exit_:
                main(args)
        finally:
            # The CLI attaches a handler to this (captured) stderr; do not leak it.
            for h in logger.handlers[len(before) :]:
                logger.removeHandler(h)
        err = capsys.readouterr().err
        assert exit_.value.code == 2, (args, err)
        assert "Traceback" not in err and err.startswith("error:")


def test_leader_and_agents_send_a_file(tmp_path: Path, procs: list[Proc]) -> None:
    cfg = team(tmp_path)
    leader = start(procs, "leader", "--config", str(cfg))
    addr = leader.expect("coorp leader: serving", 30).rsplit(" ", 1)[1]
    rx = start(
        procs,
        "agent",
        "--config",
        str(cfg),
        "--robot",
        "ld",
        "--leader",
        addr,
        "--listen",
        "127.0.0.1:0",
        "--save-dir",
        str(tmp_path / "got"),
        "--control",
        str(tmp_path / "ld.sock"),
        logs_to_stdout=True,
    )
    line = rx.expect("coorp agent: ld (coordinated) receiving on", 30)
    inbox = line.rsplit(" ", 1)[1]
    src = tmp_path / "params.bin"
    src.write_bytes(bytes(range(256)) * 20_000)
    r = subprocess.run(
        [
            *COORP,
            "agent",
            "--config",
            str(cfg),
            "--robot",
            "r1",
            "--leader",
            addr,
            "--send",
            str(src),
            "--to",
            inbox,
            "--control",
            str(tmp_path / "r1.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "sent 5120000 bytes" in r.stdout
    status = subprocess.run(
        [*COORP, "leader", "--config", str(cfg), "--listen", addr, "--status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and "grants" in status.stdout
    # The sender returns once the receiver has the message; the agent logs it and
    # writes the file in one step: after that line, stopping it cannot lose the file.
    rx.expect("bulk r1/file #1: 5120000 bytes", 30, anywhere=True)
    rx.popen.terminate()
    rx.popen.wait(timeout=20)
    saved = list((tmp_path / "got").glob("r1-file-1-*.bin"))
    assert len(saved) == 1 and saved[0].read_bytes() == src.read_bytes()


def test_send_hands_the_file_to_the_running_agent_and_ls_reports_round_trips(
    tmp_path: Path, procs: list[Proc]
) -> None:
    cfg = team(tmp_path)
    leader = start(procs, "leader", "--config", str(cfg))
    addr = leader.expect("coorp leader: serving", 30).rsplit(" ", 1)[1]
    common = ["--config", str(cfg), "--leader", addr, "--listen", "127.0.0.1:0"]
    rx = start(procs, "agent", *common, "--robot", "ld", "--save-dir", str(tmp_path / "got"),
               "--control", str(tmp_path / "ld.sock"), logs_to_stdout=True)  # fmt: skip
    inbox = rx.expect("coorp agent: ld (coordinated) receiving on", 30).rsplit(" ", 1)[1]
    r1 = start(procs, "agent", *common, "--robot", "r1", "--control", str(tmp_path / "r1.sock"),
               "--ls", f"50:2000:{inbox}", "--duration", "6", logs_to_stdout=True)  # fmt: skip
    r1.expect("coorp agent: control socket", 30, anywhere=True)
    src = tmp_path / "params.bin"
    src.write_bytes(bytes(range(256)) * 4_000)
    r = subprocess.run(
        [*COORP, "send", str(src), "--to", inbox, "--config", str(cfg), "--robot", "r1",
         "--control", str(tmp_path / "r1.sock")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "coorp send: sent 1024000 bytes" in r.stdout
    rx.expect("bulk r1/send-0 #1: 1024000 bytes", 30, anywhere=True)
    total = r1.expect("coorp ls: total:", 30)
    echoes = int(total.split("total: ")[1].split()[0])
    assert echoes >= 1 and "round trip p50" in total
    # The leader's health line, asked at the configured address.
    status = subprocess.run(
        [*COORP, "leader", "--config", str(cfg), "--listen", addr, "--status"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.stdout.startswith("health: accepting"), status.stdout


def test_bad_team_file_is_called_a_team_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coorp.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('[team]\nrobots = ["a"]\n[leader]\nlimit = 2\n')
    with pytest.raises(SystemExit):
        main(["leader", "--config", str(bad)])
    err = capsys.readouterr().err
    assert f"invalid team file {bad}" in err and "leader.limit" in err
    logging.getLogger("coorp").handlers.clear()
