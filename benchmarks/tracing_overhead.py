"""Added wall time of tracing to a live Phoenix, on one practice step against the stub.

    python benchmarks/tracing_overhead.py [--questions 32] [--rounds 3]

Each measurement runs in a fresh process (the tracer provider is global to a process), alternating
tracing off / on, against one stub and one local Phoenix started here. Goal: at most 5% added wall time.
"""

import argparse
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
    """One practice step in a child process (this script with --child); returns its wall time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
    if endpoint:
        env |= {"PHOENIX_ENDPOINT": endpoint, "PHOENIX_PROJECT_NAME": "bench"}
    command = [sys.executable, __file__, "--child", url, "--questions", str(questions)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def child(url: str, questions: int) -> None:
    import asyncio

    from practice_step import one_step

    from utu.tracing import setup_tracing, shutdown_tracing

    setup_tracing()
    step = argparse.Namespace(questions=questions, group=5, concurrency=64)
    elapsed, _ = asyncio.run(one_step(url, step, True, Path(tempfile.mkdtemp())))
    shutdown_tracing()
    print(elapsed)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", metavar="STUB_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.questions)
        return 0
    from utu.tracing import phoenix

    with tempfile.TemporaryDirectory() as state:
        os.environ["UTU_STATE_DIR"] = state
        server, _ = phoenix.serve()
        _, endpoint = phoenix.endpoints(server)
        off, on = [], []
        try:
            with stub_process(
                "--reply-fn", f"{HERE / 'practice_replies.py'}:reply", "--latency", str(args.latency)
            ) as url:
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
