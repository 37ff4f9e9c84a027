"""Practice at scale against the stub: 2,000 questions x G=8, 20 ms latency, concurrency 128, SQLite and Postgres.

    python benchmarks/speed/practice_scale.py [--questions 2000] [--group 8] [--batch 250] [--latency 0.02]
                                        [--db sqlite postgres] [--out practice_scale]

Reports rollouts/s, resident memory after every step (it must not grow with the number of steps), the
share of wall time spent inside database transactions, process CPU time / wall time, and where the wall
time goes. The LLM's own share is `llm_ideal_s` = calls x latency / concurrency, the wall time if nothing
but the LLM took any; the rest ("outside waiting for the LLM") is split, approximately, by timing the same
number of calls at the same concurrency against the same stub two more ways:
  - transport: bare aiohttp POSTs, the least CPU any Python client needs for them (`transport_floor_s`);
  - client layer: bare `LLMClient.chat` calls, i.e. our slots, retries, usage and spans (`client_floor_s`);
  - orchestrator: everything else (rows, judging, recording, learner, scheduling): wall - client floor.
The agent always answers wrong here, so every group is skipped by the learner: this measures the rollout,
judging and storage path, which is what grows with the data.
"""

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import client_floor, result_name, stub_practice, stub_process, transport_floor, write_result  # noqa: E402

from utu.cli import tune_gc  # noqa: E402
from utu.db import Database  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOAL = 0.10  # wall time outside waiting for the LLM, as a share


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class TimedDatabase(Database):
    """Counts the wall time during which at least one write transaction is open (overlaps counted once)."""

    seconds = 0.0
    _open = 0
    _since = 0.0

    def transaction(self):
        inner = super().transaction()
        db = self

        class Timed:
            async def __aenter__(self):
                if db._open == 0:
                    db._since = time.perf_counter()
                db._open += 1
                return await inner.__aenter__()

            async def __aexit__(self, *exc):
                try:
                    return await inner.__aexit__(*exc)
                finally:
                    db._open -= 1
                    if db._open == 0:
                        db.seconds += time.perf_counter() - db._since

        return Timed()


async def run(url: str, db_url: str, args) -> dict:
    async with TimedDatabase(db_url) as db:
        practice, clients = await stub_practice(
            url, db, "Scale", args.questions, args.group, args.batch, args.concurrency
        )
        memory: list[float] = []
        original = practice.practice_step

        async def step_and_measure(*a, **kw):
            out = await original(*a, **kw)
            memory.append(round(rss_mb(), 1))
            return out

        practice.practice_step = step_and_measure
        cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await practice.run()
        wall = time.perf_counter() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        calls = practice.usage.total().calls
        await clients.aclose()
    ideal = calls * args.latency / args.concurrency
    transport = await transport_floor(url, calls, args.concurrency)
    client_only = await client_floor(url, calls, args.concurrency)
    outside = max(0.0, wall - ideal) / wall
    rollouts = args.questions * args.group
    return {
        "rollouts": rollouts,
        "wall_s": round(wall, 1),
        "rollouts_per_s": round(rollouts / wall, 1),
        "rss_mb_after_each_step": memory,
        "rss_growth_first_to_last_step_mb": round(memory[-1] - memory[0], 1),
        "db_time_share": round(db.seconds / wall, 3),
        "cpu_time_over_wall": round(cpu / wall, 3),
        "llm_calls": calls,
        "llm_ideal_s": round(ideal, 2),
        "transport_floor_s": round(transport, 2),
        "client_floor_s": round(client_only, 2),
        "wall_share": {
            "llm_latency": round(ideal / wall, 3),
            "transport": round(max(0.0, transport - ideal) / wall, 3),
            "client_layer": round(max(0.0, client_only - transport) / wall, 3),
            "orchestrator": round(max(0.0, wall - client_only) / wall, 3),
        },
        "share_outside_waiting_for_llm": round(outside, 3),
        # What even bare aiohttp with no orchestrator leaves outside the LLM's latency on this machine.
        "transport_alone_share_outside": round(max(0.0, transport - ideal) / transport, 3),
        "met": outside < GOAL,
    }


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument(
        "--out", type=result_name, default="practice_scale", help="result name: benchmarks/results/<out>.json"
    )
    args = parser.parse_args()
    tune_gc()  # as the scripts do (utu.cli.run)
    results = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        stub_process("--reply", "The answer is \\boxed{0}.", "--latency", str(args.latency)) as url,
    ):
        for kind in args.db:
            if kind == "sqlite":
                db_url = f"sqlite:///{tmp}/scale.db"
            else:
                db_url = subprocess.run(
                    ["bash", str(ROOT / "scripts/dev/postgres.sh"), "start"], capture_output=True, text=True, check=True
                ).stdout.strip()
            results[kind] = await run(url, db_url, args)
            print(kind, results[kind], flush=True)
    write_result(
        args.out,
        {
            "questions": args.questions,
            "group_size": args.group,
            "batch_size": args.batch,
            "latency_s": args.latency,
            "concurrency": args.concurrency,
            "results": results,
            "goals": "memory does not grow with steps; share_outside_waiting_for_llm < 0.10",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
