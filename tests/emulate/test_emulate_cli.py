"""``coorp emulate``'s bad input: a clear error naming the flag and what is allowed,
exit code 2, before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_run import run_cli


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "no such file and no built-in scenario"),
        (["crl-5", "--at", "zz", "--", "true"], "--at 'zz' is not a station; stations: ['leader'"),
        (["crl-5", "--at", "r1"], "--at STATION needs a command after --"),
        (["crl-5", "--run", "r1"], "--run 'r1': give STATION=COMMAND"),
        (["crl-5", "--run", "zz=true"], "'zz' is not a station"),
        (["crl-5", "--set", "phy.width_mhz=33"], "phy.width_mhz"),
        (["crl-5", "--rt-priority", "100"], "--rt-priority 100: allowed 0-99"),
        (["crl-5", "--duration", "-1"], "--duration -1.0: must be > 0"),
        (["crl-5", "--queue-packets", "0"], "--queue-packets 0: must be >= 1"),
        (["crl-5", "--subnet", "10.77", "--duration", "1"], "three octets"),
        (["crl-5", "--ap", "zz", "--duration", "1"], "--ap 'zz' is not a station"),
    ],
)
def test_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, "emulate", *args)
    assert code == 2, err
    assert message in " ".join(err.split()), err
    assert "Traceback" not in err


def test_a_json_file_in_a_missing_folder_is_refused_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "emulate", "crl-5", "--json", str(tmp_path / "no" / "r.json"))
    assert code == 2 and "does not exist" in err
