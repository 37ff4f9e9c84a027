"""Latency that `python -m utu.serve` adds to a chat completion, against calling the model directly.

    python benchmarks/speed/serve_overhead.py [--requests 400] [--rounds 3]

One stub model (its own process, 0 ms latency); the same requests go to it directly and through utu.serve
(an agent without tools on that model), alternating over rounds, with the openai SDK as the client. Reported:
per-request latency p50/p99 one at a time (added latency = serve p50 - direct p50; goal <= 2 ms) and at 32
concurrent requests.
"""

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import stub_process, write_result  # noqa: E402

GOAL_MS = 2.0
MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


async def latencies(base_url: str, model: str, n: int, concurrency: int) -> list[float]:
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="x", max_retries=0, http_client=openai.DefaultAioHttpClient()
    )
    slots, out = asyncio.Semaphore(concurrency), []

    async def one() -> None:
        async with slots:
            start = time.perf_counter()
            await client.chat.completions.create(model=model, messages=MESSAGES)
            out.append(time.perf_counter() - start)

    await asyncio.gather(*(one() for _ in range(n)))
    await client.close()
    return out


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def start_serve(model_url: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    agent = workdir / "agent.yaml"
    agent.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "toolkits": [],
                "model": {
                    "model_provider": {"base_url": model_url, "model": "stub", "api_key": "k"},
                    "concurrency": 64,
                },
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "utu.serve", "--agent_config", str(agent), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if " at " not in line:
        raise RuntimeError(f"utu.serve did not start: {line!r}")
    return proc, line.split(" at ")[1].strip()


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    samples = {(kind, c): [] for kind in ("direct", "serve") for c in (1, 32)}
    with stub_process("--echo") as model_url, tempfile.TemporaryDirectory() as tmp:
        proc, serve_url = start_serve(model_url, Path(tmp))
        try:
            targets = {"direct": (model_url, "stub"), "serve": (serve_url, "bench")}
            for url, model in targets.values():
                await latencies(url, model, 50, 8)  # warm-up
            for _ in range(args.rounds):
                for kind, (url, model) in targets.items():
                    for concurrency in (1, 32):
                        samples[(kind, concurrency)] += await latencies(url, model, args.requests, concurrency)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    table = {
        f"{kind}_c{c}": {"p50_ms": round(percentile(v, 50), 3), "p99_ms": round(percentile(v, 99), 3)}
        for (kind, c), v in samples.items()
    }
    added = table["serve_c1"]["p50_ms"] - table["direct_c1"]["p50_ms"]
    write_result(
        "serve_overhead",
        {
            "requests_per_round": args.requests,
            "rounds": args.rounds,
            "latency": table,
            "added_p50_ms_one_at_a_time": round(added, 3),
            "added_p50_ms_at_32": round(table["serve_c32"]["p50_ms"] - table["direct_c32"]["p50_ms"], 3),
            "goal": f"added p50 <= {GOAL_MS} ms at 0 ms model latency",
            "met": added <= GOAL_MS,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
