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
