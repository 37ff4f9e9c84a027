"""The practice command's arguments: flags (the same names as Youtu-Agent's) over a composed practice config.

`parse_training_free_grpo_config()` is Youtu-Agent's utility of that name: the practice config from this
process's command line, for a script of one's own that runs `TrainingFreeGRPO`.
"""

import argparse
import logging

from utu.cli import refuse_unknown_flags, step_argument
from utu.config import TrainingFreeGRPOConfig, load_agent_config
from utu.config.flags import add_flags, add_place_flags, given
from utu.config.loader import Composed, compose_config, validate
from utu.config.models import (
    DataArguments,
    EvalConfig,
    PracticeArguments,
    ScreeningConfig,
    TopUpConfig,
    ValidationConfig,
)

log = logging.getLogger("practice")
DESCRIPTION = "Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent."

EVAL_FLAGS = ["verify_filename", "verify_func_name", "pass_k", "max_failed_share"]  # of the evaluation config


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--config_name", required=True, help="practice config under configs/practice/")
    parser.add_argument("--exp_id", "--experiment_name", dest="exp_id", help="experiment id (default: the config's)")
    parser.add_argument("--agent_config", help="agent config name under configs/agents/ or a YAML file path")
    # Every other scalar knob of the practice config is a flag of the same name (see utu/config/flags.py).
    parser.set_defaults(
        practice_flags=add_flags(parser, PracticeArguments),
        data_flags=add_flags(parser, DataArguments),
        eval_flags=add_flags(parser, EvalConfig, EVAL_FLAGS),
        validation_flags=add_flags(parser, ValidationConfig, prefix="validation_"),
        screening_flags=add_flags(parser, ScreeningConfig, prefix="screening_"),
        top_up_flags=add_flags(parser, TopUpConfig, prefix="top_up_"),
    )
    parser.add_argument(
        "--export_step",
        type=step_argument,
        default="last",
        help="which library the enhanced agent gets: last (default), best (highest validation or in-step eval "
        "score), or a step number",
    )
    parser.add_argument("--fresh", action="store_true", help="forget this exp_id entirely and start over")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="say what the run would spend on the agent (its data checked) and stop: no model is called",
    )
    parser.add_argument("--no_pipeline", action="store_true", help="wait for the whole batch before learning")
    parser.add_argument(
        "--export_to", help="also write configs/agents/practice/NAME.yaml and configs/eval/practice/NAME.yaml"
    )
    add_place_flags(parser, "the enhanced agent and the library")
    args, overrides = parser.parse_known_args()
    refuse_unknown_flags(parser, overrides)
    return args, overrides


def build_config(args: argparse.Namespace, composed: Composed) -> TrainingFreeGRPOConfig:
    config = validate(composed.data, TrainingFreeGRPOConfig, composed.files, composed.source).model_dump()
    # a restart is what this command asks for, never what a config file says (Youtu-Agent's write one)
    flags = given(args, args.practice_flags)
    config["practice"] |= flags | {"restart_step": 0 if args.fresh else flags.get("restart_step")}
    data_flags = given(args, args.data_flags)
    chosen = data_flags.get("practice_dataset_name")
    truncate = config["data"].get("rollout_data_truncate")
    truncate_dropped = (
        chosen
        and chosen != config["data"]["practice_dataset_name"]
        and truncate
        and "rollout_data_truncate" not in data_flags
    )
    if truncate_dropped:
        data_flags["rollout_data_truncate"] = None
    set_for = config["data"]["practice_dataset_name"]
    config["data"] |= data_flags
    config["evaluation"] |= given(args, args.eval_flags)
    validation = given(args, args.validation_flags, prefix="validation_")
    if validation:
        config["practice"]["validation"] = (config["practice"].get("validation") or {}) | validation
    config["practice"]["screening"] |= given(args, args.screening_flags, prefix="screening_")
    top_up = given(args, args.top_up_flags, prefix="top_up_")
    if top_up:
        config["practice"]["top_up"] = (config["practice"].get("top_up") or {}) | top_up
    if args.exp_id is not None:
        config["exp_id"] = args.exp_id
    if args.agent_config:
        config["evaluation"]["agent"] = load_agent_config(args.agent_config).model_dump()
    checked = validate(config, TrainingFreeGRPOConfig, {"": "command line"})
    if truncate_dropped:  # said once the config holds: never above an error line
        log.warning(
            "the config's rollout_data_truncate (%d) was set for %s: not applied to %s; pass --rollout_data_truncate N",
            *(truncate, set_for, chosen),
        )
    return checked


def parse_training_free_grpo_config() -> TrainingFreeGRPOConfig:
    """The practice config that this process's command line names, with its flags and overrides applied."""
    args, overrides = parse_args()
    return build_config(args, compose_config("practice", args.config_name, overrides))
