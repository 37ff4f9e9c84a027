"""The numbers README quotes from a result file are read from that file: a rerun that changes them, or an edit
that mistypes one, fails here instead of going out."""

import json
import re

from tests.conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"
# README's task name -> the result file its row quotes
ROWS = {"MixedUnits": "mixed_units", "Portions": "portions", "Decimals": "decimals"}


def readme_rows() -> dict[str, list[str]]:
    section = (ROOT / "README.md").read_text().split("## Does practice help?", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[0].split(":")[0]
        if name in ROWS:
            rows[name] = cells[1:]
    return rows


def test_the_learning_table_quotes_its_result_files():
    rows = readme_rows()
    assert set(rows) == set(ROWS), "README's learning table lost a row: update ROWS with it"
    for name, task in ROWS.items():
        result = json.loads((RESULTS / f"learning_efficiency_{task}.json").read_text())
        gain = result["enhanced_minus_baseline"]
        low, high = gain["ci95"]
        expected = [
            f"{result['baseline']['mean']:.3f}",
            f"{result['reference']['mean']:.3f}",
            f"{result['enhanced']['mean']:.3f}",
            f"**{gain['mean']:+.3f} ({low:+.3f} to {high:+.3f})**",
            f"{result['learning_efficiency']:.2f}",
        ]
        assert rows[name] == expected, name


def test_the_check_reads_the_row_it_claims():
    rows = readme_rows()
    assert re.fullmatch(r"\d\.\d{3}", rows["Portions"][0])


def test_the_router_s_gains_are_its_result_files():
    line = next(line for line in (ROOT / "README.md").read_text().splitlines() if "a learned tool router" in line)
    for task in ("unit_conversion", "units_or_word_problems"):
        result = json.loads((RESULTS / f"tool_router_{task}.json").read_text())
        gain = result["router_minus_alone_pooled_over_seeds"]["difference"]
        assert f"{gain:+.2f} " in line, (task, gain)
