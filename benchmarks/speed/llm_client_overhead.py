"""Throughput of utu's LLMClient versus raw httpx against the same stub (zero latency, concurrency 64).

    python benchmarks/speed/llm_client_overhead.py [--requests 2000] [--rounds 3]

Also against raw aiohttp, the transport under the client's openai SDK, so client / aiohttp is the share
the SDK and our layer (slots, retries, usage, spans, error mapping) leave of the bare POSTs. All run in
the same process and alternate over several rounds against one stub process, so machine noise hits them
alike; the result is the ratio of medians. Goal: ratio (client / httpx) >= 0.7.
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import client_floor, stub_process, transport_floor, write_result  # noqa: E402

MESSAGES = [{"role": "user", "content": "What is two plus two?"}]
GOAL = 0.7


async def run_client(base_url: str, n: int, concurrency: int) -> float:
    return n / await client_floor(base_url, n, concurrency)


async def run_httpx(base_url: str, n: int, concurrency: int) -> float:
    """Bare POSTs with httpx."""
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:

        async def one() -> None:
            async with slots:
                r = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES})
                r.raise_for_status()
                r.json()["choices"][0]["message"]["content"]

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - start)


async def run_aiohttp(base_url: str, n: int, concurrency: int) -> float:
    return n / await transport_floor(base_url, n, concurrency)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    client_rps, httpx_rps, aiohttp_rps = [], [], []
    with stub_process("--echo") as base_url:
        await run_httpx(base_url, 200, args.concurrency)  # warm-up
        for _ in range(args.rounds):
            httpx_rps.append(await run_httpx(base_url, args.requests, args.concurrency))
            aiohttp_rps.append(await run_aiohttp(base_url, args.requests, args.concurrency))
            client_rps.append(await run_client(base_url, args.requests, args.concurrency))
    client = statistics.median(client_rps)
    ratio = client / statistics.median(httpx_rps)
    write_result(
        "llm_client_overhead",
        {
            "requests_per_round": args.requests,
            "concurrency": args.concurrency,
            "rounds": args.rounds,
            "client_requests_per_s": [round(x, 1) for x in client_rps],
            "httpx_requests_per_s": [round(x, 1) for x in httpx_rps],
            "aiohttp_requests_per_s": [round(x, 1) for x in aiohttp_rps],
            "ratio_client_to_httpx": round(ratio, 3),
            # Stricter: against the transport under the SDK, so this is the SDK's and our layer's overhead.
            "ratio_client_to_aiohttp": round(client / statistics.median(aiohttp_rps), 3),
            "goal": f"ratio_client_to_httpx >= {GOAL}",
            "met": ratio >= GOAL,
        },
    )
    return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
