"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

    python scripts/run_training_free_GRPO.py --config_name math_reasoning
    python scripts/run_training_free_GRPO.py --config_name local_mawps --epochs 2 --restart_step 1

Flags override the YAML (same names as Youtu-Agent); extra `key=value` arguments are Hydra overrides.
"""

import argparse
import contextlib
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table

from utu import cli
from utu.app import build_practice, claim_experiment
from utu.cli import refuse_unknown_flags
from utu.config import TrainingFreeGRPOConfig, compose_dict, config_root, load_agent_config, load_config
from utu.config.flags import add_flags, given
from utu.config.loader import agent_source, config_dirs, validate
from utu.config.models import DataArguments, EvalConfig, PracticeArguments, ValidationConfig, shaping_dump
from utu.config.names import inside
from utu.db import Database
from utu.db.dataset_io import content_digest, ensure_dataset, select_questions
from utu.errors import ConfigError, RunFailed
from utu.practice.data_manager import PracticeData
from utu.practice.export import check_export_target, write_outputs
from utu.practice.initial import initial_library, pick_step
from utu.practice.library import Library
from utu.tracing import setup_tracing
from utu.verify import load_verifier

log = logging.getLogger("practice")
console = Console(width=max(Console().width, 130))  # the step table is wide

EVAL_FLAGS = ["verify_filename", "verify_func_name", "pass_k", "max_failed_share"]  # of the evaluation config


def _restart(text: str) -> int | None:
    if text.lower() in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a step number or none, got {text!r}") from None


def _export_step(text: str) -> str | int:
    if text in ("best", "last"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected best, last or a step number, got {text!r}") from None


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_name", required=True, help="practice config under configs/practice/")
    parser.add_argument("--exp_id", "--experiment_name", dest="exp_id", help="experiment id (default: the config's)")
    parser.add_argument("--agent_config", help="agent config name under configs/agents/ or a YAML file path")
    restart_help = "none (default): reuse everything saved; N: recompute from step N; 0: recompute all"
    parser.add_argument("--restart_step", type=_restart, default=None, help=restart_help)
    # Every other scalar knob of the practice config is a flag of the same name (see utu/config/flags.py).
    parser.set_defaults(
        practice_flags=add_flags(parser, PracticeArguments, skip=["restart_step"]),
        data_flags=add_flags(parser, DataArguments),
        eval_flags=add_flags(parser, EvalConfig, EVAL_FLAGS),
        validation_flags=add_flags(parser, ValidationConfig, prefix="validation_"),
    )
    parser.add_argument(
        "--export_step", type=_export_step, default="last",
        help="which library the enhanced agent gets: last (default), best (highest validation or in-step eval "
        "score), or a step number",
    )  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="forget this exp_id entirely and start over")
    parser.add_argument("--no_pipeline", action="store_true", help="wait for the whole batch before learning")
    parser.add_argument(
        "--export_to", help="also write configs/agents/practice/NAME.yaml and configs/eval/practice/NAME.yaml"
    )
    parser.add_argument("--db_url", help="SQLAlchemy URL (default: UTU_DB_URL, else ./utu.db)")
    parser.add_argument("--output_dir", type=Path, default=Path("runs"), help="outputs go to OUTPUT_DIR/<exp_id>/")
    args, overrides = parser.parse_known_args()
    refuse_unknown_flags(parser, overrides)
    return args, overrides


def build_config(args: argparse.Namespace, overrides: list[str]) -> TrainingFreeGRPOConfig:
    config = load_config("practice", args.config_name, TrainingFreeGRPOConfig, overrides).model_dump()
    config["practice"] |= given(args, args.practice_flags) | {"restart_step": 0 if args.fresh else args.restart_step}
    data_flags = given(args, args.data_flags)
    chosen = data_flags.get("practice_dataset_name")
    truncate = config["data"].get("rollout_data_truncate")
    if (
        chosen
        and chosen != config["data"]["practice_dataset_name"]
        and truncate
        and "rollout_data_truncate" not in data_flags
    ):
        log.warning(
            "the config's rollout_data_truncate (%d) was set for %s: not applied to %s; pass --rollout_data_truncate N",
            truncate, config["data"]["practice_dataset_name"], chosen,
        )  # fmt: skip
        data_flags["rollout_data_truncate"] = None
    config["data"] |= data_flags
    config["evaluation"] |= given(args, args.eval_flags)
    validation = given(args, args.validation_flags, prefix="validation_")
    if validation:
        config["practice"]["validation"] = (config["practice"].get("validation") or {}) | validation
    if args.exp_id is not None:
        config["exp_id"] = args.exp_id
    if args.agent_config:
        config["evaluation"]["agent"] = load_agent_config(args.agent_config).model_dump()
    return validate(config, TrainingFreeGRPOConfig, {"": "command line"})


def shaping_config(config: TrainingFreeGRPOConfig, content: dict) -> dict:
    """What determines a step's results (the config's shaping knobs): resuming under a change here is refused.
    `content`: the practice questions' digest, so a data set replaced under the same name is noticed."""
    shaping = shaping_dump(config)
    for key in ("data", "pass_k"):  # the in-step evaluation's set and K do not change what a step computes
        shaping["evaluation"].pop(key)
    shaping["data"]["content"] = content
    return shaping


async def run() -> int:
    args, overrides = parse_args()
    config = build_config(args, overrides)
    run_dir = inside(args.output_dir, config.exp_id)  # names and paths are checked before any work
    if args.export_to is not None:
        check_export_target(config_root(), args.export_to)
    ev = config.evaluation
    load_verifier(ev.verify_filename, ev.verify_func_name)  # a verifier that cannot load fails now
    setup_tracing()
    db = Database(args.db_url)
    async with contextlib.AsyncExitStack() as resources:
        resources.push_async_callback(db.dispose)
        await db.create_tables()
        await ensure_dataset(db, config.data.practice_dataset_name)
        if config.practice.do_eval:
            await ensure_dataset(db, ev.data.dataset)
        if config.practice.validation:
            await ensure_dataset(db, config.practice.validation.dataset)
        questions = await select_questions(db, config.data.practice_dataset_name, config.data.rollout_data_truncate)
        initial = await initial_library(db, config.practice.init_library, ev.agent.experiences)
        if initial.experiences:
            log.info("starting from a library of %d experiences", len(initial.experiences))
        epoch_ids = [PracticeData.epoch_exp_id_of(config.exp_id, e) for e in range(config.practice.epochs)]
        shaping = shaping_config(config, content_digest(questions)) | {"initial_library": initial.experiences}
        await claim_experiment(resources, db, config.exp_id, "practice", shaping, epoch_ids, args.fresh)
        practice = await build_practice(resources, config, db, initial, pipeline=not args.no_pipeline)
        result = await practice.run()
        result.library = await chosen_library(practice, result, args.export_step)
    print_summary(config, result)
    check_learned(result, initial)
    source = agent_source(args.agent_config) if args.agent_config else evaluation_agent_source(args, overrides)
    paths = write_outputs(
        ev, result.library, config.exp_id, run_dir, args.export_to, config_root(),
        source.get("model", {}).get("model_provider"),
    )  # fmt: skip
    console.print(f"enhanced agent: {paths['agent']}")
    if "exported_eval" in paths:
        console.print(f"evaluate it: python scripts/run_eval.py --config_name practice/{paths['exported_eval'].stem}")
    else:
        console.print(
            f"evaluate it: python scripts/run_eval.py --config_name {eval_config_name(args.config_name)} "
            f"--agent_config {paths['agent']} --exp_id {config.exp_id}_enhanced"
        )
    return 0


async def chosen_library(practice, result, which: str | int) -> Library:
    """The library the enhanced agent gets (--export_step): the last, the best scored, or step N's."""
    if which == "last" or not result.steps:
        return result.library
    step = pick_step(result.steps, which, "--export_step")
    library = await practice.store.snapshot(step)
    if library is None:
        done = ", ".join(str(s.step) for s in result.steps)
        raise ConfigError(f"--export_step {which}: there is no step {step} (steps: {done})")
    console.print(f"exporting the library of step {step} ({len(library.experiences)} experiences)")
    return library


def evaluation_agent_source(args: argparse.Namespace, overrides: list[str]) -> dict:
    """The practice config's agent as written (environment references unresolved)."""
    return (
        compose_dict("practice", args.config_name, overrides, resolve=False)[0].get("evaluation", {}).get("agent", {})
    )


def check_learned(result, initial: Library) -> None:
    """A practice whose library is empty, or still the one it started from, produced nothing: say why, fail."""
    if result.library.experiences and result.library.experiences != initial.experiences:
        return
    steps = result.steps
    used = sum(s.groups_used for s in steps)
    groups = used + sum(s.groups_skipped for s in steps)
    refused = sum(s.operations_refused for s in steps)
    errors = sum(s.learner_errors for s in steps)
    rejected = sum(1 for s in steps if s.validation and not s.validation.accepted)
    if not groups:
        why = "no step was run"
    elif rejected:
        why = f"validation rejected the proposed library at {rejected} step(s): none did better on it"
    elif not used:
        why = f"none of {groups} groups carried contrast (every attempt of a question got the same reward)"
    elif refused:
        why = f"the code refused all {refused} operations the learner proposed (see experience_operations)"
    elif errors:
        why = f"the learner failed {errors} times and proposed nothing usable (see learner_errors)"
    else:
        why = f"the learner studied {used} groups and proposed no experience"
    state = f"still the {len(initial.experiences)} it started from" if initial.experiences else "empty"
    raise RunFailed(f"practice learned nothing: the library is {state} ({why}); no enhanced agent was exported")


def eval_config_name(practice_config: str) -> str:
    """The eval config a practice config builds on (its `evaluation` defaults entry)."""
    _, files = compose_dict("practice", practice_config)
    path = files.get("evaluation")
    if path is None:
        return "<eval config>"
    root = next(d for d in config_dirs() if d in path.parents)
    return str(path.relative_to(root / "eval").with_suffix(""))


def print_summary(config: TrainingFreeGRPOConfig, result) -> None:
    g = config.practice.grpo_n
    table = Table(title=f"practice {config.exp_id}")
    for column in ("step", "epoch", f"Mean@{g}", f"Pass@{g}", "groups used/skipped", "library", "ADD/UPD/DEL",
                   "refused (junk)", "validation", "learner err", "tokens", "cost", "time"):  # fmt: skip
        table.add_column(column, justify="right")
    for s in result.steps:
        ops, v = s.operations, s.validation
        checked = f"{v.current:.2f}->{v.proposed:.2f} {'kept' if v.accepted else 'rejected'}" if v else "-"
        table.add_row(
            str(s.step), str(s.epoch), f"{s.mean_at_g:.3f}", f"{s.pass_at_g:.3f}",
            f"{s.groups_used}/{s.groups_skipped}", str(s.library_size),
            f"{ops['ADD']}/{ops['UPDATE']}/{ops['DELETE']}", f"{s.operations_refused} ({s.operations_junk})", checked,
            str(s.learner_errors), str(s.tokens), f"${s.cost:.4f}", f"{s.wall_time:.1f}s",
        )  # fmt: skip
    console.print(table)
    console.print(f"library ({len(result.library.experiences)} experiences):")
    for key, text in result.library.experiences.items():
        console.print(f"  [{key}] {text}", markup=False)


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
