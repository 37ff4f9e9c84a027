"""Helpers shared by the benchmarks: a stub LLM in its own process, and writing results as JSON."""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
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


def result_name(name: str) -> str:
    """A result's name as given on the command line (`--out`, argparse's `type=`): a plain file name, never a path,
    refused before the benchmark runs."""
    if not re.fullmatch(r"\w[\w.-]*", name, re.ASCII):
        raise argparse.ArgumentTypeError(f"{name!r}: letters, digits, '_', '-' and '.' only")
    return name


def at_least(low: int) -> Callable[[str], int]:
    """argparse's `type=` for a whole number of at least `low`, refused before the benchmark runs."""

    def whole_number(text: str) -> int:
        if not text.isdecimal() or int(text) < low:  # not isdigit: "²" is a digit int() refuses
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {text!r}")
        return int(text)

    return whole_number


def write_result(name: str, result: dict, results: Path = RESULTS) -> Path:
    """benchmarks/results/<name>.json, with what it measured: the commit (and whether the tree had changes beside
    it), the command line and the machine. A result is never overwritten: an earlier one is moved first to
    results/history/<name>/<its date>.json."""
    results.mkdir(exist_ok=True)
    result = {"benchmark": name, **provenance(), **result}
    path = results / f"{name}.json"
    if path.exists():
        try:
            earlier = json.loads(path.read_text()).get("date") or "undated"
        except (ValueError, AttributeError):
            earlier = "unreadable"
        kept = results / "history" / name / f"{re.sub(r'[^0-9T]', '', earlier) or earlier}.json"
        kept.parent.mkdir(parents=True, exist_ok=True)
        while kept.exists():  # two results of one second
            kept = kept.with_stem(kept.stem + "_")
        path.rename(kept)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return path


def provenance() -> dict:
    """When, on which commit (dirty: tracked files changed beside it, results/ aside; a file the run itself added,
    such as the agent a practice exports into configs/, does not count), by which command, on what machine."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(changed) if changed is not None else None,
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
        },
    }


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


FLOOR_MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]  # what both floors send


async def client_floor(base_url: str, calls: int, concurrency: int) -> float:
    """Seconds for `calls` bare `LLMClient.chat` calls at `concurrency`: the LLM traffic with no orchestrator."""
    import asyncio

    from utu.config import ModelConfig
    from utu.llm import LLMClient

    async with LLMClient(ModelConfig(concurrency=concurrency), base_url=base_url, model="stub", api_key="k") as llm:
        start = time.perf_counter()
        await asyncio.gather(*(llm.chat(FLOOR_MESSAGES) for _ in range(calls)))
        return time.perf_counter() - start


async def sdk_floor(base_url: str, calls: int, concurrency: int) -> float:
    """Seconds for `calls` bare `openai.AsyncOpenAI` requests at `concurrency` (its aiohttp client, the raw `post`
    our transport sends): the least an orchestrator on the SDK the project is built on can take for them."""
    import asyncio

    import openai

    slots = asyncio.Semaphore(concurrency)
    body = {"model": "stub", "messages": FLOOR_MESSAGES}
    http = openai.DefaultAioHttpClient()
    async with openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0, http_client=http) as sdk:

        async def one() -> None:
            async with slots:
                (await sdk.post("/chat/completions", body=body, cast_to=dict))["choices"][0]["message"]["content"]

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return time.perf_counter() - start


async def transport_floor(base_url: str, calls: int, concurrency: int) -> float:
    """Seconds for `calls` bare aiohttp POSTs at `concurrency`: the least any Python client needs for them here."""
    import asyncio

    import aiohttp

    slots = asyncio.Semaphore(concurrency)
    payload = {"model": "stub", "messages": FLOOR_MESSAGES}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:

        async def one() -> None:
            async with slots, http.post(f"{base_url}/chat/completions", json=payload) as r:
                r.raise_for_status()
                (await r.json())["choices"][0]["message"]["content"]

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return time.perf_counter() - start


async def stub_practice(
    base_url: str, db, dataset: str, questions: int, group: int, batch: int, concurrency: int, pipeline: bool = True
):
    """A one-epoch practice on `questions` addition problems against the stub, with the string-match verifier.

    Returns (practice, stack); the caller runs `practice.run()` and closes the stack (the clients).
    """
    from contextlib import AsyncExitStack

    from utu.config import (
        AgentConfig,
        DataArguments,
        DataConfig,
        EvalConfig,
        ModelConfig,
        ModelProvider,
        PracticeArguments,
        TrainingFreeGRPOConfig,
    )
    from utu.db.dataset_io import DatasetLine, store_dataset
    from utu.practice.parts import open_practice

    await db.create_tables()
    rows = [DatasetLine(question=f"What is {i} plus {i + 1}?", answer=str(2 * i + 1)) for i in range(questions)]
    await store_dataset(db, dataset, rows, "replace")
    provider = ModelProvider(base_url=base_url, model="stub", api_key="k")
    model = ModelConfig(model_provider=provider, concurrency=concurrency, structured_output="json_schema")
    config = TrainingFreeGRPOConfig(
        exp_id=f"{dataset}-{time.monotonic_ns()}",
        practice=PracticeArguments(epochs=1, batch_size=batch, grpo_n=group, rollout_concurrency=concurrency),
        data=DataArguments(practice_dataset_name=dataset),
        evaluation=EvalConfig(
            data=DataConfig(dataset=dataset),
            agent=AgentConfig(model=model, max_turns=1),
            verify_filename="str_match.py",
        ),
    )
    stack = AsyncExitStack()
    return (await open_practice(stack, config)).loop(config, db, pipeline=pipeline), stack


def run_timed(*args: str, env: dict[str, str]) -> tuple[float, int]:
    """Run one of the project's scripts as a user would (from the checkout); its seconds and exit code."""
    seconds, code, _ = run_watched(*args, env=env)
    return seconds, code


def run_watched(*args: str, env: dict[str, str]) -> tuple[float, int, str]:
    """`run_timed`, also returning what the script wrote to stderr (shown as it comes)."""
    start = time.perf_counter()
    print("$ python " + " ".join(args), flush=True)
    kept = []
    with subprocess.Popen(
        [sys.executable, *args], cwd=Path(__file__).resolve().parents[1], env=env, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stderr is not None
        for line in process.stderr:
            sys.stderr.write(line)
            kept.append(line)
    return time.perf_counter() - start, process.returncode, "".join(kept)


def run_command(*args: str, env: dict[str, str]) -> float:
    """`run_timed`, exiting on failure. Returns seconds."""
    seconds, code = run_timed(*args, env=env)
    if code != 0:
        raise SystemExit(f"failed (exit {code}): {' '.join(args)}")
    return seconds


async def exp_rows(db, model, exp_id: str) -> list:
    """All rows of one experiment in a table with an `exp_id` column."""
    from sqlalchemy import select

    async with db.sessions() as s:
        return list(await s.scalars(select(model).where(model.exp_id == exp_id)))


def practise(
    config_name: str,
    exp_id: str,
    db_url: str,
    env: dict[str, str],
    *extra: str,
    nothing_learned_ok: bool = False,
    fresh: bool = True,
) -> tuple[float, Path | None]:
    """A practice run (fresh unless `fresh` is off: then a stopped run resumes from its saved steps) that exports
    its last step; returns its seconds and its enhanced agent's YAML. With `nothing_learned_ok`, a practice that
    kept nothing (exit 2, no enhanced agent) returns None for the YAML."""
    args = ["--config_name", config_name, "--exp_id", exp_id, "--db_url", db_url, "--export_step", "last"]
    args += ["--fresh"] if fresh else []
    seconds, code, stderr = run_watched("scripts/run_training_free_GRPO.py", *args, *extra, env=env)
    if code == 2 and nothing_learned_ok and "error: practice learned nothing" in stderr:  # exit 2 is any error too
        return seconds, None
    if code != 0:
        raise SystemExit(f"practice failed (exit {code}): {' '.join(args)}")
    return seconds, Path(__file__).resolve().parents[1] / "runs" / exp_id / "enhanced_agent.yaml"
