"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

    python scripts/run_training_free_GRPO.py --config_name math_reasoning
    python scripts/run_training_free_GRPO.py --config_name local_mawps --epochs 2 --restart_step 1

Flags override the YAML (same names as Youtu-Agent); extra `key=value` arguments are Hydra overrides.
"""

import argparse
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table

from utu import cli
from utu.cli import refuse_unknown_flags
from utu.config import TrainingFreeGRPOConfig, load_agent_config
from utu.config.flags import add_flags, given
from utu.config.loader import Composed, agent_source, compose_config, config_dirs, validate
from utu.config.models import DataArguments, EvalConfig, PracticeArguments, ValidationConfig
from utu.practice.training_free_grpo import PracticeOutcome, TrainingFreeGRPO

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


def build_config(args: argparse.Namespace, composed: Composed) -> TrainingFreeGRPOConfig:
    config = validate(composed.data, TrainingFreeGRPOConfig, composed.files).model_dump()
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


async def run() -> int:
    args, overrides = parse_args()
    composed = compose_config("practice", args.config_name, overrides)
    config = build_config(args, composed)
    source = (
        agent_source(args.agent_config) if args.agent_config else composed.source.get("evaluation", {}).get("agent", {})
    )
    practice = TrainingFreeGRPO(
        config, db_url=args.db_url, output_dir=args.output_dir, fresh=args.fresh, pipeline=not args.no_pipeline,
        export_step=args.export_step, export_to=args.export_to,
        provider_source=source.get("model", {}).get("model_provider"),
    )  # fmt: skip
    outcome = await practice.learn()
    print_summary(config, outcome)
    paths = practice.export(outcome)
    console.print(f"enhanced agent: {paths['agent']}")
    if "practice_agent" in paths:
        console.print(f"also written as {paths['practice_agent']}, the agent of the eval configs that name it")
    if "exported_eval" in paths:
        console.print(f"evaluate it: python scripts/run_eval.py --config_name practice/{paths['exported_eval'].stem}")
    else:
        console.print(
            f"evaluate it: python scripts/run_eval.py --config_name {eval_config_name(composed.files)} "
            f"--agent_config {paths['agent']} --exp_id {config.exp_id}_enhanced"
        )
    return 0


def eval_config_name(files: dict[str, Path]) -> str:
    """The eval config a practice config builds on (its `evaluation` defaults entry)."""
    path = files.get("evaluation")
    if path is None:
        return "<eval config>"
    root = next(d for d in config_dirs() if d in path.parents)
    return str(path.relative_to(root / "eval").with_suffix(""))


def print_summary(config: TrainingFreeGRPOConfig, result: PracticeOutcome) -> None:
    g = config.practice.grpo_n
    table = Table(title=f"practice {config.exp_id}")
    for column in ("step", "epoch", f"Mean@{g}", f"Pass@{g}", "groups used/skipped", "library", "ADD/UPD/DEL",
                   "refused (junk)", "validation", "eval", "learner err", "tokens", "cost", "time"):  # fmt: skip
        table.add_column(column, justify="right")
    for s in result.steps:
        ops, v, e = s.operations, s.validation, s.eval
        checked = f"{v.current:.2f}->{v.proposed:.2f} {'kept' if v.accepted else 'rejected'}" if v else "-"
        evaluated = f"Mean@{e.k} {e.mean_at_k:.3f}" if e else "-"  # do_eval: the library on the eval set
        table.add_row(
            str(s.step), str(s.epoch), f"{s.mean_at_g:.3f}", f"{s.pass_at_g:.3f}",
            f"{s.groups_used}/{s.groups_skipped}", str(s.library_size),
            f"{ops['ADD']}/{ops['UPDATE']}/{ops['DELETE']}", f"{s.operations_refused} ({s.operations_junk})", checked,
            evaluated, str(s.learner_errors), str(s.tokens), f"${s.cost:.4f}", f"{s.wall_time:.1f}s",
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
