"""Added wall time of tracing to a live Phoenix, on one practice step against the stub.

    python benchmarks/speed/tracing_overhead.py [--questions 32] [--latency 0.05 0.5] [--rounds 5]

Each measurement runs in a fresh process (the tracer provider is global to a process), alternating
tracing off / on, against one stub and one local Phoenix started here, after `--settle` seconds of quiet
so that Phoenix's ingestion of the previous run does not land in the next one. Also reported: the CPU time
of the run's own process, which is the cost a remote Phoenix would leave. Goal: at most 5% added wall time.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import stub_process, write_result  # noqa: E402

GOAL = 0.05
HERE = Path(__file__).resolve().parent


def measure(url: str, questions: int, endpoint: str | None) -> tuple[float, float]:
    """One practice step in a child process (this script with --child); returns its wall and CPU time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
    if endpoint:
        env |= {"PHOENIX_ENDPOINT": endpoint, "PHOENIX_PROJECT_NAME": "bench"}
    command = [sys.executable, __file__, "--child", url, "--questions", str(questions)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def child(url: str, questions: int) -> None:
    import asyncio

    from practice_step import one_step

    from utu.cli import tune_gc
    from utu.tracing import setup_tracing, shutdown_tracing

    tune_gc()  # as the scripts do (utu.cli.run)
    setup_tracing()
    step = argparse.Namespace(questions=questions, group=5, concurrency=64)
    cpu = time.process_time()
    elapsed, _ = asyncio.run(one_step(url, step, True, Path(tempfile.mkdtemp())))
    cpu = time.process_time() - cpu
    shutdown_tracing()
    print(elapsed, cpu)


def scenario(args, latency: float, endpoint: str) -> dict:
    off, on = [], []
    with stub_process("--reply-fn", f"{HERE / 'practice_replies.py'}:reply", "--latency", str(latency)) as url:
        for _ in range(args.rounds):
            for runs, target in ((off, None), (on, endpoint)):
                time.sleep(args.settle)
                runs.append(measure(url, args.questions, target))
    wall = {name: [w for w, _ in runs] for name, runs in (("off", off), ("on", on))}
    cpu = {name: [c for _, c in runs] for name, runs in (("off", off), ("on", on))}
    added = statistics.median(wall["on"]) / statistics.median(wall["off"]) - 1
    added_cpu = statistics.median(cpu["on"]) / statistics.median(cpu["off"]) - 1
    return {
        "latency_s": latency,
        "tracing_off_s": [round(t, 3) for t in wall["off"]],
        "tracing_on_s": [round(t, 3) for t in wall["on"]],
        "process_cpu_off_s": [round(t, 3) for t in cpu["off"]],
        "process_cpu_on_s": [round(t, 3) for t in cpu["on"]],
        "added_wall_time": round(added, 3),
        "added_process_cpu": round(added_cpu, 3),
        "met": added <= GOAL,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.05, 0.5])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of quiet before each measurement")
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
        try:
            scenarios = [scenario(args, latency, endpoint) for latency in args.latency]
        finally:
            phoenix.SERVER.stop()
    write_result(
        "tracing_overhead",
        {
            "questions": args.questions,
            "group_size": 5,
            "settle_s": args.settle,
            "scenarios": scenarios,
            "goal": f"added_wall_time <= {GOAL}",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
