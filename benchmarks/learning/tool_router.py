"""Does the learned router (utu/router) beat the LLM choosing its tool alone? The bundled tool-selection task.

    python benchmarks/learning/tool_router.py collect [--k 1]   # the agent's attempts, resumable (hours on 2 cores)
    python benchmarks/learning/tool_router.py report            # router replays, CIs -> results/tool_router_*.json

The agent is the bundled unit-tools agent (configs/agents/practice/unit_tools_agent.yaml) on the embedded
Qwen2.5-Coder-0.5B; the router reads SmolLM2-135M's embeddings. `collect` runs the agent on UnitConversion's
practice questions 0-39 once with each of the router's choices (the LLM offered only `convert_units`, only the
trap `quick_convert`, or no tool), and on the held-out questions 60-99 K times with each choice and with every
tool offered (the LLM choosing alone, as the bundled task has it). Every attempt is appended to
runs/tool_router_bench/<task>.jsonl as it finishes, so a stopped collection goes on where it stopped.

`report` replays online learning from the logged attempts: the router sees the practice questions in order,
tries two distinct choices per question (G=2), gets the logged reward of each and updates after every 8 questions,
exactly as it would live (an attempt's reward does not depend on what the router did before); 10 router seeds.
Frozen, it then picks one choice per held-out question, and its reward there is the logged reward of that
choice. Reported: Mean@K of the LLM alone, of the router's picks, of each fixed choice, and the paired difference
router - alone with a bootstrap 95% CI over questions (for the median seed, and pooled over seeds); the rate of
choosing the right tool (`convert_units`) per 10 practice questions (the learning curve); the router's decision
time (median, p99, over held-out questions with cached features) and memory (parameters, optimiser state, the
process's RSS before and after building it).
"""

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import practise, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASK = "unit_conversion"
DATASET = ROOT / "dataset" / "UnitConversion.jsonl"
AGENT = ROOT / "configs" / "agents" / "practice" / "unit_tools_agent.yaml"
CHOICES = {"convert_units": ["convert_units"], "quick_convert": ["quick_convert"], "no_tool": []}
ALONE = "alone"  # every tool offered: the LLM chooses
RIGHT = "convert_units"
TRAIN, HELDOUT = range(0, 40), range(60, 100)
GROUP, UPDATE_EVERY, SEEDS = 2, 8, 10
EMBEDDING_MODEL = "smollm2-135m"
LOG = ROOT / "runs" / "tool_router_bench" / f"{TASK}.jsonl"
# Practice's text experiences, beside the router: the bundled practice config (questions 0-39, gated on 40-59)
# with the 1.5B as learner; its enhanced agent answers the held-out questions with each choice and alone.
PRACTICE = "tool_router_practice"
ENHANCED = ROOT / "runs" / PRACTICE / "enhanced_agent.yaml"
EXPERIENCED = "experiences/"  # the prefix of the enhanced agent's choices in the log
LEARNER = "qwen2.5-coder-1.5b"


def questions() -> list[dict]:
    return [json.loads(line) for line in DATASET.read_text().splitlines()]


def logged() -> list[dict]:
    return [json.loads(line) for line in LOG.read_text().splitlines()] if LOG.exists() else []


def plan(k: int, experienced: bool) -> list[tuple[int, str, int]]:
    """(question, choice, attempt) still to run: practice questions once per choice, held-out K times per
    choice and alone; attempt 1 of everything before attempt 2. The enhanced agent answers only held-out ones."""
    done = {(r["index"], r["choice"], r["attempt"]) for r in logged()}
    prefix = EXPERIENCED if experienced else ""
    runs = [] if experienced else [(i, c, 0) for i in TRAIN for c in CHOICES]
    for attempt in range(k):
        runs += [(i, prefix + c, attempt) for i in HELDOUT for c in [*CHOICES, ALONE]]
    return [r for r in runs if r not in done]


def practise_experiences() -> int:
    """Practice once (resumable: a finished run's enhanced agent is kept), the agent on the embedded 0.5B."""
    if ENHANCED.exists():
        print(f"practice already ran: {ENHANCED}")
        return 0
    db_path = ROOT / "runs" / "tool_router_bench" / "practice.db"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "UTU_LOCAL_MODEL": "qwen2.5-coder-0.5b", "UTU_LEARNER_LOCAL_MODEL": LEARNER}
    _, agent = practise("local_unit_tools", PRACTICE, f"sqlite:///{db_path}", env, nothing_learned_ok=True)
    if agent is None:
        print("practice kept no experience: (c) is the LLM alone and (d) the router alone")
    return 0


async def collect(k: int, concurrency: int, experienced: bool) -> int:
    from utu.agents.experience import build_messages
    from utu.app import open_agent, open_client
    from utu.config import load_agent_config
    from utu.errors import LLMError
    from utu.verify import Verifier, load_verifier

    if experienced and not ENHANCED.exists():
        print(f"error: no enhanced agent at {ENHANCED}: run `tool_router.py practise` first")
        return 1
    data, todo = questions(), plan(k, experienced)
    print(f"{len(todo)} attempts to run; log {LOG}", flush=True)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    config = load_agent_config(str(ENHANCED if experienced else AGENT))
    verifier = Verifier(load_verifier("units.py", "verify_func"))
    slots = asyncio.Semaphore(concurrency)
    async with AsyncExitStack() as stack:
        client = await open_client(stack, config.model)
        agent = await open_agent(stack, config, client)
        with LOG.open("a", buffering=1) as out:

            async def one(index: int, choice: str, attempt: int) -> None:
                row = data[index]
                name = choice.removeprefix(EXPERIENCED)
                tools = agent.tools if name == ALONE else agent.tools.only(CHOICES[name])
                async with slots:
                    start = time.perf_counter()
                    try:
                        messages = build_messages(config, row["question"])
                        result = await asyncio.wait_for(agent.run_messages(messages, tools=tools), 300)
                    except TimeoutError:  # the agent's own limit, as in an eval: it scores 0
                        response, called = "", []
                    except LLMError as e:  # not the choice's doing: not logged, so the next collect redoes it
                        print(f"attempt {index} {choice} {attempt} failed: {e}", flush=True)
                        return
                    else:
                        response, called = result.response, [c["tool"] for c in result.tool_log]
                    sample = SimpleNamespace(
                        response=response, correct_answer=row["answer"], raw_question=row["question"]
                    )
                    verdict = await verifier(sample)
                entry = {
                    "index": index,
                    "choice": choice,
                    "attempt": attempt,
                    "reward": verdict.reward,
                    "tools": called,
                    "seconds": round(time.perf_counter() - start, 2),
                }
                out.write(json.dumps(entry) + "\n")

            await asyncio.gather(*(one(*r) for r in todo))
    return 0


def rewards_table() -> dict[tuple[int, str], list[float]]:
    table: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in logged():
        table[(r["index"], r["choice"])].append(r["reward"])
    return table


async def embed_questions(indices: list[int]) -> dict[int, "object"]:
    from utu.router.embeddings import Embedder

    data = questions()
    embedder = Embedder.connect(None, EMBEDDING_MODEL)
    vectors = await embedder([data[i]["question"] for i in indices])
    return dict(zip(indices, vectors, strict=True))


def replay(seed: int, features: dict, table: dict) -> dict:
    """Online learning over the practice questions from the logged rewards, then frozen picks on held-out ones."""
    import torch

    from utu.router.router import Router

    router = Router(list(CHOICES), len(next(iter(features.values()))), seed=seed)
    curve = []
    for n, index in enumerate(TRAIN, 1):
        vector = torch.from_numpy(features[index])
        for _ in range(GROUP):
            decision = router.decide(f"q{index}", vector, explore=True)
            router.observe(decision, statistics.fmean(table[(index, decision.choice)]))
        if n % UPDATE_EVERY == 0:
            router.update()
        if n % 10 == 0:
            picks = [router.decide(f"h{i}", torch.from_numpy(features[i]), explore=False).choice for i in HELDOUT]
            curve.append({"practice_questions": n, "right_choice_rate": sum(p == RIGHT for p in picks) / len(picks)})
    picks = {i: router.decide(f"h{i}", torch.from_numpy(features[i]), explore=False).choice for i in HELDOUT}
    return {"seed": seed, "picks": picks, "curve": curve, "router": router}


def paired(a: dict[int, float], b: dict[int, float]) -> dict:
    from utu.eval.metrics import bootstrap_ci

    diffs = [a[q] - b[q] for q in a]
    low, high = bootstrap_ci(diffs)
    return {"difference": statistics.fmean(diffs), "ci95": [low, high]}


def decision_timing(router, features: dict) -> dict:
    import torch

    vectors = [torch.from_numpy(features[i]) for i in HELDOUT]
    times = []
    for _ in range(50):
        for i, v in zip(HELDOUT, vectors, strict=True):
            start = time.perf_counter()
            router.decide(f"h{i}", v, explore=False)
            times.append(time.perf_counter() - start)
    times.sort()
    return {
        "decisions": len(times),
        "median_us": round(times[len(times) // 2] * 1e6, 1),
        "p99_us": round(times[int(len(times) * 0.99)] * 1e6, 1),
    }


def memory(router) -> dict:
    parameters = sum(p.numel() * p.element_size() for net in router.nets for p in net.parameters())
    optimiser = sum(
        t.numel() * t.element_size()
        for o in router.optimizers
        for state in o.state.values()
        for t in state.values()
        if hasattr(t, "numel")
    )
    return {"parameters_bytes": parameters, "optimiser_bytes": optimiser}


def report() -> int:
    import torch

    from utu.eval.metrics import bootstrap_ci

    table = rewards_table()
    missing = [(i, c) for i in TRAIN for c in CHOICES if (i, c) not in table]
    missing += [(i, c) for i in HELDOUT for c in [*CHOICES, ALONE] if (i, c) not in table]
    if missing:
        print(f"error: {len(missing)} (question, choice) pairs have no attempt yet, e.g. {missing[:3]}: run collect")
        return 1
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    features = asyncio.run(embed_questions([*TRAIN, *HELDOUT]))
    held = {c: {i: statistics.fmean(table[(i, c)]) for i in HELDOUT} for c in [*CHOICES, ALONE]}
    runs = [replay(seed, features, table) for seed in range(SEEDS)]
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_seed = []
    for run in runs:
        reward = {i: held[run["picks"][i]][i] for i in HELDOUT}
        per_seed.append(
            {
                "seed": run["seed"],
                "mean_at_k": statistics.fmean(reward.values()),
                "right_choice_rate": sum(p == RIGHT for p in run["picks"].values()) / len(HELDOUT),
                "picks": dict(sorted(defaultdict_count(run["picks"].values()).items())),
                "vs_alone": paired(reward, held[ALONE]),
                "curve": run["curve"],
            }
        )
    median = sorted(per_seed, key=lambda s: s["mean_at_k"])[SEEDS // 2]
    pooled = {i: statistics.fmean(held[run["picks"][i]][i] for run in runs) for i in HELDOUT}
    alone_right = [
        statistics.fmean(
            RIGHT in r["tools"] and "quick_convert" not in r["tools"]
            for r in logged()
            if r["index"] == i and r["choice"] == ALONE
        )
        for i in HELDOUT
    ]
    k = min(len(table[(i, ALONE)]) for i in HELDOUT)
    torch.set_num_threads(1)
    result = {
        "task": TASK,
        "agent": "qwen2.5-coder-0.5b",
        "embeddings": EMBEDDING_MODEL,
        "choices": CHOICES,
        "practice_questions": [TRAIN.start, TRAIN.stop - 1],
        "heldout_questions": [HELDOUT.start, HELDOUT.stop - 1],
        "k": k,
        "group": GROUP,
        "update_every": UPDATE_EVERY,
        "seeds": SEEDS,
        "agent_attempts": len(logged()),
        "mean_at_k": {
            c: {"value": statistics.fmean(v.values()), "ci95": list(bootstrap_ci(list(v.values())))}
            for c, v in held.items()
        },
        "llm_alone_right_tool_rate": statistics.fmean(alone_right),
        "router_mean_at_k_over_seeds": {
            "mean": statistics.fmean(s["mean_at_k"] for s in per_seed),
            "min": min(s["mean_at_k"] for s in per_seed),
            "max": max(s["mean_at_k"] for s in per_seed),
        },
        "router_minus_alone_median_seed": median["vs_alone"] | {"seed": median["seed"]},
        "router_minus_alone_pooled_over_seeds": paired(pooled, held[ALONE]),
        "router_right_choice_rate_over_seeds": statistics.fmean(s["right_choice_rate"] for s in per_seed),
        "decision_time": decision_timing(runs[0]["router"], features),
        "memory": memory(runs[0]["router"]) | {"rss_growth_kb_for_10_routers": rss_after - rss_before},
        "per_seed": per_seed,
    }
    write_result(f"tool_router_{TASK}", result)
    return 0


def defaultdict_count(values) -> dict:
    counts: dict = defaultdict(int)
    for v in values:
        counts[v] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--k", type=int, default=1, help="attempts per held-out question and choice")
    c.add_argument("--concurrency", type=int, default=8)
    c.add_argument("--experienced", action="store_true", help="the enhanced agent of `practise`, held-out only")
    sub.add_parser("practise", help="practice's text experiences for the same agent (about an hour)")
    sub.add_parser("report")
    args = parser.parse_args()
    random.seed(0)
    if args.command == "collect":
        return asyncio.run(collect(args.k, args.concurrency, args.experienced))
    if args.command == "practise":
        return practise_experiences()
    return report()


if __name__ == "__main__":
    sys.exit(main())
