"""The practice command rerun on a recorded run's own rollouts: does the live step learn what replays say?

    python benchmarks/learning/rerun_step.py --db_url sqlite:///<demo clone>/utu.db [--n 6]

`learner_yield.py` and `second_look.py` replay the learner through benchmark code. This one takes a consistent copy
of the recorded SQLite database (the recorded file is only read), forgets what its step 0 learned (operations,
snapshot, statistics: `PracticeStore.reset_from`), keeps its judged attempts, and runs
`scripts/run_training_free_GRPO.py` on a fresh copy of that, as `make demo` does: the learner, the screening, the
restate stage, the gate and the second look, with no new rollouts but the top-up's (`practice.top_up`: a recorded
step with too few groups of contrast rolls out its reserve questions anew). The practice config is today's, not the
recording's: the recorded fingerprint is forgotten with the step. What differs from the live step is that no
rollouts run beside the learner, and the learner's draw. The empty library's validation attempts, and those of a
proposed library identical to one the recorded run validated, are reused (as the live loop reuses them). The reruns
write nothing outside a temporary folder (no runs/, no configs/ export). Writes
benchmarks/results/rerun_step_<learner>[_<name>].json (`--name`: to keep one recording's result beside another's).
By hand only: 3 to 7 minutes a rerun for the 1.5B on 2 cores.
"""

import os
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import result_name, run_timed, write_result  # noqa: E402
from learner_yield import (  # noqa: E402
    recorded_step,
    replay,
    replay_arguments,
    replay_meta,
    replay_result_name,
    same_data_set,
)


def sqlite_file(db_url: str | None) -> Path:
    """The SQLite file of `--db_url` (else `UTU_DB_URL`, else ./utu.db), which must exist."""
    from sqlalchemy.engine import make_url

    from utu.db.engine import database_url
    from utu.errors import ConfigError

    url = make_url(database_url(db_url))
    if not url.drivername.startswith("sqlite") or not Path(url.database).is_file():
        raise ConfigError(f"--db_url must name an existing SQLite file (sqlite:///path/to/utu.db), not {url!r}")
    return Path(url.database)


def consistent_copy(source: Path, copy: Path) -> None:
    """A copy of SQLite file `source` as of one moment, its committed WAL pages included; `source` is only read."""
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)


async def check_recorded(db, args) -> None:
    """Refuse a recorded run without a fully judged step 0 (a failed attempt would be rolled out afresh), or on
    another data set than the config's (every attempt would be)."""
    from utu.practice.training_free_grpo import load_practice_config

    rows = await recorded_step(db, args.exp_id)
    failed = sum(r.stage == "failed" for r in rows)
    if failed:
        raise SystemExit(f"error: {args.exp_id!r} has {failed} failed attempts at step 0: a rerun would roll them out")
    same_data_set(rows, load_practice_config(args.config_name), args)


async def what_the_step_did(db, exp_id: str, key: str) -> dict:
    """A run's step 0 (the recorded one, or a rerun's): its tries, the gate's last decision, what it kept and what
    it refused (with why). `learner_tries` is None if the step was not saved."""
    from utu.practice.history import operation_log
    from utu.practice.store import PracticeStore

    store = PracticeStore(db, exp_id)
    steps = await store.steps()
    library = await store.snapshot(0) if steps else None
    ops = await operation_log(db, exp_id, step=0)
    stats = steps[0] if steps else None
    kept = list(library.experiences.values()) if library else []
    return {
        "learner_tries": stats.learner_tries if stats else None,
        "groups_with_contrast": stats.groups_used - stats.groups_all_lost if stats else None,
        "questions_added": stats.questions_added if stats else None,
        "validation": stats.validation.reason if stats and stats.validation else None,
        "kept": kept,
        "kept_with_key": sum(key in text.lower() for text in kept),
        "refused": [
            {"text": o.new_text, "reason": o.reason, "second_look": bool(o.learner_try)}
            for o in ops
            if o.status == "refused"
        ],
    }


async def prepare(db, args) -> dict:
    """Check the recording and read what its step 0 did, then forget what that step learned (operations, snapshot,
    statistics, learner errors); its attempts stay."""
    from utu.db.experiments import forget_experiment
    from utu.practice.store import PracticeStore

    await check_recorded(db, args)
    recorded = await what_the_step_did(db, args.exp_id, args.key)
    await PracticeStore(db, args.exp_id).reset_from(0)
    await forget_experiment(db, args.exp_id)  # the rerun runs today's config, and records its own fingerprint
    return recorded


async def rerun(pristine: Path, args, i: int) -> dict:
    """One rerun of the practice command on a copy of `pristine` (the recording, its step's learning forgotten)."""
    from utu.db import Database

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "rerun.db"
        consistent_copy(pristine, copy)  # with what the WAL may still hold of the forgetting
        url = f"sqlite:///{copy}"
        command = ["--config_name", args.config_name, "--exp_id", args.exp_id, "--db_url", url]
        env = os.environ | {
            "UTU_LEARNER_LOCAL_MODEL": args.learner,
            "UTU_CONFIG_DIR": str(Path(tmp) / "configs"),  # none there: no export into the user's configs/
        }
        seconds, code = run_timed(
            "scripts/run_training_free_GRPO.py", *command, "--output_dir", str(Path(tmp) / "runs"), env=env
        )
        async with Database(url) as db:
            did = await what_the_step_did(db, args.exp_id, args.key)
        if code not in (0, 2) or did["learner_tries"] is None:  # 2 with the step saved: practice kept nothing
            raise SystemExit(f"error: rerun {i + 1}'s practice failed (exit {code}); the reruns before it are above")
        return {"seconds": round(seconds, 1), "exit_code": code, **did}


async def run(args) -> dict:
    from utu.db import Database

    source = sqlite_file(args.db_url)
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "recorded.db"
        consistent_copy(source, pristine)
        async with Database(f"sqlite:///{pristine}") as db:
            recorded = await prepare(db, args)
        runs = []
        for i in range(args.n):
            runs.append(await rerun(pristine, args, i))
            print(f"rerun {i + 1}: {runs[-1]}", flush=True)
    return {
        "recorded_step": recorded,
        "reruns": len(runs),
        "with_a_kept_key_rule": sum(r["kept_with_key"] > 0 for r in runs),
        "first_try_kept_a_key_rule": sum(r["kept_with_key"] > 0 and r["learner_tries"] == 1 for r in runs),
        "runs": runs,
    }


def main() -> None:
    parser = replay_arguments(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6, help="reruns (at least 1)")
    parser.add_argument("--name", type=result_name, help="a suffix for the result file: letters, digits, _, - and .")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be at least 1")
    name = replay_result_name("rerun_step", args) + (f"_{args.name}" if args.name else "")
    write_result(name, {**replay_meta(args), **replay(run, args)})


if __name__ == "__main__":
    main()
