"""The practice command rerun on a recorded run's own rollouts: does the live step learn what replays say?

    python benchmarks/rerun_step.py --db_url sqlite:///<demo clone>/utu.db [--n 3]

`learner_yield.py` and `second_look.py` replay the learner through benchmark code. This one copies the recorded
SQLite database, forgets what its step 0 learned (operations, snapshot, statistics: `PracticeStore.reset_from`),
keeps its rollouts, and runs `scripts/run_training_free_GRPO.py` on the copy, as `make demo` does: the learner,
the screening, the restate stage, the gate and the second look, with no new rollouts. What differs from the live
step is only that no rollouts run beside the learner, and the learner's draw. The empty library's validation
attempts, and those of a proposed library identical to one the recorded run validated, are reused (as the live
loop reuses them). Writes benchmarks/results/rerun_step_<learner>.json. By hand only: 2 to 6 minutes a rerun
for the 1.5B on 2 cores.
"""

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_timed, write_result  # noqa: E402
from learner_yield import (  # noqa: E402
    recorded_step,
    replay_arguments,
    replay_meta,
    replay_result_name,
    same_data_set,
)


async def check_recorded(db_url: str, args) -> None:
    """Refuse a recorded run without a judged step 0, or one on another data set than the config's (the rerun
    would roll out afresh)."""
    from utu.db import Database
    from utu.practice.training_free_grpo import load_practice_config

    db = Database(db_url)
    try:
        rows = await recorded_step(db, args.exp_id)
    finally:
        await db.dispose()
    same_data_set(rows, load_practice_config(args.config_name), args)


async def forget_step_learning(db_url: str, exp_id: str) -> None:
    from utu.db import Database
    from utu.practice.store import PracticeStore

    db = Database(db_url)
    try:
        await PracticeStore(db, exp_id).reset_from(0)
    finally:
        await db.dispose()


async def what_the_step_did(db_url: str, exp_id: str, key: str) -> dict:
    """Step 0 of the rerun: its tries, the gate's last decision, what it kept and what it refused (with why)."""
    from utu.db import Database
    from utu.practice.history import operation_log
    from utu.practice.loop import LEARNER_RETRY
    from utu.practice.store import PracticeStore

    db = Database(db_url)
    try:
        steps = await PracticeStore(db, exp_id).steps()
        ops = await operation_log(db, exp_id, step=0)
    finally:
        await db.dispose()
    stats = steps[0] if steps else None
    kept = [o.new_text for o in ops if o.status == "applied" and o.new_text]
    return {
        "learner_tries": stats.learner_tries if stats else None,
        "validation": stats.validation.reason if stats and stats.validation else None,
        "kept": kept,
        "kept_with_key": sum(key in text.lower() for text in kept),
        "refused": [
            {
                "text": o.new_text,
                "reason": o.reason,
                "second_look": (o.rationale or "").startswith(LEARNER_RETRY),
            }
            for o in ops
            if o.status == "refused"
        ],
    }


def rerun(source: Path, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "rerun.db"
        shutil.copyfile(source, copy)
        url = f"sqlite:///{copy}"
        asyncio.run(forget_step_learning(url, args.exp_id))
        command = ["--config_name", args.config_name, "--exp_id", args.exp_id, "--db_url", url]
        env = os.environ | {"UTU_LEARNER_LOCAL_MODEL": args.learner}
        seconds, code = run_timed(
            "scripts/run_training_free_GRPO.py", *command, "--output_dir", str(Path(tmp) / "runs"), env=env
        )
        if code not in (0, 2):  # 2: practice kept nothing, an outcome to count
            raise SystemExit(f"error: the rerun's practice failed (exit {code})")
        return {
            "seconds": round(seconds, 1),
            "exit_code": code,
            **asyncio.run(what_the_step_did(url, args.exp_id, args.key)),
        }


def sqlite_file(db_url: str | None) -> Path:
    path = Path((db_url or "sqlite:///utu.db").removeprefix("sqlite:///"))
    if not (db_url or "sqlite:///").startswith("sqlite:///") or not path.is_file():
        raise SystemExit(
            f"error: --db_url must name an existing SQLite file (sqlite:///path/to/utu.db), not {db_url!r}"
        )
    return path


def main() -> None:
    parser = replay_arguments(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3, help="reruns")
    args = parser.parse_args()
    source = sqlite_file(args.db_url)
    asyncio.run(check_recorded(f"sqlite:///{source}", args))
    recorded = asyncio.run(what_the_step_did(f"sqlite:///{source}", args.exp_id, args.key))
    runs = []
    for i in range(args.n):
        runs.append(rerun(source, args))
        print(f"rerun {i + 1}: {runs[-1]}", flush=True)
    write_result(
        replay_result_name("rerun_step", args),
        {
            **replay_meta(args),
            "recorded_step": recorded,
            "reruns": len(runs),
            "with_a_kept_key_rule": sum(r["kept_with_key"] > 0 for r in runs),
            "first_try_kept_a_key_rule": sum(r["kept_with_key"] > 0 and r["learner_tries"] == 1 for r in runs),
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
