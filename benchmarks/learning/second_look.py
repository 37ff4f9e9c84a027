"""Does the learner's second look find something new? Replayed on a recorded step whose every proposal was refused.

    python benchmarks/learning/second_look.py [--db_url URL] [--exp_id demo_practice] [--n 3]

`learner_retries` gives a step whose proposals were all refused a second look at the same groups (stages 2-5 on
the kept summaries). This benchmark takes a recorded practice run whose step 0 did so (by default the one `make
demo` leaves, when it kept nothing), summarises its groups once, and runs the second look `--n` times each way:
shown the recorded first try's refusals (`learner_retry_shows_refusals: true`, the default) and not shown them
(a fresh sample of the same comparison). Each look counts its proposals, those that copy a refused text word for
word, and what the screening keeps after consolidation and restating (against an empty library, as in the step;
a repeat of a refused text is refused, as in the step), with the kept ones that say `--key`. Writes
benchmarks/results/second_look_<learner>.json. By hand only: a look is 1 to 3 minutes for the 1.5B on 2 cores.
"""

import asyncio
import os
import sys
from collections import defaultdict
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402
from learner_yield import (  # noqa: E402
    recorded_step,
    replay,
    replay_arguments,
    replay_meta,
    replay_result_name,
    same_data_set,
    what_became,
)


async def first_try_records(db, exp_id: str) -> list:
    """The operation records of step 0's first try (not its second looks)."""
    from utu.practice.history import as_record, operation_log

    ops = await operation_log(db, exp_id, step=0)
    return [as_record(o) for o in ops if not o.learner_try]


async def look(loop, rows, studied, refused_records, shown: bool, key: str) -> dict:
    from utu.practice.library import Library
    from utu.practice.outcomes import Refusal
    from utu.practice.retries import refusals_for_learner, refused_for_what_they_say
    from utu.practice.step import Step

    refused = refusals_for_learner(refused_records, loop.p.given_ground_truth) if shown else []
    refused_texts = {r.new_text for r in refused_records if r.status == "refused" and r.new_text}
    again = await asyncio.gather(*(loop.updater.learn_again(o, Library(), refused) for o in studied))
    texts = [p.op.content.strip() for o in again for p in o.proposed if p.op.content]
    failures = [f for o in again for f in o.failures]
    step = Step(0, 0, 0, {}, rows=rows, outcomes=again, failures=failures)
    step.refused_before = refused_for_what_they_say(refused_records)
    library, records = await loop.propose(step, Library())
    return {
        "shown": shown,
        "texts_proposed": len(texts),
        "copies_of_a_refused_text": sum(t in refused_texts for t in texts),
        "refused_as_repeats": sum(r.refusal is not None and r.refusal.kind == Refusal.REFUSED_AGAIN for r in records),
        "proposed_with_key": sum(key in t.lower() for t in texts),
        **what_became(library, records, key),
        "learner_errors": len(failures),
    }


async def run(args) -> dict:
    from utu.db import Database
    from utu.practice.parts import open_practice
    from utu.practice.rollouts import as_attempt
    from utu.practice.training_free_grpo import load_practice_config

    os.environ["UTU_LEARNER_LOCAL_MODEL"] = args.learner
    async with Database(args.db_url) if args.db_url else Database() as db:
        rows = await recorded_step(db, args.exp_id)
        records = await first_try_records(db, args.exp_id)
        if not records:
            raise SystemExit(f"error: step 0 of {args.exp_id!r} proposed nothing: its learner had no second look")
        if any(r.status == "applied" for r in records):
            raise SystemExit(f"error: step 0 of {args.exp_id!r} kept a proposal: its learner had no second look")
        config = load_practice_config(args.config_name)
        same_data_set(rows, config, args)
        async with AsyncExitStack() as stack:
            loop = (await open_practice(stack, config)).loop(config, db)
            groups = defaultdict(list)
            for row in rows:
                groups[row.dataset_index].append(as_attempt(row))
            outcomes = [await loop.updater.summarise(g) for g in groups.values()]  # stage 1 once, as in the step
            studied = [o for o in outcomes if o.studied]
            looks = []
            for i in range(args.n):
                for shown in (True, False):
                    looks.append(await look(loop, rows, studied, records, shown, args.key))
                    print(f"look {i + 1}, shown the refusals: {shown}: {looks[-1]}", flush=True)

    def summary(shown: bool) -> dict:
        mine = [x for x in looks if x["shown"] == shown]
        return {
            "looks": len(mine),
            "with_a_kept_key_rule": sum(x["kept_with_key"] > 0 for x in mine),
            "copies_of_a_refused_text": sum(x["copies_of_a_refused_text"] for x in mine),
            "texts_proposed": sum(x["texts_proposed"] for x in mine),
        }

    return {
        "groups_studied": len(studied),
        "first_try_refused": [{"text": r.new_text, "reason": r.reason} for r in records],
        "shown": summary(True),
        "not_shown": summary(False),
        "looks": looks,
    }


def main() -> None:
    parser = replay_arguments(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3, help="second looks each way")
    args = parser.parse_args()
    result = replay(run, args)
    write_result(replay_result_name("second_look", args), {**replay_meta(args), **result})


if __name__ == "__main__":
    main()
