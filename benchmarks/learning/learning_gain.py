"""Does practice teach what the reward encodes? Baseline, a hand-written reference library and the enhanced agent.

    python benchmarks/learning/learning_gain.py --task NAME [--learner ...]

NAME: whole_items, percent_of, decimals, averages, remainders, mixed_units, portions or gsm8k (TASKS below).

The agent is the embedded Qwen2.5-Coder-0.5B, the learner the 1.5B (the defaults `make demo` uses). Practice
runs the user's command on questions 0.. of the task's data set (`--steps` steps of `--batch_size` questions,
G=4), with validation-gated updates on questions 100.. ; the baseline agent, the agent with the task's
hand-written reference library (benchmarks/reference/<task>_agent.yaml, written before any held-out answer was
looked at) and the enhanced agent are evaluated on the held-out questions 200.. at K=2. Their indexes are
disjoint from practice's and validation's; their texts, from few templates, not always (docs/results.md).
Written to benchmarks/results/learning_efficiency_<task>.json: the three Mean@K, the paired differences with
bootstrap 95% CIs, per kind of question (`level`), the learned library with its operation log, and

    learning efficiency = (enhanced - baseline) / (reference - baseline)

(above 1 when practice beats the hand-written library). Runs for 30-60 minutes on 2 cores; by hand only.
"""

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import exp_rows, practise, run_command, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VALIDATION_OFFSET, HELDOUT_OFFSET = 100, 200


@dataclass
class Task:
    dataset: str
    why: str
    agent_objective: str
    learning_objective: str


TASKS = {
    "whole_items": Task(
        "WholeItems",
        "a division with a remainder whose answer counts whole things: round down for how many can be filled or "
        "bought, up for how many are needed; the 0.5B often rounds the wrong way",
        "input: a word problem whose answer is a count of whole things\noutput: that count, as \\boxed{number}",
        "Learn general habits that make the boxed count right on new problems of this kind: what the question "
        "asks for, and how to turn a division into a count of whole things.",
    ),
    "percent_of": Task(
        "PercentOf",
        "'what percent' questions answered with the percent, a decrease as a positive percent; the 0.5B often "
        "boxes a decrease as a negative percent",
        "input: a word problem that asks for a percent\noutput: the percent, as \\boxed{number}",
        "Learn general habits that make the boxed percent right on new problems of this kind: which quantity to "
        "divide by which, and the form the answer takes.",
    ),
    "decimals": Task(
        "Decimals",
        "an equal share of a third (dollars or metres) answered to two decimal places, as money is; the 0.5B "
        "often boxes a whole number or every digit it computed",
        "input: a word problem whose answer is an amount shared equally\noutput: that amount, as \\boxed{number}",
        "Learn general habits that make the boxed amount right on new problems of this kind: how to divide, and "
        "the form the answer takes.",
    ),
    "averages": Task(
        "Averages",
        "the mean of three whole numbers, not itself whole, answered as the nearest whole number; the 0.5B often "
        "boxes the exact decimal",
        "input: a word problem that asks for an average\noutput: that average, as \\boxed{number}",
        "Learn general habits that make the boxed average right on new problems of this kind: how to compute it, "
        "and the form the answer takes.",
    ),
    "remainders": Task(
        "Remainders",
        "an equal sharing or packing with a remainder, where the question asks how many are left over; the 0.5B "
        "often boxes the quotient (how many each gets, how many bags)",
        "input: a word problem about sharing or packing equally\noutput: the number it asks for, as \\boxed{number}",
        "Learn general habits that make the boxed number right on new problems of this kind: which quantity the "
        "question asks for, and how to find it.",
    ),
    "mixed_units": Task(
        "MixedUnits",
        "how many pieces, bags or cups of a size in small units (cm, g, ml) an amount in large units (m, kg, l) "
        "makes; the 0.5B often divides before converting (3 kg / 250 g = 3/250 bags)",
        "input: a word problem that divides an amount into pieces of a given size\noutput: how many pieces, as "
        "\\boxed{number}",
        "Learn general habits that make the boxed count right on new problems of this kind: how to handle the "
        "units, and how to divide.",
    ),
    "portions": Task(
        "Portions",
        "how many bags of grams a weight in kilograms fills, or cups of millilitres a volume in litres (MixedUnits "
        "without its ropes, which the 0.5B already converts); the 0.5B often divides before converting",
        "input: a word problem that divides an amount into portions of a given size\noutput: how many portions, as "
        "\\boxed{number}",
        "Learn general habits that make the boxed count right on new problems of this kind: how to handle the "
        "units, and how to divide.",
    ),
    "gsm8k": Task(
        "GSM8K_short",
        "GSM8K questions of at most two calculations: the 0.5B is right on about half; its errors are reasoning "
        "slips, not habits (docs/results.md)",
        "input: a grade-school math word problem that takes a few steps\noutput: the number that answers it, as "
        "\\boxed{number}",
        "Learn general problem-solving habits and common pitfalls that make the final answer correct on new word "
        "problems: how to set up and order the steps, what to check before answering, and how to report the answer.",
    ),
}


async def summarise(db_url: str, ids: dict[str, str], practice_id: str, k: int) -> dict:
    from utu.db import Database
    from utu.db.models import EvaluationSample
    from utu.eval.metrics import ScoredAttempt, compare, compute_metrics
    from utu.practice.history import operation_log
    from utu.practice.store import PracticeStore

    async with Database(db_url) as db:
        rows = {
            name: [ScoredAttempt.from_row(r) for r in await exp_rows(db, EvaluationSample, exp_id)]
            for name, exp_id in ids.items()
        }
        store = PracticeStore(db, practice_id)
        steps = await store.steps()
        library = await store.snapshot(steps[-1].step) if steps else None
        operations = await operation_log(db, practice_id)
    metrics = {name: compute_metrics(rows[name], k) for name in rows if rows[name]}
    out: dict = {}
    for name, m in metrics.items():
        levels = {level: v.mean_at_k for level, v in m.by_level.items()}
        out[name] = {"mean": m.mean_at_k, "ci95": m.mean_at_k_ci95, "by_level": levels}
    for name in ("reference", "enhanced"):
        if not rows[name]:  # practice learned nothing: there is no enhanced agent
            out[f"{name}_minus_baseline"] = None
            continue
        c = compare(rows["baseline"], rows[name])
        out[f"{name}_minus_baseline"] = {
            "mean": c.mean_diff,
            "ci95": c.ci95,
            "questions": len(c.rows),
            "excludes_zero": c.ci95[0] > 0 or c.ci95[1] < 0,
        }
    enhanced, reference = out["enhanced_minus_baseline"], out["reference_minus_baseline"]
    # only meaningful when the hand-written library helped (its gain's CI excludes zero)
    useful = enhanced and reference and reference["mean"] > 0 and reference["excludes_zero"]
    out["learning_efficiency"] = enhanced["mean"] / reference["mean"] if useful else None
    out["library"] = library.experiences if library else {}
    out["operations"] = [
        {
            "step": op.step,
            "kind": op.kind,
            "text": op.new_text,
            "status": op.status,
            "reason": op.reason,
            "source_questions": op.source_questions,
        }
        for op in operations
    ]
    out["steps"] = [s.model_dump(mode="json") for s in steps]
    return out


def run_phases(args, task: Task, tag: str, ids: dict[str, str], db_url: str, env: dict, evaluate: list[str]) -> dict:
    """Baseline, reference, practice and enhanced, as a user runs them; seconds per phase. A practice that
    learned nothing (every proposal refused: exit 2, no enhanced agent) leaves the enhanced phase out."""
    fresh = [] if args.reuse else ["--fresh"]
    times = {"baseline": run_command(*evaluate, "--exp_id", ids["baseline"], *fresh, env=env)}
    reference = ROOT / "benchmarks" / "reference" / f"{args.task}_agent.yaml"
    times["reference"] = run_command(
        *evaluate, "--exp_id", ids["reference"], "--agent_config", str(reference), *fresh, env=env
    )
    validation = (
        []
        if args.no_validation
        else [
            "--validation_dataset",
            task.dataset,
            "--validation_offset",
            str(VALIDATION_OFFSET),
            "--validation_size",
            str(args.validation_size),
            "--validation_pass_k",
            "2",
            "--validation_max_drop",
            str(args.max_drop),
            "--validation_min_gain_to_grow",
            args.min_gain_to_grow,
        ]
    )
    practice = [
        "--practice_dataset_name",
        task.dataset,
        "--rollout_data_truncate",
        str(args.steps * args.batch_size),
        "--batch_size",
        str(args.batch_size),
        "--grpo_n",
        "4",
        "--rollout_concurrency",
        "8",
        *validation,
        "--agent_objective",
        task.agent_objective,
        "--learning_objective",
        task.learning_objective,
    ]
    times["practice"], agent = practise(
        "local_mawps", f"{tag}_practice", db_url, env, *practice, nothing_learned_ok=True
    )
    if agent is None:
        print("practice learned nothing (every proposal refused): no enhanced agent to evaluate", flush=True)
        return times
    times["enhanced"] = run_command(
        *evaluate, "--exp_id", ids["enhanced"], "--agent_config", str(agent), "--fresh", env=env
    )
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", choices=TASKS, required=True)
    parser.add_argument("--learner", default="qwen2.5-coder-1.5b")
    parser.add_argument("--steps", type=int, default=3, help="practice steps")
    parser.add_argument("--batch_size", type=int, default=8, help="practice questions per step")
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--validation_size", type=int, default=20)
    parser.add_argument("--max_drop", type=float, default=0.0, help="validation: the largest paired drop allowed")
    parser.add_argument(
        "--min_gain_to_grow",
        default="0",
        help="validation: the gain a library with more experiences must beat ('none': ties pass, as before 2026-11-26)",
    )
    parser.add_argument("--no_validation", action="store_true")
    parser.add_argument("--summary_only", action="store_true", help="write the JSON from the runs already stored")
    parser.add_argument("--note", help="a sentence for the JSON: what this run left out, and why")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the baseline and reference evaluations of a previous run (same task, held-out set and K)",
    )
    args = parser.parse_args()
    task = TASKS[args.task]
    tag = f"le_{args.task}"
    db_path = ROOT / "runs" / "learning_gain.db"
    db_path.parent.mkdir(exist_ok=True)
    db_url = f"sqlite:///{db_path}"
    env = {**os.environ, "UTU_LOCAL_MODEL": "qwen2.5-coder-0.5b", "UTU_LEARNER_LOCAL_MODEL": args.learner}
    evaluate = [
        "scripts/run_eval.py",
        "--config_name",
        "local/gsm8k",
        "--dataset",
        task.dataset,
        "--offset",
        str(HELDOUT_OFFSET),
        "--limit",
        str(args.heldout),
        "--pass_k",
        str(args.k),
        "--concurrency",
        "8",
        "--db_url",
        db_url,
    ]
    ids = {name: f"{tag}_{name}_{args.heldout}_k{args.k}" for name in ("baseline", "reference", "enhanced")}
    if not args.summary_only:
        times = run_phases(args, task, tag, ids, db_url, env, evaluate)
    else:
        times = None  # the phases ran before; only the JSON is written again
    summary = asyncio.run(summarise(db_url, ids, f"{tag}_practice", args.k))
    write_result(
        f"learning_efficiency_{args.task}",
        {
            "task": args.task,
            **({"note": args.note} if args.note else {}),
            "dataset": task.dataset,
            "why_headroom": task.why,
            "agent": "qwen2.5-coder-0.5b",
            "learner": args.learner,
            "practice_set": f"{task.dataset}[0:{args.steps * args.batch_size}]",
            "practice_steps": args.steps,
            "batch_size": args.batch_size,
            "group_size": 4,
            "validation": None
            if args.no_validation
            else (
                f"{task.dataset}[{VALIDATION_OFFSET}:{VALIDATION_OFFSET + args.validation_size}], K=2, "
                f"max_drop {args.max_drop}, min_gain_to_grow {args.min_gain_to_grow}"
            ),
            "heldout_set": f"{task.dataset}[{HELDOUT_OFFSET}:{HELDOUT_OFFSET + args.heldout}]",
            "k": args.k,
            "reference_library": f"benchmarks/reference/{args.task}_agent.yaml",
            "wall_time_s": times,
            **summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
