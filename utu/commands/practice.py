"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

    python scripts/run_training_free_GRPO.py --config_name math_reasoning
    python scripts/run_training_free_GRPO.py --config_name local_mawps --epochs 2 --restart_step 1

Flags override the YAML (same names as Youtu-Agent); extra `key=value` arguments are Hydra overrides.
"""

import logging
from pathlib import Path

from rich.table import Table

from utu import cli
from utu.config import TrainingFreeGRPOConfig
from utu.config.loader import agent_source, compose_config, config_dirs
from utu.practice.arguments import build_config, parse_args
from utu.practice.training_free_grpo import (
    PracticeOutcome,
    TrainingFreeGRPO,
    agent_as_written,
)

console = cli.plain_console(130)  # the step table is wide
log = logging.getLogger(__name__)


async def run() -> int:
    args, overrides = parse_args()
    composed = compose_config("practice", args.config_name, overrides)
    config = build_config(args, composed)
    source = agent_source(args.agent_config) if args.agent_config else agent_as_written(composed.source)
    practice = TrainingFreeGRPO(
        config,
        db_url=args.db_url,
        output_dir=args.output_dir,
        fresh=args.fresh,
        pipeline=not args.no_pipeline,
        export_step=args.export_step,
        export_to=args.export_to,
        agent_source=source,
    )
    if args.plan:
        console.print((await practice.plan()).describe())
        return 0
    outcome = await practice.learn()
    print_summary(config, outcome)
    paths = practice.export(outcome)
    console.print(f"enhanced agent: {paths['agent']}")
    if "practice_agent" in paths:
        console.print(f"also written as {paths['practice_agent']}, the agent of the eval configs that name it")
    elif practice.not_exported_because:  # e.g. Youtu-Agent's pre-learned agent copied in: its evals read that one
        log.warning(
            "not written into configs/: %s; eval configs that name that agent evaluate it, not this run's",
            practice.not_exported_because,
        )
    if "exported_eval" in paths:
        console.print(f"evaluate it: python scripts/run_eval.py --config_name practice/{paths['exported_eval'].stem}")
    else:
        console.print(
            f"evaluate it: python scripts/run_eval.py --config_name {eval_config_name(composed.files)} "
            f"--agent_config {paths['agent']} --exp_id {config.exp_id}_enhanced"
        )
    return 0


def eval_config_name(files: dict[str, Path | str]) -> str:
    """The eval config a practice config builds on (its `evaluation` defaults entry)."""
    path = files.get("evaluation")
    if not isinstance(path, Path):
        return "<eval config>"
    root = next(d for d in config_dirs() if d in path.parents)
    return str(path.relative_to(root / "eval").with_suffix(""))


def print_summary(config: TrainingFreeGRPOConfig, result: PracticeOutcome) -> None:
    g = config.practice.grpo_n
    table = Table(title=f"practice {config.exp_id}")
    for column in (
        "step",
        "epoch",
        f"Mean@{g}",
        f"Pass@{g}",
        "groups used/skipped (+topped up)",
        "library",
        "ADD/UPD/DEL",
        "refused (junk)",
        "validation",
        "eval",
        "learner err",
        "tokens",
        "cost",
        "time",
    ):
        table.add_column(column, justify="right")
    for s in result.steps:
        ops, v, e = s.operations, s.validation, s.eval
        checked = f"{v.current:.2f}->{v.proposed:.2f} {'kept' if v.accepted else 'rejected'}" if v else "-"
        if s.learner_tries > 1:  # the learner compared the groups again after every proposal was refused
            checked = f"{checked}, {s.learner_tries} tries"
        evaluated = f"Mean@{e.k} {e.mean_at_k:.3f}" if e else "-"  # do_eval: the library on the eval set
        table.add_row(
            str(s.step),
            str(s.epoch),
            f"{s.mean_at_g:.3f}",
            f"{s.pass_at_g:.3f}",
            s.groups,
            str(s.library_size),
            f"{ops['ADD']}/{ops['UPDATE']}/{ops['DELETE']}",
            f"{s.operations_refused} ({s.operations_junk})",
            checked,
            evaluated,
            str(s.learner_errors),
            str(s.tokens),
            f"${s.cost:.4f}",
            f"{s.wall_time:.1f}s",
        )
    console.print(table)
    console.print(f"library ({len(result.library.experiences)} experiences):")
    for key, text in result.library.experiences.items():
        console.print(cli.as_text(f"  [{key}] {text}"))  # as written: no markup, no emoji codes


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
