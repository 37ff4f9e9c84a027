"""Benchmark results remember what they measured and are never overwritten (benchmarks/_common.py)."""

import json
import subprocess
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import write_result  # noqa: E402


def test_a_result_records_its_commit_command_and_machine_and_an_earlier_one_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/speed.py", "--calls", "10"])
    first = write_result("speed", {"ratio": 1.5}, results=tmp_path)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    stored = json.loads(first.read_text())
    assert stored["commit"] == head.strip() and isinstance(stored["dirty"], bool)
    assert stored["command"] == ["speed.py", "--calls", "10"] and stored["machine"]["cpus"] >= 1
    assert stored["ratio"] == 1.5
    write_result("speed", {"ratio": 1.7}, results=tmp_path)
    write_result("speed", {"ratio": 1.9}, results=tmp_path)  # within the same second as the one before
    kept = sorted(json.loads(p.read_text())["ratio"] for p in (tmp_path / "history" / "speed").iterdir())
    assert kept == [1.5, 1.7] and json.loads(first.read_text())["ratio"] == 1.9


RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]


def cited_text() -> str:
    return "\n".join(page.read_text() for page in PAGES)


def current_results() -> list:
    return sorted(RESULTS.glob("*.json")) + sorted((RESULTS / "learning_suite").rglob("*.json"))


def test_every_result_records_its_commit_and_command():
    missing = [p.name for p in current_results() if not {"commit", "command"} <= json.loads(p.read_text()).keys()]
    assert not missing, missing


def test_every_result_file_the_pages_cite_exists():
    import re

    cited = set(re.findall(r"benchmarks/results/([\w./-]+\.json)", cited_text()))
    assert cited, "the pages cite no result file"
    assert not [name for name in cited if not (RESULTS / name).exists()]


def test_every_result_is_cited_by_its_name_or_its_family():
    """A result no page reads is an orphan: cite it or remove it (git keeps it)."""
    import re

    text = cited_text()
    families = {m.replace("<task>", "") for m in re.findall(r"(\w+_<task>)\.json", text)}
    orphans = [
        p.name
        for p in sorted(RESULTS.glob("*.json"))
        if p.stem not in text and not any(p.stem.startswith(f) for f in families)
    ]
    assert not orphans, orphans
