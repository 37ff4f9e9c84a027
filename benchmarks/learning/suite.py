"""The pre-registered learning suite: does practice help on tasks nobody tuned it on, and more than GEPA?

    python benchmarks/learning/suite.py fill [--tasks T ...] [--stop_at HH:MM]   # what is missing, in order
    python benchmarks/learning/suite.py run TASK METHOD [--seed N]               # one run
    python benchmarks/learning/suite.py status                                   # what is done, what is left
    python benchmarks/learning/suite.py report                  # -> benchmarks/results/learning_suite.json

Everything below `# --- registration` was committed before the suite's first run and is not changed after it:
the tasks, their slices, the hand-written reference and placebo rules, the objectives, the methods and their
sizes. Each run records the commit that registered the suite and the commit it ran on.

Every method uses the embedded models as a user of `make demo` has them: the agent is Qwen2.5-Coder-0.5B, the
learner (and GEPA's reflection model) Qwen2.5-Coder-1.5B. Each task's data set is uploaded as `suite_<task>`:
rows 0-99 are the practice set (a practice run practises 0-23 in 3 steps of 8, G=4, and tops up from 24-47), rows
100-115 the validation set, rows 200-239 the held-out questions, each a problem (up to names and story) that no
practice or validation row is (`heldout_rows`). Every agent is evaluated on the held-out questions at K=2.

Methods (`METHODS`): the baseline agent; the agent with the hand-written reference rule; with a placebo rule (a
plausible rule for another task's habit); practice as the guide says (the validation gate and the remedies of
configs/practice/local_portions.yaml) with a neutral objective, seeds 0-2; the same with an objective that
names the habit (seed 0); the paper's algorithm as Youtu-Agent ships it (our code with the screening, the gate
and the remedies off; seed 0); GEPA optimising the agent's system prompt from the same practice questions
(rows 0-47) and validation questions, with as many agent calls as practice spent on that task and seed.
Candidates (`CANDIDATES`, registered apart and later): practice with a change, run on the same seeds, reported as
candidate - practice: a change is kept only if the suite mean says it helps.

Each run's result is saved as it finishes, to benchmarks/results/learning_suite/<task>/<method>[_s<seed>].json, and
never overwritten: `fill` skips what is saved, so the suite fills over several sittings. The database is
runs/learning_suite.db. A run takes 6 (an evaluation) to about 80 minutes (practice or GEPA, and its evaluation) on
2 cores; `status` says about how long the runs left take. To keep working in the checkout while it fills, run it
from a worktree of a fixed commit with PYTHONPATH=<worktree> (its runs then use that commit's code) and copy its
results/learning_suite/ back; to go on in a later sitting, check the next commit out in the same worktree, so its
runs/ (the database, a practice stopped midway) carries over. On another machine, where runs/ is empty, `park`
(after stopping the fill) packs the unsaved runs' state into benchmarks/learning/parked.tar.gz to commit, and the
next machine's `fill` unpacks it, so a run stopped midway resumes there too.
"""

import argparse
import asyncio
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import exp_rows, provenance, run_timed  # noqa: E402
from _common import practise as common_practise  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "learning_suite"
DB_PATH = ROOT / "runs" / "learning_suite.db"
DATA = ROOT / "runs" / "learning_suite" / "data"
AGENTS = ROOT / "runs" / "learning_suite" / "agents"
GEPA_RUNS = ROOT / "runs" / "learning_suite" / "gepa"
PARKED = ROOT / "benchmarks" / "learning" / "parked.tar.gz"  # the unsaved runs' state, carried to the next machine
RUNNING = ROOT / "runs" / "learning_suite" / "running.pid"  # a fill or run going on here

# --- registration (pre-registered: not changed after the first run) ---------------------------------------------

AGENT_MODEL, LEARNER_MODEL = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
PRACTICE_ROWS, VALIDATION_OFFSET, HELDOUT_OFFSET = 100, 100, 200
STEPS, BATCH, GROUP, TOP_UP_ROWS = 3, 8, 4, 24  # practice: rows 0-23, top-ups from 24-47
VALIDATION_SIZE, HELDOUT_SIZE, K = 16, 40, 2
SEEDS = (0, 1, 2)
GEPA_TRAIN = STEPS * BATCH + TOP_UP_ROWS  # GEPA's train set: every row practice may roll out (0-47)

NEUTRAL_AGENT_OBJECTIVE = "input: a math word problem\noutput: the number that answers it, as \\boxed{number}"
# The practice default (PracticeArguments.learning_objective), passed as it is so a change of the default does
# not change the suite.
NEUTRAL_LEARNING_OBJECTIVE = "Learn reusable strategies that make the agent answer correctly."


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


@dataclass(frozen=True)
class SuiteTask:
    source: str  # a bundled data set (dataset/<source>.jsonl)
    why: str
    problem: Callable[[dict], object]  # what decides the answer: equal for two rows of the same problem
    reference: tuple[str, ...]  # the hand-written rules, written before any run
    placebo: str  # a plausible rule for another habit
    hinted_objective: str  # names the habit: an ablation, never the headline


ELAPSED_RULE = (
    "When a question asks how many minutes pass between two clock times, turn each time into minutes after "
    "midnight (hours times 60 plus minutes, adding 12 hours after noon) and subtract the start from the end."
)
SIGNED_RULE = (
    "When a quantity goes from below zero to above it or back, the size of the change is the larger value minus "
    "the smaller one (subtracting a negative number adds it); answer with that positive amount."
)
CHAIN_RULE = (
    "When a percent change is followed by another of the new amount, apply them one after the other: multiply by "
    "(1 + p/100) for a rise and by (1 - p/100) for a fall; never add or subtract the percents."
)
AVERAGES_RULE = (
    "When the answer is an average that is not a whole number, round it to the nearest whole number before boxing it."  # noqa: E501
)

TASKS: dict[str, SuiteTask] = {
    "elapsed_time": SuiteTask(
        "ElapsedTime",
        "minutes between two clock times across an hour; written for the suite (scripts/data/make_suite_tasks.py)",
        lambda row: tuple(row["meta"]["problem"]),
        (ELAPSED_RULE,),
        SIGNED_RULE,
        "Learn general habits that make the boxed number of minutes right on new problems of this kind: how to "
        "subtract two clock times when the minutes of the later one are fewer.",
    ),
    "signed_change": SuiteTask(
        "SignedChange",
        "a rise or fall that passes zero, as a positive amount; written for the suite",
        lambda row: tuple(row["meta"]["problem"]),
        (SIGNED_RULE,),
        CHAIN_RULE,
        "Learn general habits that make the boxed change right on new problems of this kind: how to subtract when "
        "one value is below zero, and the sign the answer takes.",
    ),
    "percent_chain": SuiteTask(
        "PercentChain",
        "two percent changes in a row, the second of the new amount; written for the suite",
        lambda row: tuple(row["meta"]["problem"]),
        (CHAIN_RULE,),
        AVERAGES_RULE,
        "Learn general habits that make the boxed amount right on new problems of this kind: how to apply one "
        "percent change after another.",
    ),
    "averages": SuiteTask(
        "Averages",
        "a bundled headroom task (make_headroom_tasks.py): a mean of three whole numbers, to the nearest whole",
        lambda row: tuple(sorted(_numbers(row["question"]))),  # the same three numbers in any order or story
        (AVERAGES_RULE,),
        ELAPSED_RULE,
        "Learn general habits that make the boxed average right on new problems of this kind: how to compute it, "
        "and the form the answer takes.",
    ),
    "gsm8k": SuiteTask(
        "GSM8K_short",
        "public (GSM8K test, Cobbe et al. 2021; rows of at most two calculations): not written by us",
        lambda row: " ".join(row["question"].lower().split()),
        (
            "When a problem takes several steps, write each intermediate quantity with its value before using it "
            "in the next calculation.",
            "When you are about to answer, re-read the question's last sentence and make sure the number you box "
            "is exactly the quantity it asks for.",
            "When a quantity is a percent or a fraction of another, first compute that part of the whole, then add "
            "or subtract it as the question says.",
            "When a rate is given per unit (per hour, per item, each), multiply the rate by the number of units to "
            "get the total.",
            "When you give the final answer, put only the number in \\boxed{} with no units, words or currency signs.",
        ),
        ELAPSED_RULE,
        "Learn general problem-solving habits and common pitfalls that make the final answer correct on new word "
        "problems: how to set up and order the steps, what to check before answering, and how to report the "
        "answer.",
    ),
}

# method -> seeds it runs with (None: one run, no seed)
METHODS: dict[str, tuple[int | None, ...]] = {
    "baseline": (None,),
    "reference": (None,),
    "placebo": (None,),
    "practice": SEEDS,
    "gepa": SEEDS,
    "hinted": (0,),
    "paper": (0,),
}

# --- end of registration -----------------------------------------------------------------------------------------

# --- candidates: changes to practice, each judged by the suite mean ----------------------------------------------
# A candidate is practice as the guide says with more flags, run on the same tasks and seeds; the report gives
# candidate - practice, paired by task and seed, and across the suite. A candidate is registered here in a commit
# before its first run and never changed after it (its runs record that commit): another idea is another name.
# A candidate's seeds after the first run only if its first seed beat practice's on the suite mean (`promising`).
# fewer_refusals and lower_bar come from what the screening and the gate refused in the first practice runs' operation
# logs (practice and validation questions: no held-out question was looked at to choose them); no_gate asks whether
# the gate should be on by default.


@dataclass(frozen=True)
class Candidate:
    why: str
    adds: tuple[str, ...]  # flags (or config overrides) added to practice's command
    drop: tuple[str, ...] = ()  # flags of practice's command left out, with their values

    def applied_to(self, flags: list[str]) -> list[str]:
        """Practice's flags with this change."""
        if missing := set(self.drop) - set(flags):  # a misspelt drop would leave practice as it is, unnoticed
            raise ValueError(f"the candidate drops flags practice's command does not give: {sorted(missing)}")
        dropped = {i + k for i, a in enumerate(flags) if a in self.drop for k in (0, 1)}  # a flag and its value
        return [a for i, a in enumerate(flags) if i not in dropped] + list(self.adds)


CANDIDATES: dict[str, Candidate] = {
    "fewer_refusals": Candidate(
        "the screening no longer refuses a rule for saying its topic word twice ('Subtract noon temperature from "
        "morning temperature.', refused on signed_change; 'subtract the starting floor from the ending floor', on "
        "the kept-aside task) nor for saying what to do without a directive word ('When the start time and end "
        "time are given, the agent can calculate the duration by subtracting the start time from the end time.', "
        "refused on elapsed_time): the gate judges them",
        ("--screening_object_repeats", "0", "--screening_require_directive", "false"),
    ),
    "lower_bar": Candidate(
        "a rule that grows the library must gain more than 0.05 on validation (2 of its 32 attempts net) instead "
        "of the demo's 0.15, tuned on Portions: on elapsed_time the gate refused a rule that gained +0.094 alone",
        ("--validation_min_gain_to_grow", "0.05"),
    ),
    "no_gate": Candidate(
        "no validation gate (every screened update applied, as in a config without `validation:`): whether the "
        "gate, which triples practice's agent calls, earns them on tasks nobody tuned it on, and so whether it "
        "should be on by default",
        ("practice.validation=null",),
        drop=("--validation_dataset", "--validation_offset", "--validation_size", "--validation_pass_k"),
    ),
    "all_lost": Candidate(
        "more groups learned from per rollout (the issue's 'more contrast per agent call'; what the gate then "
        "validates costs agent calls too): the first 3 groups of a step whose attempts all lost are studied "
        "against the ground truth instead of skipped (`practice.all_lost_groups_per_step`; 3 as top_up's "
        "min_groups): the 0.5B is seldom right, and in seed 0's practice runs the learner studied 15 of 32 groups "
        "on averages, 17 of 40 on gsm8k, at most 22 of 48 on elapsed_time (its 22 comparison calls, re-asks and "
        "second looks among them), and 1 of 48 in elapsed_time's fewer_refusals run",
        ("--all_lost_groups_per_step", "3"),
    ),
}


def run_name(method: str, seed: int | None) -> str:
    return method if seed is None else f"{method}_s{seed}"


def run_exp_id(task: str, method: str, seed: int | None) -> str:
    """The exp_id of a run's practice, and the prefix of all its experiments (its evaluations, its GEPA's)."""
    return f"suite_{task}_{run_name(method, seed)}"


def result_path(task: str, method: str, seed: int | None) -> Path:
    return RESULTS / task / f"{run_name(method, seed)}.json"


def plan() -> list[tuple[str, str, int | None]]:
    """Every run, in the order `fill` takes them: each task's fixed points first, then, seed by seed across tasks,
    practice, then GEPA with its budget (the goal's comparison, so a partial suite answers it first), then the
    candidates' first seed, then the one-seed ablations, then the candidates' other seeds, so a partial suite is
    balanced."""
    runs = [(t, m, None) for t in TASKS for m in ("baseline", "reference", "placebo")]
    for seed in SEEDS:
        runs += [(t, m, seed) for t in TASKS for m in ("practice", "gepa")]
    runs += [(t, c, SEEDS[0]) for c in CANDIDATES for t in TASKS]
    runs += [(t, m, 0) for m in ("hinted", "paper") for t in TASKS]
    runs += [(t, c, seed) for seed in SEEDS[1:] for c in CANDIDATES for t in TASKS]
    return runs


def registered_in(candidate: str | None = None) -> str | None:
    """The commit that added this file: the registration every run is measured against; or the one that added a
    candidate."""
    added = ["-S", f'"{candidate}": Candidate('] if candidate else ["--diff-filter=A"]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "log", *added, "--format=%H", "--", "benchmarks/learning/suite.py"],
        capture_output=True,
        text=True,
    )
    return done.stdout.split()[-1] if done.returncode == 0 and done.stdout.split() else None


# --- data ---------------------------------------------------------------------------------------------------------


def source_rows(task: SuiteTask) -> list[dict]:
    path = ROOT / "dataset" / f"{task.source}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def heldout_rows(task: SuiteTask, rows: list[dict]) -> list[dict]:
    """The first HELDOUT_SIZE rows from HELDOUT_OFFSET on whose problem no earlier row (practice, validation or
    held-out) has."""
    seen = {task.problem(r) for r in rows[:HELDOUT_OFFSET]}
    out = []
    for row in rows[HELDOUT_OFFSET:]:
        if task.problem(row) not in seen:
            seen.add(task.problem(row))
            out.append(row)
        if len(out) == HELDOUT_SIZE:
            return out
    raise SystemExit(f"{task.source}: fewer than {HELDOUT_SIZE} held-out rows are new problems")


def suite_rows(name: str) -> list[dict]:
    """The suite's data set of one task: rows 0-199 of its source, then its held-out rows (200-239)."""
    task = TASKS[name]
    rows = source_rows(task)
    return [{**r, "dataset": dataset_name(name)} for r in rows[:HELDOUT_OFFSET] + heldout_rows(task, rows)]


def dataset_name(task: str) -> str:
    return f"suite_{task}"


def upload(task: str, env: dict[str, str]) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{task}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in suite_rows(task)))
    args = ["--file_path", str(path), "--dataset_name", dataset_name(task), "--db_url", db_url(), "--replace"]
    _, code = run_timed("scripts/data/upload_dataset.py", *args, env=env)
    if code != 0:
        raise SystemExit(f"upload of {task} failed (exit {code})")


def db_url() -> str:
    return f"sqlite:///{DB_PATH}"


# --- one run ------------------------------------------------------------------------------------------------------


def model_env() -> dict[str, str]:
    """The suite's models, and one state folder so every command (and GEPA, in this process) shares their
    servers."""
    return {
        **os.environ,
        "UTU_LOCAL_MODEL": AGENT_MODEL,
        "UTU_LEARNER_LOCAL_MODEL": LEARNER_MODEL,
        "UTU_STATE_DIR": os.environ.get("UTU_STATE_DIR") or str(ROOT / ".utu"),
    }


def agent_yaml(name: str, instructions: str | None = None, rules: tuple[str, ...] = ()) -> Path:
    """An agent config: the bundled local_math_agent, with other instructions or a library."""
    import yaml

    from utu.config import load_agent_config

    agent = load_agent_config("practice/local_math_agent").model_dump(mode="json", exclude_none=True)
    if instructions is not None:
        agent["instructions"] = instructions
    agent["experiences"] = {f"G{i}": rule for i, rule in enumerate(rules)}
    agent["experience_placement"] = "system"
    AGENTS.mkdir(parents=True, exist_ok=True)
    path = AGENTS / f"{name}.yaml"
    path.write_text(yaml.safe_dump(agent, sort_keys=False, allow_unicode=True))
    return path


EVAL_CONFIG = "local/gsm8k"  # every task's held-out evaluation (its verifier, timeout and scoring)


def evaluate(task: str, exp_id: str, agent: Path | None, env: dict[str, str]) -> float:
    args = [
        "scripts/run_eval.py",
        "--config_name",
        EVAL_CONFIG,
        "--dataset",
        dataset_name(task),
        "--offset",
        str(HELDOUT_OFFSET),
        "--limit",
        str(HELDOUT_SIZE),
        "--pass_k",
        str(K),
        "--concurrency",
        "8",
        "--db_url",
        db_url(),
        "--exp_id",
        exp_id,  # no --fresh: an evaluation stopped midway (a sitting's end) runs only what is missing
        *(["--agent_config", str(agent)] if agent else []),
    ]
    seconds, code = run_timed(*args, env=env)
    if code != 0:
        raise SystemExit(f"evaluation {exp_id} failed (exit {code})")
    return seconds


def practice_args(task: str, method: str, seed: int) -> list[str]:
    """The command line run_training_free_GRPO.py is given for one method."""
    config, flags = practice_command(task, method, seed)
    return ["--config_name", config, *flags]


def practice_command(task: str, method: str, seed: int) -> tuple[str, list[str]]:
    """The practice config and flags of one method: as the guide says (`local_portions`'s gate and remedies) or
    the paper's algorithm (`local_mawps` with the screening, restatement and cap off: no gate, no remedies), or a
    candidate (practice's, changed)."""
    if method in CANDIDATES:
        config, flags = practice_command(task, "practice", seed)
        return config, CANDIDATES[method].applied_to(flags)
    spec = TASKS[task]
    common = [
        "--practice_dataset_name",
        dataset_name(task),
        "--rollout_data_truncate",
        str(STEPS * BATCH),
        "--batch_size",
        str(BATCH),
        "--grpo_n",
        str(GROUP),
        "--rollout_concurrency",
        "8",
        "--seed",
        str(seed),
        "--agent_objective",
        NEUTRAL_AGENT_OBJECTIVE,
        "--learning_objective",
        spec.hinted_objective if method == "hinted" else NEUTRAL_LEARNING_OBJECTIVE,
        "--num_experiences_per_query",
        "1",
    ]
    if method == "paper":
        return "local_mawps", [
            *common,
            "--screening_enabled",
            "false",
            "--restate_refused",
            "false",
            "--learner_retries",
            "0",
            "--max_experiences",
            "none",
        ]
    return "local_portions", [
        *common,
        "--validation_dataset",
        dataset_name(task),
        "--validation_offset",
        str(VALIDATION_OFFSET),
        "--validation_size",
        str(VALIDATION_SIZE),
        "--validation_pass_k",
        str(K),
    ]


def practise(task: str, method: str, seed: int, env: dict[str, str]) -> tuple[float, Path | None, str]:
    """A practice run and its enhanced agent (None: it kept nothing, the agent is the baseline). Never --fresh: a
    practice stopped midway (a sitting's end) resumes from its saved steps; another config is refused."""
    exp_id = run_exp_id(task, method, seed)
    config, flags = practice_command(task, method, seed)
    seconds, agent = common_practise(config, exp_id, db_url(), env, *flags, nothing_learned_ok=True, fresh=False)
    return seconds, agent, exp_id


async def heldout_rewards(exp_id: str) -> dict[str, list[float]]:
    """dataset index -> the K rewards of one evaluation."""
    from utu.db import Database
    from utu.db.models import EvaluationSample

    async with Database(db_url()) as db:
        rows = await exp_rows(db, EvaluationSample, exp_id)
    out: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: (r.dataset_index, r.attempt)):
        out.setdefault(str(r.dataset_index), []).append(float(r.reward or 0.0))
    if len(out) != HELDOUT_SIZE or any(len(v) != K for v in out.values()):
        raise SystemExit(f"{exp_id}: expected {HELDOUT_SIZE} questions × {K} attempts in the database")
    return out


async def agent_attempts(db, exp_id: str) -> int:
    """The agent attempts a practice stored: its rollouts (<exp_id>_epoch_N) and its validations
    (<exp_id>_val_<library>), one agent call each; not its held-out evaluation."""
    from sqlalchemy import func, or_, select

    from utu.db.models import EvaluationSample

    named = EvaluationSample.exp_id.startswith
    query = select(func.count()).where(
        or_(named(f"{exp_id}_epoch_", autoescape=True), named(f"{exp_id}_val_", autoescape=True))
    )
    async with db.sessions() as session:
        return int((await session.execute(query)).scalar_one())


async def practice_record(exp_id: str) -> dict:
    """What a practice run spent and kept, from the database: calls and tokens by stage, the library, every
    proposal with its outcome."""
    from utu.db import Database
    from utu.db.models import Experiment
    from utu.practice.history import operation_log
    from utu.practice.store import PracticeStore

    async with Database(db_url()) as db:
        store = PracticeStore(db, exp_id)
        steps = await store.steps()
        library = await store.snapshot(steps[-1].step) if steps else None
        operations = await operation_log(db, exp_id)
        attempts = await agent_attempts(db, exp_id)
        async with db.sessions() as session:
            experiment = await session.get(Experiment, exp_id)
    usage: dict[str, dict[str, int]] = {}
    for s in steps:
        for tag, u in s.usage.items():
            total = usage.setdefault(tag, {"calls": 0, "tokens": 0})
            total["calls"] += u.calls
            total["tokens"] += u.prompt_tokens + u.completion_tokens
    agent = [t for t in usage if not t.startswith("learner")]
    return {
        # counted from the database: a step's usage tally misses the attempts made before a sitting stopped in it
        "agent_calls": attempts,
        "agent_calls_tallied": sum(usage[t]["calls"] for t in agent),
        "agent_tokens": sum(usage[t]["tokens"] for t in agent),
        "learner_calls": sum(u["calls"] for t, u in usage.items() if t not in agent),
        "learner_tokens": sum(u["tokens"] for t, u in usage.items() if t not in agent),
        "usage_by_stage": usage,
        # the part of its resolved config that shapes results, as its fingerprint has it (practice's settings, its
        # data's digests, the agent; not timeouts and the like): seeds that differ in more than their seed ran
        # different practice
        "shaping_config": experiment.config if experiment else None,
        # what each step had to learn from: groups studied (all-lost ones among them) and skipped, top-up, tries
        "steps": [
            {
                "step": s.step,
                "groups_used": s.groups_used,
                "groups_skipped": s.groups_skipped,
                "groups_all_lost": s.groups_all_lost,
                "questions_added": s.questions_added,
                "learner_tries": s.learner_tries,
            }
            for s in steps
        ],
        "library": library.experiences if library else {},
        "operations": [
            {"step": op.step, "kind": op.kind, "text": op.new_text, "status": op.status, "reason": op.reason}
            for op in operations
        ],
    }


def run(task: str, method: str, seed: int | None) -> Path:
    """One run of the plan, saved to its result file (refused if that file exists)."""
    path = result_path(task, method, seed)
    if path.exists():
        raise SystemExit(f"{path.relative_to(ROOT)} exists: a result is never overwritten")
    spec, env, name = TASKS[task], model_env(), run_name(method, seed)
    os.environ.update(env)  # GEPA calls the models from this process
    measured = provenance()  # the commit the run starts on
    exp_id = f"{run_exp_id(task, method, seed)}_heldout"
    record: dict = {}
    registered = check_candidate(method, seed) if method in CANDIDATES else None
    upload(task, env)
    if method in ("baseline", "reference", "placebo"):
        rules = {"baseline": (), "reference": spec.reference, "placebo": (spec.placebo,)}[method]
        agent = agent_yaml(f"{task}_{method}", rules=rules) if rules else None
        record["seconds"] = {"evaluation": evaluate(task, exp_id, agent, env)}
        record["rules"] = list(rules)
    elif method in ("practice", "hinted", "paper") or method in CANDIDATES:
        assert seed is not None
        if method in CANDIDATES:
            change = CANDIDATES[method]
            record["candidate"] = {
                "adds": list(change.adds),
                "drop": list(change.drop),
                "registered_in": registered,
            }
        seconds, agent, practice_id = practise(task, method, seed, env)
        record |= asyncio.run(practice_record(practice_id))
        record["kept_nothing"] = agent is None
        record["seconds"] = {"practice": seconds}
        if agent is not None:
            record["seconds"]["evaluation"] = evaluate(task, exp_id, agent, env)
    else:  # gepa
        assert seed is not None
        practice = result_path(task, "practice", seed)
        if not practice.exists():
            raise SystemExit(f"GEPA's budget is practice's agent calls: run {task} practice --seed {seed} first")
        budget = read_result(practice)["agent_calls"]
        from gepa_baseline import optimise_prompt

        start = time.perf_counter()
        rows = suite_rows(task)
        found = optimise_prompt(
            train=rows[:GEPA_TRAIN],
            val=rows[VALIDATION_OFFSET : VALIDATION_OFFSET + VALIDATION_SIZE],
            seed_prompt=seed_prompt(),
            budget=budget,
            seed=seed,
            run_dir=GEPA_RUNS / f"{task}_{name}",
        )
        record |= found
        record["budget_agent_calls"] = budget
        record["seconds"] = {"gepa": time.perf_counter() - start}
        record["seed_prompt"] = seed_prompt()
        # its best prompt the one it started from: the baseline agent, as practice that kept nothing
        record["kept_nothing"] = found["best_prompt"] == record["seed_prompt"]
        if not record["kept_nothing"]:
            agent = agent_yaml(f"{task}_{name}", instructions=found["best_prompt"])
            record["seconds"]["evaluation"] = evaluate(task, exp_id, agent, env)
    kept_nothing = record.get("kept_nothing", False)
    rewards = None if kept_nothing else asyncio.run(heldout_rewards(exp_id))
    result = {
        "task": task,
        "method": method,
        "seed": seed,
        "registered_in": registered_in(),
        **measured,
        "dataset": dataset_name(task),
        "source": spec.source,
        "agent": AGENT_MODEL,
        "learner": LEARNER_MODEL,
        "heldout": f"{dataset_name(task)}[{HELDOUT_OFFSET}:{HELDOUT_OFFSET + HELDOUT_SIZE}], K={K}",
        # a run that kept nothing leaves the baseline agent: its held-out rewards are the baseline's
        "heldout_rewards": rewards,
        "heldout_mean": None if rewards is None else sum(map(sum, rewards.values())) / (HELDOUT_SIZE * K),
        **record,
    }
    save_once(path, json.dumps(result, indent=2) + "\n")
    print(f"saved {path.relative_to(ROOT)}", flush=True)
    return path


def save_once(path: Path, text: str) -> None:
    """Write a result whole or not at all (a crash or a full disk mid-write leaves no file that `fill` would take
    for done), and never over one a fill running beside this one saved first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")  # .gitignore'd
    try:
        with partial.open("w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # on disk before it is named a result
        try:
            os.link(partial, path)  # atomic, and refused if the result exists
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: exclusive create, never over another
            with path.open("x") as out:
                out.write(text)
    finally:
        partial.unlink(missing_ok=True)


def read_result(path: Path) -> dict:
    """A saved result, or one line that names its file and says what to do (a result is only ever written whole,
    so a broken one was edited or damaged by hand)."""
    fix = "restore it from git, or delete it to run that run again"
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as broken:
        raise SystemExit(f"{path}: unreadable result ({type(broken).__name__}: {broken}); {fix}") from None
    if not isinstance(result, dict) or not {"task", "method"} <= result.keys():
        raise SystemExit(f"{path}: not a suite result (a JSON object with its task and method); {fix}")
    rewards = result.get("heldout_rewards")
    if rewards is not None and not (
        isinstance(rewards, dict) and all(isinstance(r, list) and r for r in rewards.values())
    ):
        raise SystemExit(f"{path}: heldout_rewards must map each question to its list of rewards; {fix}")
    return result


def seed_prompt() -> str:
    """The suite agent's instructions: GEPA's seed prompt."""
    from utu.config import load_agent_config

    return load_agent_config("practice/local_math_agent").instructions


# --- commands -----------------------------------------------------------------------------------------------------


def committed_as_is() -> bool:
    """Whether this file is as its last commit has it (the candidates run as registered)."""
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "benchmarks/learning/suite.py"],
        capture_output=True,
        text=True,
    )
    return changed.returncode == 0 and not changed.stdout.strip()


def check_candidate(name: str, seed: int | None) -> str:
    """The commit that registered a candidate, which runs only as registered (committed, and this file as
    committed) and, past its first seed, only while `promising`."""
    registered = registered_in(name)
    if registered is None or not committed_as_is():
        raise SystemExit(
            f"candidate {name}: commit benchmarks/learning/suite.py first (a candidate runs as registered)"
        )
    if seed != SEEDS[0] and not promising(name):
        raise SystemExit(
            f"candidate {name}: its seed {SEEDS[0]} has not beaten practice's on the suite mean (or not run on every "
            "task yet), so its other seeds do not run"
        )
    return registered


def promising(candidate: str) -> bool:
    """Whether a candidate's other seeds run: only once its first seed ran on every task and beat practice's first
    seed on the suite mean (its point estimate). A futility stop, set with the candidates: it can only drop a
    candidate that might have helped, never keep one that does not."""
    from suite_report import first_seed_difference

    difference = first_seed_difference(candidate)
    return difference is not None and difference > 0


def unsaved_runs() -> dict[str, Path]:
    """Each run of the plan not saved yet: its exp_id (its experiments' prefix) -> its GEPA run folder."""
    return {
        run_exp_id(task, method, seed): GEPA_RUNS / f"{task}_{run_name(method, seed)}"
        for task, method, seed in plan()
        if not result_path(task, method, seed).exists()
    }


def begun_runs() -> set[str]:
    """The exp_ids of unsaved runs that began here (their rows in the database, or a GEPA run folder)."""
    import suite_park

    runs = unsaved_runs()
    begun = {exp_id for exp_id, folder in runs.items() if folder.is_dir()}
    if DB_PATH.is_file():
        try:
            with closing(sqlite3.connect(f"file:{DB_PATH}?mode=ro", uri=True)) as db:
                begun |= suite_park.with_rows(db, set(runs))
        except sqlite3.Error as unreadable:  # an order, not a result: the plan's order serves
            print(f"{DB_PATH}: {unreadable}; runs begun in it are not put first", flush=True)
    return begun


def park(archive: Path) -> int:
    """Pack the unsaved runs' state for the next machine; refused while a fill or run goes on here (what it does
    after the packing would be lost, and GEPA's state may be half-written)."""
    import suite_park

    if (pid := running_pid()) is not None:
        raise SystemExit(f"a fill or run is going on here (pid {pid}): stop it first (pkill -f 'suite.py fill')")
    if not archive.name.endswith(".tar.gz") or archive.is_dir():
        raise SystemExit(f"--to {str(archive)!r}: give a .tar.gz file to write, such as {PARKED}")
    if blocking := next((p for p in archive.parents if p.exists() and not p.is_dir()), None):
        raise SystemExit(f"--to {archive}: {blocking} is a file, not a folder")
    if archive.exists() and not suite_park.is_parked_file(archive):  # never over a result or anything else
        raise SystemExit(f"--to {archive}: it exists and is not a parked file: delete it or give a new name")
    try:
        carried = suite_park.park(DB_PATH, unsaved_runs(), archive)
    except OSError as failed:  # no suite database, or the archive cannot be written there
        raise SystemExit(str(failed)) from None
    print(f"parked {', '.join(carried) or 'nothing'} in {archive} ({archive.stat().st_size // 1024} KiB)")
    return 0


def running_pid() -> int | None:
    """The pid of a fill or run going on here, if any."""
    try:
        pid = int(RUNNING.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):  # no pid file, or its process is gone
        return None
    return pid


def unpark_on_a_new_machine() -> None:
    """Unpack the parked runs' state where no suite database is yet, so those runs resume."""
    import suite_park

    if not PARKED.exists() or DB_PATH.exists():
        return
    try:
        carried = suite_park.unpark(PARKED, DB_PATH, GEPA_RUNS)
    except suite_park.ParkedFileError as broken:
        raise SystemExit(f"{broken}; delete it to start its runs over") from None
    print(f"unparked {', '.join(carried) or 'nothing'} from {PARKED}", flush=True)


def fill(tasks: list[str], stop_at: datetime | None) -> int:
    """Every missing run of the plan, in order, those begun in an earlier sitting first (so one run's halves are
    seldom made by commits far apart); stops before a run when `stop_at` has passed. A run that fails is reported
    and left missing (the next fill tries it again); the exit code says whether any failed."""
    failures = 0
    begun = begun_runs()
    for task, method, seed in sorted(plan(), key=lambda run: run_exp_id(*run) not in begun):
        if task not in tasks or result_path(task, method, seed).exists():
            continue
        if stop_at and datetime.now() >= stop_at:
            print("stop time reached; `fill` again to go on", flush=True)
            return 1 if failures else 0
        if method == "gepa" and not result_path(task, "practice", seed).exists():
            continue
        if method in CANDIDATES and seed != SEEDS[0] and not promising(method):
            continue
        print(f"=== {task} {run_name(method, seed)} ({datetime.now():%H:%M})", flush=True)
        try:
            run(task, method, seed)
        except (SystemExit, Exception) as failed:  # left missing; the next runs go on (fill runs unattended)
            print(f"failed: {task} {run_name(method, seed)}: {failed!r}", flush=True)
            failures += 1
    return 1 if failures else 0


def status() -> int:
    """Each task's runs: saved, missing (?), or not to run since their candidate stopped after its first seed (-)."""
    from suite_report import first_seed_difference, stopped_after_first_seed

    first = {c: first_seed_difference(c) for c in CANDIDATES}
    stopped = {c for c in CANDIDATES if stopped_after_first_seed(first[c])}
    done = [r for r in plan() if result_path(*r).exists()]
    print(f"{len(done)} of {len(plan())} runs saved; stopped after their first seed: {', '.join(stopped) or 'none'}")
    for task in TASKS:
        cells = [
            run_name(m, s)
            + ("" if result_path(task, m, s).exists() else "-" if m in stopped and s != SEEDS[0] else "?")
            for t, m, s in plan()
            if t == task
        ]
        print(f"{task:15s} {' '.join(cells)}")
    undecided = {c for c in CANDIDATES if first[c] is None}  # its first seed not yet run on every task
    missing = [r for r in plan() if not result_path(*r).exists() and r[1] not in stopped]
    maybe = [r for r in missing if r[1] in undecided and r[2] != SEEDS[0]]
    left = [r for r in missing if r not in maybe]
    print(
        f"left: {len(left)} runs, about {seconds_left(done, left) / 3600:.0f} hours at the saved runs' median times"
        + (f"; {len(maybe)} more if their candidate's first seed beats practice's" if maybe else "")
    )
    return 0


def family(method: str, seed: int | None) -> str:
    """Runs that take about as long: an evaluation alone (the unseeded methods), a practice (and its evaluation),
    GEPA (and its)."""
    if seed is None:
        return "evaluation"
    return "gepa" if method == "gepa" else "practice"


def seconds_left(done: list[tuple[str, str, int | None]], left: list[tuple[str, str, int | None]]) -> float:
    """Seconds the runs `left` take, each at the median time of the saved runs of its family (a run resumed over
    sittings records its last sitting only, which a median weighs less than a mean)."""
    seconds: dict[str, list[float]] = {}
    for task, method, seed in done:
        took = read_result(result_path(task, method, seed)).get("seconds", {})
        seconds.setdefault(family(method, seed), []).append(sum(took.values()))
    everyone = [t for times in seconds.values() for t in times]
    typical = {f: statistics.median(seconds.get(f) or everyone or [0.0]) for f in ("evaluation", "practice", "gepa")}
    return sum(typical[family(method, seed)] for _, method, seed in left)


def next_time(text: str) -> datetime:
    """HH:MM's next coming: 01:00 given at 22:00 is tomorrow's."""
    try:
        clock = datetime.strptime(text, "%H:%M")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time as HH:MM (such as 23:30), got {text!r}") from None
    now = datetime.now()
    stop = now.replace(hour=clock.hour, minute=clock.minute, second=0, microsecond=0)
    return stop + timedelta(days=1) if stop < now else stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fill")
    f.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    f.add_argument("--stop_at", type=next_time, help="HH:MM (its next coming): start no run after it")
    r = sub.add_parser("run")
    r.add_argument("task", choices=TASKS)
    r.add_argument("method", choices=[*METHODS, *CANDIDATES])
    r.add_argument("--seed", type=int)
    sub.add_parser("status")
    rep = sub.add_parser("report")
    rep.add_argument(
        "--into", type=Path, action="append", default=[], help="put the tables between FILE's marker lines"
    )
    p = sub.add_parser("park", help="pack the unsaved runs' state to commit, for the next machine's fill")
    p.add_argument("--to", type=Path, default=PARKED)
    args = parser.parse_args()
    if args.command == "run" and args.seed not in (seeds := METHODS.get(args.method, SEEDS)):
        parser.error(f"{args.method} runs with seed {' or '.join(map(str, seeds))}")
    if args.command in ("fill", "run"):
        unpark_on_a_new_machine()
        RUNNING.parent.mkdir(parents=True, exist_ok=True)
        RUNNING.write_text(str(os.getpid()))  # `park` refuses while it goes on
        try:
            if args.command == "fill":
                return fill(args.tasks, args.stop_at)
            run(args.task, args.method, args.seed)
            return 0
        finally:
            RUNNING.unlink(missing_ok=True)
    if args.command == "status":
        return status()
    if args.command == "park":
        return park(args.to)
    from suite_report import full, markdown, write_into, write_report

    report = json.loads(write_report().read_text())
    tables = markdown(report)
    print(tables, end="")
    if args.into and not full(report):  # pre-registered: nothing is reported from a partial suite
        saved, planned = report["runs_saved"], report["runs_planned"]
        raise SystemExit(f"--into: the suite is not full ({saved} of {planned} runs saved): nothing written")
    write_into(args.into, tables)
    return 0


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
        sys.exit(code)
    except BrokenPipeError:  # `suite.py status | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own flush at exit would fail)
        sys.exit(0)
