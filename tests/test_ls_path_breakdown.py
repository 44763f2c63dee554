"""benchmarks/ls_path_breakdown.py: every message is stamped at the four points and its
one-way time splits into them; a raw socket has no pre-send or accept part."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("ls_path_breakdown", _BENCH / "ls_path_breakdown.py")
assert _spec is not None and _spec.loader is not None
ls_path_breakdown = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ls_path_breakdown)


def test_the_split_adds_up_and_raw_has_only_the_kernel_part(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    assert (
        ls_path_breakdown.main(
            ["--gaps-ms", "1", "--count", "30", "--runs", "1", "--json", str(out)]
        )
        == 0
    )
    rows = {r["kind"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"raw", "coorp"}
    for row in rows.values():
        assert row["received"] == 1.0  # every message on loopback arrived and was stamped
        assert row["kernel+wake"] > 0
    assert rows["raw"]["pre-send"] == 0 and rows["raw"]["accept"] == 0
    assert rows["coorp"]["pre-send"] > 0 and rows["coorp"]["accept"] > 0


def test_the_decoder_comparison_times_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths decode every datagram (a rejected one would raise), and the fast
    path's datagrams really skip the full parse."""
    from coorp.runtime.inbox import _lsdecoder as _receiver

    parsed: list[object] = []
    full_parse = _receiver.split_datagram

    def counting(data: object, **kwargs: bool) -> object:
        parsed.append(type(data))
        return full_parse(data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_receiver, "split_datagram", counting)
    got = ls_path_breakdown.decoder_ab(0.0, 5, 100)
    assert set(got) == {"fast path", "full parse"} and min(got.values()) > 0
    assert parsed == [bytearray] * 5


def test_the_cold_costs_time_a_copy_and_a_mac() -> None:
    got = ls_path_breakdown.cold_costs(0.0, 5, 1000)
    assert set(got) == {"copy", "MAC"} and min(got.values()) > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--gaps-ms", "x"], "--gaps-ms 'x'"), (["--size", "2"], "--size within 4..1400")],
)
def test_bad_flags_are_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        ls_path_breakdown.main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err
