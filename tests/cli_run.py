"""Running ``coorp`` in-process in tests, through the real entry point."""

from __future__ import annotations

import pytest

from coorp.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``coorp <args>``: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), out, err
