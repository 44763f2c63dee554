"""docs/simulator.md states numbers the code must agree with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coorp.phy import SIFS_NS, SLOT_NS
from coorp.scenario import AccessCategory
from coorp.sim.timing import STANDARD_EDCA, aifs_ns

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_edca_table_matches_the_code(doc: str) -> None:
    rows = re.findall(
        r"^\| (BK|BE|VI|VO) \| (\d+) \| (\d+) µs \| (\d+) \| (\d+) \| ([^|]+) \| (on|off)",
        doc, flags=re.M,
    )  # fmt: skip
    assert {r[0] for r in rows} == {"BK", "BE", "VI", "VO"}
    for ac, aifsn, aifs_us, cw_min, cw_max, txop, agg in rows:
        p = STANDARD_EDCA[AccessCategory(ac)]
        assert (p.aifsn, p.cw_min, p.cw_max) == (int(aifsn), int(cw_min), int(cw_max))
        assert aifs_ns(p.aifsn) == int(aifs_us) * 1000
        limit = 0 if txop.strip() == "—" else round(float(txop.split()[0]) * 1e6)
        assert p.txop_limit_ns == limit
        assert p.aggregation == (agg == "on")


def test_interframe_spaces(doc: str) -> None:
    assert (SIFS_NS, SLOT_NS) == (16_000, 9_000)
    assert "SIFS = 16 µs, slot = 9 µs" in doc


def test_known_deviation_tests_exist(doc: str) -> None:
    section = doc.split("## Known deviations", 1)[1].split("\n## ", 1)[0]
    root = DOC.parents[1]
    for path in re.findall(r"`(tests/[\w/]+\.py)`", section):
        text = (root / path).read_text(encoding="utf-8")
        assert "xfail(" in text and "strict=True" in text, path
