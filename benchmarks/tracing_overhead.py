"""Added wall time of tracing to a live Phoenix, on one practice step against the stub.

    python benchmarks/tracing_overhead.py [--questions 32] [--rounds 3]

Each measurement runs in a fresh process (the tracer provider is global to a process), alternating
tracing off / on, against one stub and one local Phoenix started here. Goal: at most 5% added wall time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import stub_process, write_result  # noqa: E402

GOAL = 0.05
HERE = Path(__file__).resolve().parent


def measure(url: str, questions: int, endpoint: str | None) -> float:
    """One practice step in a child process; returns its wall time."""
    code = (
        "import asyncio, json, sys, tempfile; from pathlib import Path; sys.path.insert(0, %r)\n"
        "from practice_step import one_step\n"
        "from utu.tracing import setup_tracing, shutdown_tracing\n"
        "setup_tracing()\n"
        "class A: questions=%d; group=5; concurrency=64\n"
        "t, _ = asyncio.run(one_step(%r, A, True, Path(tempfile.mkdtemp())))\n"
        "shutdown_tracing()\n"
        "print(json.dumps(t))\n"
    ) % (str(HERE), questions, url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
    if endpoint:
        env |= {"PHOENIX_ENDPOINT": endpoint, "PHOENIX_PROJECT_NAME": "bench"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from utu.tracing import phoenix

    with tempfile.TemporaryDirectory() as state:
        os.environ["UTU_STATE_DIR"] = state
        server, _ = phoenix.serve()
        _, endpoint = phoenix.endpoints(server)
        off, on = [], []
        try:
            with stub_process("--reply-fn", f"{HERE / 'practice_replies.py'}:reply", "--latency", str(args.latency)) as url:
                for _ in range(args.rounds):
                    off.append(measure(url, args.questions, None))
                    on.append(measure(url, args.questions, endpoint))
        finally:
            phoenix.SERVER.stop()
    added = statistics.median(on) / statistics.median(off) - 1
    write_result("tracing_overhead", {
        "questions": args.questions, "group_size": 5, "latency_s": args.latency,
        "tracing_off_s": [round(t, 3) for t in off], "tracing_on_s": [round(t, 3) for t in on],
        "added_wall_time": round(added, 3), "goal": f"added_wall_time <= {GOAL}", "met": added <= GOAL,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
