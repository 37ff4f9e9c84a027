"""How often does one practice step's learner write a rule the library keeps? The learner replayed on recorded groups.

    python benchmarks/learning/learner_yield.py [--db_url URL] [--exp_id demo_practice] [--experiences 1 2]
                                                [--passes 1] [--n 4]

A practice step's outcome is noisy twice over: which groups the agent's attempts make, and what the learner
writes from them. This benchmark holds the first fixed. It takes the judged attempts of step 0 of a recorded
practice run (by default the one `make demo` leaves, `demo_practice`) and runs the learner on them `--n` times
per setting: stages 1-3 on every group, consolidation and restating (stages 4-5), then the screening, against
an empty library. This is what `practice_step` does before its validation gate. The setting varied is
`num_experiences_per_query`, the experiences the learner may write per group; `--passes` sets `learner_passes`,
the times it compares each group, for every setting.

Each replicate counts the proposals, the experiences the screening keeps, and the kept ones that say the
key word: `--key convert` by default. On Portions, a kept rule without it is the trivial "divide the total by
the portion", which the agent already does. The key word is a proxy: "convert the juice from litres to cups"
has it too, so read the kept texts (they are in the JSON) before counting a rule as right. The config is
`--config_name` (default `local_portions`, which must practise on the recorded run's data set) with the learner
`--learner`. Writes benchmarks/results/learner_yield_<learner>[_passes<N>].json, with what the recorded step
itself kept (to tell which run it replayed). By hand only: a replicate is one step's learner, 2 to 6 minutes for
the 1.5B on 2 cores (per pass).
"""

import argparse
import asyncio
import os
import sys
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402


async def recorded_step(db, exp_id: str) -> list:
    """The judged attempt rows of step 0 of practice run `exp_id`."""
    from sqlalchemy import select

    from utu.db.models import EvaluationSample

    async with db.sessions() as s:
        rows = list(
            await s.scalars(
                select(EvaluationSample)
                .where(EvaluationSample.owner == exp_id, EvaluationSample.step == 0)
                .order_by(EvaluationSample.dataset_index, EvaluationSample.attempt)
            )
        )
    if not rows or any(r.stage not in ("judged", "failed") for r in rows):
        raise SystemExit(f"error: practice run {exp_id!r} has no fully judged step 0 here: run `make demo` first")
    return rows


async def replicate(loop, rows, key: str, second_look: bool = False) -> dict:
    from utu.practice.library import Library
    from utu.practice.outcomes import Refusal
    from utu.practice.retries import refusals_for_learner, refused_for_what_they_say
    from utu.practice.rollouts import as_attempt
    from utu.practice.step import Step

    groups = defaultdict(list)
    for row in rows:
        groups[row.dataset_index].append(as_attempt(row))
    start = time.perf_counter()
    empty = Library()
    outcomes = await asyncio.gather(*(loop.updater.learn(g, empty) for g in groups.values()))
    failures = [f for o in outcomes for f in o.failures]
    library, records = await loop.propose(Step(0, 0, 0, {}, rows=rows, outcomes=outcomes, failures=failures), empty)
    result = {
        "seconds": round(time.perf_counter() - start, 1),
        "groups_studied": sum(o.used for o in outcomes),
        **what_became(library, records, key),
        "learner_errors": len(failures),
    }
    if second_look and not result["kept_with_key"]:
        # As if the gate refused what the screening kept (it would have, with no right rule among it): the
        # learner's second look (`learner_retries`), shown every refusal unless the config says not to.
        for r in records:
            if r.status == "applied":
                r.refuse(Refusal.GATE, "taken as refused by the gate (replay)")
        shown = loop.p.learner_retry_shows_refusals
        refused = refusals_for_learner(records, loop.p.given_ground_truth) if shown else []
        start = time.perf_counter()
        again = await asyncio.gather(*(loop.updater.learn_again(o, empty, refused) for o in outcomes))
        step = Step(0, 0, 0, {}, rows=rows, outcomes=again, failures=failures)
        step.refused_before = refused_for_what_they_say(records)
        library, records = await loop.propose(step, empty)
        result["second_look"] = {
            "seconds": round(time.perf_counter() - start, 1),
            "shown": refused,
            **what_became(library, records, key),
        }
    return result


def same_data_set(rows, config, args) -> None:
    """Refuse to replay a recorded run with a config that practises on another data set."""
    if {r.dataset for r in rows} != {config.data.practice_dataset_name}:
        raise SystemExit(
            f"error: {args.exp_id!r} practised on {sorted({r.dataset for r in rows})}, "
            f"--config_name {args.config_name!r} on {config.data.practice_dataset_name!r}"
        )


def what_became(library, records, key: str) -> dict:
    """A replicate's proposals: how many, the kept ones (and those saying `key`), the refused ones with why."""
    kept = list(library.experiences.values())
    return {
        "proposals": len(records),
        "kept": kept,
        "kept_with_key": sum(key in text.lower() for text in kept),
        "refused": [{"text": r.new_text, "reason": r.reason} for r in records if r.status != "applied"],
    }


async def run(args) -> dict:
    from utu.db import Database
    from utu.practice.parts import open_practice
    from utu.practice.store import PracticeStore
    from utu.practice.training_free_grpo import load_practice_config

    os.environ["UTU_LEARNER_LOCAL_MODEL"] = args.learner
    results = {}
    async with Database(args.db_url) as db:
        rows = await recorded_step(db, args.exp_id)
        recorded = await PracticeStore(db, args.exp_id).snapshot(0)
        for count in args.experiences:
            config = load_practice_config(args.config_name)
            same_data_set(rows, config, args)
            config.practice.num_experiences_per_query = count
            config.practice.learner_passes = args.passes
            async with AsyncExitStack() as stack:
                loop = (await open_practice(stack, config)).loop(config, db)
                runs = []
                for i in range(args.n):
                    runs.append(await replicate(loop, rows, args.key, args.second_look))
                    print(f"experiences per group {count}, replicate {i + 1}: {runs[-1]}", flush=True)
            results[str(count)] = {
                "replicates": len(runs),
                "with_a_kept_key_rule": sum(r["kept_with_key"] > 0 for r in runs),
                "mean_kept": sum(len(r["kept"]) for r in runs) / len(runs),
                "mean_proposals": sum(r["proposals"] for r in runs) / len(runs),
                "mean_seconds": round(sum(r["seconds"] for r in runs) / len(runs), 1),
                "second_looks": sum("second_look" in r for r in runs),
                "second_looks_with_a_kept_key_rule": sum(
                    r.get("second_look", {}).get("kept_with_key", 0) > 0 for r in runs
                ),
                "runs": runs,
            }
    return {
        "groups": len({r.dataset_index for r in rows}),
        "attempts": len(rows),
        "recorded_step_kept": list(recorded.experiences.values()) if recorded else None,  # which run it replays
        "by_setting": results,
    }


def replay_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark that replays the learner on a recorded practice run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db_url", default=None, help="the recorded run's database (default: the project's)")
    parser.add_argument("--exp_id", default="demo_practice", help="the recorded practice run")
    parser.add_argument("--config_name", default="local_portions")
    parser.add_argument("--learner", default="qwen2.5-coder-1.5b")
    parser.add_argument("--key", default="convert", help="the word a right rule says")
    return parser


def replay_result_name(benchmark: str, args) -> str:
    """The result file's name: the benchmark's, then the learner's ("qwen2.5-coder-1.5b" -> "qwen25_coder_15b")."""
    return f"{benchmark}_{args.learner.replace('.', '').replace('-', '_')}"


def replay_meta(args) -> dict:
    """What a replay benchmark's result records of its arguments."""
    return {"learner": args.learner, "exp_id": args.exp_id, "key": args.key, "n": args.n}


def replay(run, args) -> dict:
    """Run a replay benchmark; a bad database, config or endpoint ends in one line and exit 1."""
    from utu.errors import UtuError

    try:
        return asyncio.run(run(args))
    except UtuError as e:
        raise SystemExit(f"error: {e}") from None


def main() -> None:
    parser = replay_arguments(__doc__.splitlines()[0])
    parser.add_argument("--experiences", type=int, nargs="+", default=[1, 2], help="num_experiences_per_query values")
    parser.add_argument("--passes", type=int, default=1, help="learner_passes, for every setting")
    parser.add_argument("--n", type=int, default=4, help="replicates per setting")
    parser.add_argument(
        "--second_look",
        action="store_true",
        help="when a replicate keeps no rule with the key word, replay the learner's second look (learner_retries) "
        "on the same groups, shown its refusals unless the config sets learner_retry_shows_refusals: false",
    )
    args = parser.parse_args()
    result = replay(run, args)
    name = replay_result_name("learner_yield", args)
    if args.passes != 1:
        name += f"_passes{args.passes}"
    if args.second_look:
        name += "_second_look"
    write_result(name, {**replay_meta(args), "passes": args.passes, **result})


if __name__ == "__main__":
    main()
