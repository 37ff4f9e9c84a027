"""Does practice help? Baseline vs enhanced agent on held-out questions, with the embedded models.

    python benchmarks/learning_gain.py [--learner qwen2.5-coder-0.5b|qwen2.5-coder-1.5b] [--heldout 100] [--k 2]

The agent is the embedded Qwen2.5-Coder-0.5B. It practises on the first `--practice` questions of
GSM8K_short (G=4), with validation-gated updates on questions 100..129 (unless --no_validation), and both
agents are evaluated on the held-out questions 200.. (disjoint from both). GSM8K_short (GSM8K questions
whose reference solution makes at most two calculations) because the 0.5B is right on about half of them,
so groups carry contrast; on all of GSM8K it is right on a fifth, on the MAWPS sets on ~85%.
Every phase is the command a user runs; the paired difference and its bootstrap 95% CI come from the
same per-question means `run_eval.py --compare` prints. Runs for 30-60 minutes on 2 cores; by hand only.
"""

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import exp_rows, practise, run_command, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The practice config is local_mawps (the embedded models), whose objectives were written for one-step MAWPS
# problems ("choosing the right operation"); these are GSM8K's (runs 1-7 used MAWPS's).
AGENT_OBJECTIVE = (
    "input: a grade-school math word problem that takes a few steps\n"
    "output: the number that answers it, as \\boxed{number}"
)
LEARNING_OBJECTIVE = (
    "Learn general problem-solving habits and common pitfalls that make the final answer correct on new word "
    "problems: how to set up and order the steps, what to check before answering, and how to report the answer."
)


def baseline_id(args) -> str:
    return f"lg_baseline_{args.dataset}_{args.heldout}_k{args.k}"


async def summarise(db_url: str, tag: str, baseline: str) -> dict:
    from utu.db import Database
    from utu.db.models import EvaluationSample
    from utu.eval.metrics import Attempt, compare, compute_metrics
    from utu.practice.store import PracticeStore

    db = Database(db_url)
    try:
        rows = {}
        for name, exp_id in (("baseline", baseline), ("enhanced", f"{tag}_enhanced")):
            rows[name] = [Attempt.from_row(r) for r in await exp_rows(db, EvaluationSample, exp_id)]
        store = PracticeStore(db, f"{tag}_practice")
        steps = await store.steps()
        library = await store.snapshot(steps[-1].step) if steps else None
    finally:
        await db.dispose()
    result = compare(rows["baseline"], rows["enhanced"])
    metrics = {name: compute_metrics(rows[name], 2) for name in rows}
    learner_tokens = sum(u.prompt_tokens + u.completion_tokens for s in steps for t, u in s.usage.items()
                         if t.startswith("learner"))  # fmt: skip
    return {
        "baseline_mean": metrics["baseline"].mean_at_k, "enhanced_mean": metrics["enhanced"].mean_at_k,
        "paired_difference": result.mean_diff, "paired_ci95": result.ci95, "questions": len(result.rows),
        "library": library.experiences if library else {},
        "steps": [s.model_dump(mode="json") for s in steps],
        "practice_tokens": sum(s.tokens for s in steps), "learner_tokens": learner_tokens,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--learner", default="qwen2.5-coder-0.5b")
    parser.add_argument("--dataset", default="GSM8K_short")
    parser.add_argument("--practice", type=int, default=24, help="practice questions (0..N-1 of --dataset)")
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=8, help="practice questions per step")
    parser.add_argument(
        "--max_drop",
        type=float,
        default=0.05,
        help="validation: the largest paired drop an update may bring (0.05: 3 of 60 attempts)",
    )
    parser.add_argument("--no_validation", action="store_true")
    parser.add_argument("--tag", default=None)
    args = parser.parse_args()
    tag = args.tag or f"lg_{args.learner.replace('.', '').replace('-', '_')}"
    db_path = ROOT / "runs" / "learning_gain.db"  # one baseline serves every learner
    db_path.parent.mkdir(exist_ok=True)
    db_url = f"sqlite:///{db_path}"
    env = {**os.environ, "UTU_LOCAL_MODEL": "qwen2.5-coder-0.5b", "UTU_LEARNER_LOCAL_MODEL": args.learner}
    evaluate = [
        "scripts/run_eval.py", "--config_name", "local/gsm8k", "--dataset", args.dataset, "--offset", "200",
        "--limit", str(args.heldout), "--pass_k", str(args.k), "--concurrency", "8", "--db_url", db_url,
    ]  # fmt: skip
    validation = [] if args.no_validation else [
        "--validation_dataset", args.dataset, "--validation_offset", "100", "--validation_size", "30",
        "--validation_pass_k", "2", "--validation_max_drop", str(args.max_drop),
    ]  # fmt: skip
    times = {"baseline": run_command(*evaluate, "--exp_id", baseline_id(args), env=env)}
    practice = [
        "--practice_dataset_name", args.dataset, "--rollout_data_truncate", str(args.practice),
        "--batch_size", str(args.batch_size), "--grpo_n", "4", "--rollout_concurrency", "8", *validation,
        "--agent_objective", AGENT_OBJECTIVE, "--learning_objective", LEARNING_OBJECTIVE,
    ]  # fmt: skip
    times["practice"], agent = practise("local_mawps", f"{tag}_practice", db_url, env, *practice)
    enhanced = ["--exp_id", f"{tag}_enhanced", "--agent_config", str(agent), "--fresh"]  # a rerun replaces it
    times["enhanced"] = run_command(*evaluate, *enhanced, env=env)
    summary = asyncio.run(summarise(db_url, tag, baseline_id(args)))
    low, high = summary["paired_ci95"]
    write_result(
        f"learning_gain_{tag}",
        {"agent": "qwen2.5-coder-0.5b", "learner": args.learner, "practice_set": f"{args.dataset}[0:{args.practice}]",
         "validation": None if args.no_validation else f"{args.dataset}[100:130], K=2, max_drop {args.max_drop}",
         "batch_size": args.batch_size,
         "heldout_set": f"{args.dataset}[200:{200 + args.heldout}]", "k": args.k, "wall_time_s": times, **summary,
         "ci_excludes_zero": low > 0 or high < 0},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
