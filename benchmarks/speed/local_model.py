"""Aggregate throughput of the embedded llama-server at 1, 4 and 8 concurrent requests, against single stream.

    python benchmarks/speed/local_model.py [--model qwen2.5-coder-0.5b] [--tokens 128] [--rounds 2]

Every request asks for exactly `--tokens` completion tokens (`ignore_eos`), so each level generates the same
work per request; a level runs `concurrency` x 2 requests. Levels alternate over the rounds in one run, so
machine noise hits them alike; the result is the ratio of median tokens/s to single stream.
Goal for the 0.5B: >= 2.5x at 8. Also checks that JSON-schema constrained output still parses under load.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402

from utu.llm import local  # noqa: E402

LEVELS = (1, 4, 8)
GOAL = 2.5
QUESTION = "A baker has 23 trays with 14 rolls on each. He sells 97 rolls. How many are left? Explain step by step."
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


async def one(http: aiohttp.ClientSession, url: str, model: str, tokens: int, seed: int) -> int:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": tokens,
        "temperature": 0.7,
        "seed": seed,
        "ignore_eos": True,
    }
    async with http.post(url, json=body) as r:
        r.raise_for_status()
        return (await r.json())["usage"]["completion_tokens"]


async def level(url: str, model: str, concurrency: int, tokens: int) -> float:
    """Tokens per second with `concurrency` requests in flight, 2 x concurrency requests in all."""
    slots = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:

        async def bounded(i: int) -> int:
            async with slots:
                return await one(http, url, model, tokens, i)

        start = time.perf_counter()
        done = await asyncio.gather(*(bounded(i) for i in range(2 * concurrency)))
        return sum(done) / (time.perf_counter() - start)


async def constrained_ok(url: str, model: str, n: int) -> int:
    """How many of n concurrent JSON-schema constrained replies parse."""
    fmt = {"type": "json_schema", "json_schema": {"name": "Answer", "schema": SCHEMA}}
    async with aiohttp.ClientSession() as http:

        async def ask() -> bool:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": QUESTION + " Reply in JSON."}],
                "max_tokens": 64,
                "response_format": fmt,
            }
            async with http.post(url, json=body) as r:
                text = (await r.json())["choices"][0]["message"]["content"]
            try:
                return isinstance(json.loads(text).get("answer"), int)
            except (ValueError, AttributeError):
                return False

        return sum(await asyncio.gather(*(ask() for _ in range(n))))


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=local.default_model())
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    state, _ = local.serve(args.model)
    url = local.base_url(state) + "/chat/completions"
    await level(url, args.model, 1, 16)  # warm-up
    runs: dict[int, list[float]] = {c: [] for c in LEVELS}
    for _ in range(args.rounds):
        for c in LEVELS:
            runs[c].append(await level(url, args.model, c, args.tokens))
            print(f"concurrency {c}: {runs[c][-1]:.1f} tokens/s", flush=True)
    median = {c: statistics.median(v) for c, v in runs.items()}
    speedup = {c: median[c] / median[1] for c in LEVELS}
    parsed = await constrained_ok(url, args.model, 8)
    write_result(
        f"local_model_{args.model}",
        {
            "model": args.model,
            "tokens_per_request": args.tokens,
            "parallel_slots": local._int_env("UTU_LOCAL_PARALLEL", local.DEFAULT_PARALLEL),
            "tokens_per_s": {str(c): round(median[c], 1) for c in LEVELS},
            "speedup_vs_single": {str(c): round(speedup[c], 2) for c in LEVELS},
            "runs": {str(c): [round(x, 1) for x in v] for c, v in runs.items()},
            "constrained_json_parsed": f"{parsed}/8",
            "goal": f">= {GOAL}x at 8",
            "met": speedup[8] >= GOAL and parsed == 8,
        },
    )
    return 0 if speedup[8] >= GOAL and parsed == 8 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
