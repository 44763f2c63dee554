"""``benchmarks/ns3_crosscheck.py --mixed-destinations``: its scenarios and its JSON (the
coorp side only; ns-3 itself is an optional extra, run by hand: docs/validation.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ns3_crosscheck as xc


def test_mixed_destinations_json_has_exactly_the_cross_checked_rows(tmp_path: Path) -> None:
    out = tmp_path / "mixed.json"
    argv = ["--mixed-destinations", "--no-ns3", "--cases", "ap-to-2,sta-to-2-peers",
            "--rings", "per_ac,shared", "--duration", "0.05", "--warmup", "0.02",
            "--json", str(out)]  # fmt: skip
    assert xc.main(argv) == 0
    doc = json.loads(out.read_text())
    assert list(doc) == ["rows"]
    # One row per case, for the per-AC ring (ns-3's model) only; ns-3 did not run.
    assert [r["case"] for r in doc["rows"]] == ["ap-to-2", "sta-to-2-peers"]
    for r in doc["rows"]:
        assert list(r) == ["case", "coorp_mbps", "ns3_mbps"]
        assert r["ns3_mbps"] is None
        # A lone sender with a 64-MPDU A-MPDU per receiver: near N = 1 saturation.
        lone = xc.bianchi_mbps(xc.Config(n=1))
        assert r["coorp_mbps"] == pytest.approx(lone, rel=0.05)


def test_mixed_scenarios_interleave_destinations_in_one_queue() -> None:
    cfg = xc.Config(n=1)
    case = xc.MIXED_CASES["ap-to-4+4-up"]
    sc = xc.mixed_scenario(case, cfg, "per_receiver_tid", "per_ac")
    assert sc.hw_queue.capacity_packets == xc.MIXED_QUEUE_PACKETS == 500
    ap_flows = [f for f in sc.flows if f.src == "ap"]
    assert sorted(f.dst for f in ap_flows) == ["sta0", "sta1", "sta2", "sta3"]
    # Every flow offers the same rate, twice a lone sender's share, 1 µs apart.
    assert {f.period_us for f in sc.flows} == {
        cfg.payload_bytes * 8 / (2 * xc.bianchi_mbps(cfg) / 8)
    }
    assert [f.start_us for f in sc.flows] == [float(k) for k in range(8)]
    # Before issue 36 the AP sent one packet per access: far less got through.
    old = xc.run_coorp_mixed(xc.MIXED_CASES["ap-to-2"], cfg, "consecutive", "per_ac", 0.05, 0.02)
    new = xc.run_coorp_mixed(
        xc.MIXED_CASES["ap-to-2"], cfg, "per_receiver_tid", "per_ac", 0.05, 0.02
    )
    assert new.mbps > 5 * old.mbps


def test_unknown_cases_and_rings_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--cases", "ap-to-3"], ["--rings", "fifo"]):
        with pytest.raises(SystemExit) as exc:
            xc.main(["--mixed-destinations", "--no-ns3", *bad])
        assert exc.value.code == 2
        assert "choose from" in capsys.readouterr().err
