"""Helpers shared by the benchmarks: a stub LLM in its own process, and writing results as JSON."""

import json
import platform
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@contextmanager
def stub_process(*args: str):
    """Start `python -m utu.llm.stub` on a free port in a separate process; yield its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "utu.llm.stub", "--port", "0", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+/v1)", line)
        if not match:
            raise RuntimeError(f"stub did not start: {line!r}")
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    result = {
        "benchmark": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        **result,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return path


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out
