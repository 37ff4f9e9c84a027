"""Wall time of one practice step against the critical path that latency and concurrency allow.

    python benchmarks/speed/practice_step.py [--questions 64] [--group 5] [--latency 0.05 0.5] [--jitter 1.0]
                                             [--out NAME]

The stub (its own process) answers every request after a latency; the agent and the learner share one
client limited to `--concurrency` requests in flight. The critical path is the larger of the longest chain
of dependent calls (rollout -> summary -> advantage -> group update -> consolidation: 5 x latency) and the
time to push all calls through the concurrency limit (ceil(calls / concurrency) x latency). Each step runs
with and without pipelining (learner stages of a group starting as soon as it is judged), alternating.
Goal: within 1.2x of the critical path.

Scenarios: each fixed `--latency` (50 ms: the client's CPU is the limit on 2 cores; 500 ms: a fast real
API), and a straggler run (log-normal latency, sigma `--jitter`) where pipelining shows its gain: learner
stages run while the batch's slowest rollouts are still out. At a fixed latency the benchmark also measures a
*client floor*: the same number of bare `LLMClient.chat` calls at the same concurrency, with no
orchestration; wall / floor isolates what the orchestrator (rows, judging, learner logic) adds. And an *SDK
floor*: the same calls through a bare `openai.AsyncOpenAI`, all independent: no client on that SDK does better.
"""

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import client_floor, result_name, sdk_floor, stub_practice, stub_process, write_result  # noqa: E402

from utu.cli import tune_gc  # noqa: E402
from utu.db import Database  # noqa: E402

GOAL = 1.2
REPLIES = Path(__file__).resolve().parent / "practice_replies.py"


async def one_step(base_url: str, args, pipeline: bool, workdir: Path) -> tuple[float, int]:
    async with Database(f"sqlite:///{workdir / f'bench-{pipeline}-{time.monotonic_ns()}.db'}") as db:
        practice, clients = await stub_practice(
            base_url, db, "Bench", args.questions, args.group, args.questions, args.concurrency, pipeline
        )
        start = time.perf_counter()
        await practice.run()
        elapsed = time.perf_counter() - start
        await clients.aclose()
    return elapsed, practice.usage.total().calls


async def scenario(args, latency: float, jitter: float, tmp: Path) -> dict:
    """Pipelined and batch-synchronous steps (and, at a fixed latency, the client and SDK floors), alternating."""
    times: dict[bool, list[float]] = {True: [], False: []}
    floors: list[float] = []
    sdk_floors: list[float] = []
    calls = 0
    stub_args = ["--reply-fn", f"{REPLIES}:reply", "--latency", str(latency), "--jitter", str(jitter)]
    with stub_process(*stub_args) as url:
        for _ in range(args.rounds):
            for pipeline in (True, False):
                elapsed, calls = await one_step(url, args, pipeline, tmp)
                times[pipeline].append(elapsed)
            if not jitter:
                floors.append(await client_floor(url, calls, args.concurrency))
                sdk_floors.append(await sdk_floor(url, calls, args.concurrency))
    with_p, without_p = statistics.median(times[True]), statistics.median(times[False])
    result = {
        "latency_s": latency,
        "jitter_sigma": jitter,
        "llm_calls_per_step": calls,
        "pipelined_s": [round(t, 3) for t in times[True]],
        "batch_synchronous_s": [round(t, 3) for t in times[False]],
        "speedup_of_pipelining": round(without_p / with_p, 3),
    }
    if jitter:  # stragglers: no fixed critical path; what matters is how much pipelining gains
        return result
    # The longest chain of dependent calls (rollout -> summary -> advantage -> group update -> consolidation),
    # or pushing all calls through the concurrency limit, whichever is longer.
    critical = max(5 * latency, math.ceil(calls / args.concurrency) * latency)
    floor, sdk = statistics.median(floors), statistics.median(sdk_floors)
    return result | {
        "critical_path_s": round(critical, 3),
        "ratio_pipelined_to_critical": round(with_p / critical, 3),
        "ratio_batch_synchronous_to_critical": round(without_p / critical, 3),
        "client_floor_s": [round(t, 3) for t in floors],
        "ratio_client_floor_to_critical": round(floor / critical, 3),
        "ratio_pipelined_to_client_floor": round(with_p / floor, 3),
        "sdk_floor_s": [round(t, 3) for t in sdk_floors],
        "ratio_sdk_floor_to_critical": round(sdk / critical, 3),
        "met": with_p / critical <= GOAL,
    }


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--group", type=int, default=5)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.05, 0.5], help="fixed latencies to run")
    parser.add_argument("--jitter", type=float, default=1.0, help="sigma of the straggler run (0: skip it)")
    parser.add_argument("--jitter-latency", type=float, default=0.5, help="median latency of the straggler run")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--out", type=result_name, default="practice_step", help="result file name under benchmarks/results/"
    )
    args = parser.parse_args()
    tune_gc()  # as the scripts do (utu.cli.run)
    scenarios = []
    with tempfile.TemporaryDirectory() as tmp:
        for latency in args.latency:
            scenarios.append(await scenario(args, latency, 0.0, Path(tmp)))
        if args.jitter:
            scenarios.append(await scenario(args, args.jitter_latency, args.jitter, Path(tmp)))
    write_result(
        args.out,
        {
            "questions": args.questions,
            "group_size": args.group,
            "concurrency": args.concurrency,
            "scenarios": scenarios,
            "goal": f"ratio_pipelined_to_critical <= {GOAL} at a fixed latency",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
