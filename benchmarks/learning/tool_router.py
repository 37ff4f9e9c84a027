"""Does the learned router (utu/router) beat the LLM choosing its tool alone? Two tasks.

    python benchmarks/learning/tool_router.py collect [--task T] [--k 1]  # the agent's attempts, resumable (hours)
    python benchmarks/learning/tool_router.py practise                  # practice's experiences (unit_conversion)
    python benchmarks/learning/tool_router.py collect --experienced      # the enhanced agent, held-out questions
    python benchmarks/learning/tool_router.py report [--task T]         # router replays -> results/tool_router_T.json

Tasks (`--task`):
- `unit_conversion` (default): the bundled tool-selection task, UnitConversion with its unit-tools agent
  (configs/agents/practice/unit_tools_agent.yaml). The router chooses what the LLM is offered: only
  `convert_units` (right), only the trap `quick_convert`, or no tool. Practice questions 0-39, held-out 60-99.
- `units_or_word_problems`: the right choice depends on the question. UnitConversion and MAWPS_singleop (one-step word
  problems: "7 bottle caps and 7 more") interleaved, one of each in turn, with the same tools under neutral
  instructions (configs/agents/practice/number_tools_agent.yaml). Choices: only `convert_units` (right for a
  conversion), only `calculator`, or no tool (right for a word problem: it needs one sum, and in a pilot on practice
  questions the 0.5B offered a tool wrote a made-up call as its answer). Practice: 20 questions of each kind (0-19 of
  both files); held-out: 20 of each (60-79). Each choice's reward per kind is in the results, so the right choices can
  be checked. (A first try with Decimals, divisions to 2 decimals, was dropped after 37 attempts: the 0.5B's every
  `calculator` call copied the schema's fields into its arguments and failed, and without a tool it rarely gave 2
  decimals, so every choice scored about 0 on that kind. The agent's first instructions, "reply with only the final
  number", then scored 0 on the word problems with every choice, 17 attempts each: told to answer at once, the 0.5B
  says 10 for 4 + 3. They now let it work in a sentence or two; both changes were made from practice questions only.)

The agent runs on the embedded Qwen2.5-Coder-0.5B; the router reads SmolLM2-135M's embeddings. `collect` runs
the agent on the practice questions once with each of the router's choices, and on the held-out questions K
times with each choice and with every tool offered (the LLM choosing alone). Every attempt is appended to
runs/tool_router_bench/<task>.jsonl as it finishes, so a stopped collection goes on where it stopped.

`practise` runs the bundled practice config (configs/practice/local_unit_tools.yaml: UnitConversion 0-39, G=4,
gated on 40-59) with the 1.5B as learner; `collect --experienced` runs its enhanced agent (the same agent with
the kept experiences) on the held-out questions with each choice and alone. The report then adds (c) the
experiences alone and (d) the experiences with the router's picks.

`report` replays online learning from the logged attempts: the router sees the practice questions in order,
tries two distinct choices per question (G=2), gets the logged reward of each and updates after every 8 questions,
exactly as it would live (an attempt's reward does not depend on what the router did before); 10 router seeds.
Frozen, it then picks one choice per held-out question, and its reward there is the logged reward of that
choice. Reported: Mean@K of the LLM alone, of the router's picks, of each fixed choice, and the paired difference
router - alone with a bootstrap 95% CI over questions (for the median seed, and pooled over seeds); the rate of
choosing the question's right tool per 10 practice questions (the learning curve); the router's decision time
(median, p99, over held-out questions with cached features) and memory (parameters, optimiser state, the
process's RSS before and after building it); the router against the best fixed choice in hindsight; and whether a
value network earns its place as the baseline (`value_network`: the same replay with one, with two choices tried
per practice question or one). A practice that kept nothing makes (c) the LLM alone and (d) the router alone,
with each step's gate verdict in the results.

The logs behind the committed results are in benchmarks/results/tool_router_logs/: copied into
runs/tool_router_bench/, `report` reproduces them without running the agent.
"""

import argparse
import asyncio
import functools
import json
import os
import random
import resource
import statistics
import sys
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import practise, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "configs" / "agents" / "practice"
ALONE = "alone"  # every tool offered: the LLM chooses
TRAP = "quick_convert"
GROUP, UPDATE_EVERY, SEEDS = 2, 8, 10
# An attempt is bounded by the agent's max_turns and max_tokens; one slower than this waited on a loaded server
# (the practice and suite runs share it), which is not the choice's doing.
ATTEMPT_LIMIT = 900
PRACTICE_TASK_TIMEOUT = "900"  # the bundled config's 120 s is for an unshared server
EMBEDDING_MODEL = "smollm2-135m"
# Practice's text experiences, beside the router (unit_conversion only): the bundled practice config (questions
# 0-39, gated on 40-59) with the 1.5B as learner; its enhanced agent answers the held-out questions with each
# choice and alone.
PRACTICE = "tool_router_practice"
ENHANCED = ROOT / "runs" / PRACTICE / "enhanced_agent.yaml"
EXPERIENCED = "experiences/"  # the prefix of the enhanced agent's choices in the log
LEARNER = "qwen2.5-coder-1.5b"
PRACTICE_DB = ROOT / "runs" / "tool_router_bench" / "practice.db"
PRACTICE_STEPS = 2  # the bundled config: questions 0-39 in batches of 20


@functools.cache  # read once: the report asks for the questions per seed and curve point
def rows(name: str, right: str) -> list[dict]:
    lines = (ROOT / "dataset" / f"{name}.jsonl").read_text().splitlines()
    return [json.loads(line) | {"right": right, "kind": name} for line in lines]


@dataclass(frozen=True)
class Task:
    name: str
    agent: Path
    choices: dict[str, list[str]]
    train: list[int]
    heldout: list[int]
    questions_note: dict[str, str]  # the practice and held-out questions, in words for the results

    @property
    def log(self) -> Path:
        return ROOT / "runs" / "tool_router_bench" / f"{self.name}.jsonl"

    def questions(self) -> list[dict]:
        """Each question with its `right` choice; a list index is the question's index in the log."""
        units = rows("UnitConversion", "convert_units")
        if self.name == "unit_conversion":
            return units
        words = rows("MAWPS_singleop", "no_tool")
        return [q for pair in zip(units, words, strict=False) for q in pair]  # 2i: units[i], 2i+1: words[i]


def both_kinds(first: int, stop: int) -> list[int]:
    return list(range(2 * first, 2 * stop))


TASKS = {
    "unit_conversion": Task(
        "unit_conversion",
        AGENTS / "unit_tools_agent.yaml",
        {"convert_units": ["convert_units"], "quick_convert": ["quick_convert"], "no_tool": []},
        list(range(0, 40)),
        list(range(60, 100)),
        {"practice": "UnitConversion 0-39", "heldout": "UnitConversion 60-99"},
    ),
    "units_or_word_problems": Task(
        "units_or_word_problems",
        AGENTS / "number_tools_agent.yaml",
        {"convert_units": ["convert_units"], "calculator": ["calculator"], "no_tool": []},
        both_kinds(0, 20),
        both_kinds(60, 80),
        {
            "practice": "UnitConversion 0-19 and MAWPS_singleop 0-19, one of each in turn",
            "heldout": "UnitConversion 60-79 and MAWPS_singleop 60-79, one of each in turn",
        },
    ),
}


def logged(task: Task) -> list[dict]:
    return [json.loads(line) for line in task.log.read_text().splitlines()] if task.log.exists() else []


def plan(task: Task, k: int, experienced: bool) -> list[tuple[int, str, int]]:
    """(question, choice, attempt) still to run: practice questions once per choice, held-out K times per
    choice and alone; attempt 1 of everything before attempt 2. The enhanced agent answers only held-out ones."""
    done = {(r["index"], r["choice"], r["attempt"]) for r in logged(task)}
    prefix = EXPERIENCED if experienced else ""
    runs = [] if experienced else [(i, c, 0) for i in task.train for c in task.choices]
    for attempt in range(k):
        runs += [(i, prefix + c, attempt) for i in task.heldout for c in [*task.choices, ALONE]]
    return [r for r in runs if r not in done]


def practise_experiences() -> int:
    """Practice once, the agent on the embedded 0.5B; resumable (a stopped run goes on from its saved steps, a
    finished run's enhanced agent is kept)."""
    if ENHANCED.exists():
        print(f"practice already ran: {ENHANCED}")
        return 0
    PRACTICE_DB.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "UTU_LOCAL_MODEL": "qwen2.5-coder-0.5b", "UTU_LEARNER_LOCAL_MODEL": LEARNER}
    _, agent = practise(
        "local_unit_tools",
        PRACTICE,
        f"sqlite:///{PRACTICE_DB}",
        env,
        "--task_timeout",
        PRACTICE_TASK_TIMEOUT,
        nothing_learned_ok=True,
        fresh=False,
    )
    if agent is None:
        print("practice kept no experience: (c) is the LLM alone and (d) the router alone")
    return 0


async def collect(task: Task, k: int, concurrency: int, experienced: bool) -> int:
    from utu.agents.experience import build_messages
    from utu.app import open_agent, open_client
    from utu.config import load_agent_config
    from utu.errors import LLMError
    from utu.verify import Verifier, load_verifier

    if experienced and (task.name != "unit_conversion" or not ENHANCED.exists()):
        print(f"error: --experienced needs --task unit_conversion and {ENHANCED}: run `tool_router.py practise`")
        return 1
    data, todo = task.questions(), plan(task, k, experienced)
    print(f"{len(todo)} attempts to run; log {task.log}", flush=True)
    task.log.parent.mkdir(parents=True, exist_ok=True)
    config = load_agent_config(str(ENHANCED if experienced else task.agent))
    verifier = Verifier(load_verifier("units.py", "verify_func"))
    slots = asyncio.Semaphore(concurrency)
    async with AsyncExitStack() as stack:
        client = await open_client(stack, config.model)
        agent = await open_agent(stack, config, client)
        with task.log.open("a", buffering=1) as out:

            async def one(index: int, choice: str, attempt: int) -> None:
                row = data[index]
                name = choice.removeprefix(EXPERIENCED)
                tools = agent.tools if name == ALONE else agent.tools.only(task.choices[name])
                async with slots:
                    start = time.perf_counter()
                    try:
                        messages = build_messages(config, row["question"])
                        result = await asyncio.wait_for(agent.run_messages(messages, tools=tools), ATTEMPT_LIMIT)
                    except (LLMError, TimeoutError) as e:  # not the choice's doing: the next collect redoes it
                        print(f"attempt {index} {choice} {attempt} failed: {e!r}", flush=True)
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


def rewards_table(task: Task) -> dict[tuple[int, str], list[float]]:
    table: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in logged(task):
        table[(r["index"], r["choice"])].append(r["reward"])
    return table


async def embed_questions(task: Task) -> dict[int, "object"]:
    from utu.router.embeddings import Embedder

    data, indices = task.questions(), [*task.train, *task.heldout]
    embedder = Embedder.connect(None, EMBEDDING_MODEL)
    vectors = await embedder([data[i]["question"] for i in indices])
    return dict(zip(indices, vectors, strict=True))


def right_rate(task: Task, picks: dict[int, str]) -> float:
    data = task.questions()
    return sum(choice == data[i]["right"] for i, choice in picks.items()) / len(picks)


def right_call(right: str, called: list[str]) -> bool:
    """Whether an attempt offered every tool did what the right choice does: no call, or the right tool's."""
    return not called if right == "no_tool" else right in called and TRAP not in called


def replay(task: Task, seed: int, features: dict, table: dict, group: int = GROUP, value: bool = False) -> dict:
    """Online learning over the practice questions from the logged rewards, then frozen picks on held-out ones.
    `group`: the choices tried per question; `value`: a value network as the baseline (the measurement below)."""
    import torch

    from utu.router.router import Router

    kind = value_baseline_router() if value else Router
    router = kind(list(task.choices), len(next(iter(features.values()))), seed=seed)

    def frozen_picks() -> dict[int, str]:
        return {i: router.decide(f"h{i}", torch.from_numpy(features[i]), explore=False).choice for i in task.heldout}

    curve = []
    for n, index in enumerate(task.train, 1):
        vector = torch.from_numpy(features[index])
        for _ in range(group):
            decision = router.decide(f"q{index}", vector, explore=True)
            router.observe(decision, statistics.fmean(table[(index, decision.choice)]))
        if n % UPDATE_EVERY == 0:
            router.update()
        if n % 10 == 0:
            curve.append({"practice_questions": n, "right_choice_rate": right_rate(task, frozen_picks())})
    return {"seed": seed, "picks": frozen_picks(), "curve": curve, "router": router}


def value_baseline_router():
    """The router with a value network per member as its baseline, for measuring whether one earns its place:
    an attempt's advantage is its reward against V(query) (fitted to the rewards seen before this update), over
    the batch's spread, instead of against the other choices tried for the query. A measurement, not shipped."""
    import torch

    from utu.router.policy import PolicyNet
    from utu.router.router import Router

    class ValueRouter(Router):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with torch.random.fork_rng():
                torch.manual_seed(self.seed + 1)
                self.values = [PolicyNet(self.features, 1, self.hidden) for _ in self.members]
            self.value_optimizers = [torch.optim.Adam(v.parameters(), lr=self.lr) for v in self.values]

        def _advantages(self, m, features, rewards, groups):
            value, optimizer = self.values[m], self.value_optimizers[m]
            with torch.no_grad():
                advantages = (rewards - value(features).squeeze(1)) / (rewards.std(unbiased=False) + 1e-4)
            for _ in range(self.epochs):  # then fit V to this batch, for the next update's baseline
                loss = torch.nn.functional.mse_loss(value(features).squeeze(1), rewards)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return advantages

    return ValueRouter


def value_network_measurement(task: Task, features: dict, table: dict, held: dict, router: dict) -> dict:
    """Does a value network earn its place? The router's held-out Mean@K (pooled over seeds) with its group's
    mean as the baseline (as shipped) or a value network's, with two choices tried per practice question (G=2)
    or one (G=1: a group of one says nothing, so the shipped router learns only from its batch share)."""
    out, pooled_by = {}, {}
    for name, group, value in (
        ("group_baseline_g1", 1, False),
        ("value_network_g2", 2, True),
        ("value_network_g1", 1, True),
    ):
        runs = [replay(task, seed, features, table, group=group, value=value) for seed in range(SEEDS)]
        pooled = pooled_by[name] = {i: statistics.fmean(held[run["picks"][i]][i] for run in runs) for i in task.heldout}
        out[name] = {
            "mean_at_k_pooled_over_seeds": statistics.fmean(pooled.values()),
            "right_choice_rate_over_seeds": statistics.fmean(right_rate(task, run["picks"]) for run in runs),
            "minus_shipped_router_g2": paired(pooled, router),
        }
    one_choice = paired(pooled_by["value_network_g1"], pooled_by["group_baseline_g1"])
    return (
        {"shipped_router_g2_mean_at_k": statistics.fmean(router.values())} | out | {"g1_value_minus_group": one_choice}
    )


def paired(a: dict[int, float], b: dict[int, float]) -> dict:
    from utu.eval.metrics import bootstrap_ci

    diffs = [a[q] - b[q] for q in a]
    low, high = bootstrap_ci(diffs)
    return {"difference": statistics.fmean(diffs), "ci95": [low, high]}


def decision_timing(task: Task, router, features: dict) -> dict:
    import torch

    vectors = [torch.from_numpy(features[i]) for i in task.heldout]
    times = []
    for _ in range(50):
        for i, v in zip(task.heldout, vectors, strict=True):
            start = time.perf_counter()
            router.decide(f"h{i}", v, explore=False)
            times.append(time.perf_counter() - start)
    times.sort()
    return {
        "load_average_1min": round(os.getloadavg()[0], 2),  # on 2 cores, above ~1 the tail is other processes'
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


async def practice_steps() -> list[dict]:
    """What `practise` recorded per step: Mean@G, the library's size, the validation gate's verdict."""
    from utu.db import Database
    from utu.practice.store import PracticeStore

    if not PRACTICE_DB.exists():
        return []
    async with Database(f"sqlite:///{PRACTICE_DB}") as db:
        steps = await PracticeStore(db, PRACTICE).steps()
    keep = ("step", "mean_at_g", "library_size", "operations", "operations_refused", "validation")
    return [{k: v for k, v in step.model_dump().items() if k in keep} for step in steps]


def with_experiences(
    task: Task, table: dict, runs: list[dict], alone: dict[int, float], router: dict[int, float]
) -> dict | None:
    """(c) the enhanced agent choosing alone and (d) the enhanced agent offered the router's picks, beside the
    LLM alone and the router alone; None until `collect --experienced` has run every held-out pair. A practice
    that kept no experience exported no enhanced agent: (c) is then the LLM alone and (d) the router alone."""
    if task.name != "unit_conversion":
        return None
    steps = asyncio.run(practice_steps())
    if not ENHANCED.exists() and len(steps) == PRACTICE_STEPS and not steps[-1]["library_size"]:
        return {
            "practice_kept_nothing": True,
            "practice_steps": steps,
            "c_experiences_alone": statistics.fmean(alone.values()),
            "d_experiences_and_router_pooled_over_seeds": statistics.fmean(router.values()),
            "note": "the validation gate refused every proposed library, so the agent with experiences is the "
            "agent itself: (c) = (a) and (d) = (b)",
        }
    arms = [*task.choices, ALONE]
    if any((i, EXPERIENCED + c) not in table for i in task.heldout for c in arms):
        return None
    experienced = {c: {i: statistics.fmean(table[(i, EXPERIENCED + c)]) for i in task.heldout} for c in arms}
    both = {i: statistics.fmean(experienced[run["picks"][i]][i] for run in runs) for i in task.heldout}
    return {
        "enhanced_agent": str(ENHANCED.relative_to(ROOT)),
        "experiences": load_experiences(),
        "mean_at_k_enhanced": {c: statistics.fmean(v.values()) for c, v in experienced.items()},
        "c_experiences_alone": statistics.fmean(experienced[ALONE].values()),
        "d_experiences_and_router_pooled_over_seeds": statistics.fmean(both.values()),
        "c_minus_a_alone": paired(experienced[ALONE], alone),
        "d_minus_a_alone": paired(both, alone),
        "d_minus_b_router": paired(both, router),
        "d_minus_c_experiences": paired(both, experienced[ALONE]),
        "router_picks_trained_without_experiences": True,
        "practice_steps": steps,
    }


def by_kind(task: Task, table: dict, arms: list[str]) -> dict:
    """Each choice's mean reward per kind of question, on the practice and the held-out questions."""
    data, out = task.questions(), {}
    for part, indices in (("practice", task.train), ("heldout", task.heldout)):
        for kind in sorted({data[i]["kind"] for i in indices}):
            of_kind = [i for i in indices if data[i]["kind"] == kind]
            out.setdefault(kind, {})[part] = {
                c: statistics.fmean(statistics.fmean(table[(i, c)]) for i in of_kind)
                for c in arms
                if all((i, c) in table for i in of_kind)
            }
    return out


def load_experiences() -> dict:
    from utu.config import load_agent_config

    return dict(load_agent_config(str(ENHANCED)).experiences or {})


def report(task: Task) -> int:
    import torch

    from utu.eval.metrics import bootstrap_ci

    table, data, arms = rewards_table(task), task.questions(), [*task.choices, ALONE]
    missing = [(i, c) for i in task.train for c in task.choices if (i, c) not in table]
    missing += [(i, c) for i in task.heldout for c in arms if (i, c) not in table]
    if missing:
        print(f"error: {len(missing)} (question, choice) pairs have no attempt yet, e.g. {missing[:3]}: run collect")
        return 1
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    features = asyncio.run(embed_questions(task))
    held = {c: {i: statistics.fmean(table[(i, c)]) for i in task.heldout} for c in arms}
    runs = [replay(task, seed, features, table) for seed in range(SEEDS)]
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_seed = []
    for run in runs:
        reward = {i: held[run["picks"][i]][i] for i in task.heldout}
        per_seed.append(
            {
                "seed": run["seed"],
                "mean_at_k": statistics.fmean(reward.values()),
                "right_choice_rate": right_rate(task, run["picks"]),
                "picks": dict(sorted(defaultdict_count(run["picks"].values()).items())),
                "vs_alone": paired(reward, held[ALONE]),
                "curve": run["curve"],
            }
        )
    median = sorted(per_seed, key=lambda s: s["mean_at_k"])[SEEDS // 2]
    pooled = {i: statistics.fmean(held[run["picks"][i]][i] for run in runs) for i in task.heldout}
    alone_right = [
        statistics.fmean(
            right_call(data[i]["right"], r["tools"]) for r in logged(task) if (r["index"], r["choice"]) == (i, ALONE)
        )
        for i in task.heldout
    ]
    k = min(len(table[(i, ALONE)]) for i in task.heldout)
    best = max(task.choices, key=lambda c: statistics.fmean(held[c].values()))  # in hindsight, on held-out questions
    torch.set_num_threads(1)
    result = {
        "task": task.name,
        "agent": "qwen2.5-coder-0.5b",
        "agent_config": str(task.agent.relative_to(ROOT)),
        "embeddings": EMBEDDING_MODEL,
        "choices": task.choices,
        "practice_questions": task.questions_note["practice"],
        "heldout_questions": task.questions_note["heldout"],
        "k": k,
        "group": GROUP,
        "update_every": UPDATE_EVERY,
        "seeds": SEEDS,
        "agent_attempts": len(logged(task)),
        "mean_at_k": {
            c: {"value": statistics.fmean(v.values()), "ci95": list(bootstrap_ci(list(v.values())))}
            for c, v in held.items()
        },
        "mean_at_k_by_kind": by_kind(task, table, arms),
        "llm_alone_right_tool_rate": statistics.fmean(alone_right),
        "router_mean_at_k_over_seeds": {
            "mean": statistics.fmean(s["mean_at_k"] for s in per_seed),
            "min": min(s["mean_at_k"] for s in per_seed),
            "max": max(s["mean_at_k"] for s in per_seed),
        },
        "router_minus_alone_median_seed": median["vs_alone"] | {"seed": median["seed"]},
        "router_minus_alone_pooled_over_seeds": paired(pooled, held[ALONE]),
        "router_minus_best_fixed_choice_pooled_over_seeds": paired(pooled, held[best]) | {"choice": best},
        "router_right_choice_rate_over_seeds": statistics.fmean(s["right_choice_rate"] for s in per_seed),
        "decision_time": decision_timing(task, runs[0]["router"], features),
        "memory": memory(runs[0]["router"]) | {"rss_growth_kb_for_10_routers": rss_after - rss_before},
        "with_experiences": with_experiences(task, table, runs, held[ALONE], pooled),
        "value_network": value_network_measurement(task, features, table, held, pooled),
        "per_seed": per_seed,
    }
    write_result(f"tool_router_{task.name}", result)
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
    c.add_argument("--task", choices=TASKS, default="unit_conversion")
    c.add_argument("--k", type=int, default=1, help="attempts per held-out question and choice")
    c.add_argument("--concurrency", type=int, default=8)
    c.add_argument("--experienced", action="store_true", help="the enhanced agent of `practise`, held-out only")
    sub.add_parser("practise", help="practice's text experiences for unit_conversion's agent (about an hour)")
    r = sub.add_parser("report")
    r.add_argument("--task", choices=TASKS, default="unit_conversion")
    args = parser.parse_args()
    random.seed(0)
    if args.command == "collect":
        return asyncio.run(collect(TASKS[args.task], args.k, args.concurrency, args.experienced))
    if args.command == "practise":
        return practise_experiences()
    return report(TASKS[args.task])


if __name__ == "__main__":
    sys.exit(main())
