"""Evaluate an agent: K attempts per question, judged by the configured verify function, with honest metrics.

    python scripts/run_eval.py --config_name math/math_AIME24 [--exp_id X] [--pass_k 32] [--limit 10]
    python scripts/run_eval.py --config_name local/mawps --agent_config runs/p1/enhanced_agent.yaml --exp_id p1_eval
    python scripts/run_eval.py --compare BASELINE_EXP ENHANCED_EXP

Re-running the same exp_id runs only what is missing (resume after a crash or Ctrl-C); --fresh starts over.
Extra arguments are Hydra overrides, e.g. `agent.model.model_settings.temperature=0.6`.
"""

import argparse
import contextlib
import logging
import re
import time

from rich.table import Table
from sqlalchemy import delete, select

from utu import cli
from utu.app import Claim, build_eval, claim_experiment
from utu.cli import refuse_unknown_flags
from utu.config import EvalConfig, load_agent_config, load_config
from utu.config.flags import add_flags, add_place_flags, given
from utu.config.loader import given_on_the_command_line, validate, written_value
from utu.config.models import DataConfig, check_run_size, shaping_dump
from utu.db import Database, EvalResult, EvaluationSample, Experiment
from utu.db.dataset_io import (
    check_dataset_reachable,
    content_digest,
    dataset_size,
    ensure_dataset,
    select_questions,
)
from utu.db.experiments import judge_again_if_the_verifier_changed
from utu.errors import ConfigError, RunFailed
from utu.eval.metrics import EvalMetrics, ScoredAttempt, compare, compute_metrics
from utu.eval.outcome import RERUN, ROLL_OUT_AGAIN, check_attempts
from utu.names import inside, writable_folder
from utu.tracing import setup_tracing
from utu.verify import check_answers, file_digest, load_verifier

log = logging.getLogger("run_eval")
PRACTICE_ROW_NAME = re.compile(r"_(epoch_\d+|eval_step\d+)$")  # the exp_ids of a practice's own attempt rows
console = cli.plain_console()


EVAL_FLAGS = ["exp_id", "concurrency", "pass_k", "max_failed_share", "judge_concurrency", "max_cost"]


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_name", help="eval config under configs/eval/, e.g. math/math_AIME24")
    eval_flags = add_flags(parser, EvalConfig, EVAL_FLAGS)
    parser.set_defaults(eval_flags=eval_flags, data_flags=add_flags(parser, DataConfig, ["dataset", "limit", "offset"]))
    parser.set_defaults(data_type_flags=add_flags(parser, DataConfig, ["type"], prefix="dataset_"))
    parser.add_argument("--agent_config", help="agent config name under configs/agents/ or a YAML file path")
    parser.add_argument("--agent_model", help="the agent's model name (agent.model.model_provider.model)")
    parser.add_argument("--step", choices=["all", "rollout", "judge"], default="all")
    parser.add_argument("--fresh", action="store_true", help="delete this exp_id's attempts and start over")
    parser.add_argument("--compare", nargs=2, metavar=("EXP_A", "EXP_B"), help="paired comparison of two runs")
    add_place_flags(parser, "the metrics")
    args, overrides = parser.parse_known_args()
    refuse_unknown_flags(parser, overrides)
    if not args.compare and not args.config_name:
        parser.error("--config_name is required (or use --compare EXP_A EXP_B)")
    if args.fresh and args.step == "judge":  # it would delete the attempts, then have none to judge
        parser.error("--fresh starts over from the rollouts: use it with --step all or --step rollout, not judge")
    return args, overrides


def build_config(args: argparse.Namespace, overrides: list[str]) -> EvalConfig:
    """The eval config from YAML, with the command-line flags applied (and validated) on top."""
    config = load_config("eval", args.config_name, EvalConfig, overrides)
    flags = given(args, EVAL_FLAGS)
    data = given(args, ("dataset", "limit", "offset"))
    data |= given(args, args.data_type_flags, prefix="dataset_")
    dropped, written = dropped_slice(args.config_name, config, data, overrides)
    data |= {k: None if k == "limit" else 0 for k in dropped}
    values = config.model_dump() | flags | {"data": config.data.model_dump() | data}
    if args.agent_config:
        values["agent"] = load_agent_config(args.agent_config).model_dump()
    if args.agent_model:
        values["agent"]["model"]["model_provider"]["model"] = args.agent_model
    checked = validate(values, EvalConfig, {"": "command line"})
    if dropped:  # said once the config holds: never above an error line
        slice_ = " and ".join(f"{k} ({v})" for k, v in dropped.items())
        flags_ = " or ".join(f"--{k} N" for k in dropped)
        log.warning(
            "the config's %s %s set for %s: not applied to %s; pass %s to cut it",
            *(slice_, "were" if len(dropped) > 1 else "was", written, checked.data.dataset, flags_),
        )
    return checked


def dropped_slice(name: str, config: EvalConfig, flags: dict, overrides: list[str]) -> tuple[dict, str | None]:
    """The config's `limit` and `offset` that another data set, named on the command line (`--dataset`, or an
    override such as `data.dataset=`), does not take: they were set for the config's own data set. A slice given on
    the command line too stays. Also the config's own data set, as its file names it."""
    typed = set(given_on_the_command_line(overrides)) | {f"data.{key}" for key in flags}
    if "data.dataset" not in typed:
        return {}, None
    written = written_value("eval", name, "data.dataset", overrides)  # resolved: `${oc.env:MY_DATA,Four}` is Four
    if written in (None, "???") or flags.get("dataset", config.data.dataset) == written:
        return {}, written  # the config's own data set, or it has none of its own (`???`): its slice is for this one
    slice_ = {key: getattr(config.data, key) for key in ("limit", "offset") if f"data.{key}" not in typed}
    return {key: value for key, value in slice_.items() if value}, written


def shaping_config(config: EvalConfig, content: dict) -> dict:
    """What determines the results (the config's shaping knobs): resuming under a change here is refused.
    `content`: the selected questions' digest, so a data set replaced under the same name is noticed."""
    return shaping_dump(config) | {"selection": content}


async def evaluate(args: argparse.Namespace, overrides: list[str], db: Database) -> int:
    config = build_config(args, overrides)
    if PRACTICE_ROW_NAME.search(config.exp_id):
        raise ConfigError(f"--exp_id {config.exp_id!r}: names ending in _epoch_N or _eval_stepN are a practice's own")
    out = inside(args.output_dir, config.exp_id, "eval_metrics.json")  # before any work
    writable_folder(out.parent)
    verify = load_verifier(config.verify_filename, config.verify_func_name)  # a verifier that cannot load fails now
    setup_tracing()
    async with contextlib.AsyncExitStack() as stack:
        runner = await build_eval(stack, config, db)  # every client answered its preflight: nothing written before
        check_dataset_reachable(db, config.data.dataset)
        await db.create_tables()
        await ensure_dataset(db, config.data.dataset)
        questions = await select_questions(db, config.data.dataset, config.data.limit, config.data.offset)
        data = config.data
        if not questions:  # (an offset past the end): an eval of nothing is no result
            size = await dataset_size(db, data.dataset)
            raise ConfigError(
                f"data set {data.dataset!r}: --offset {data.offset} selects no question (it holds {size}: 0-{size - 1})"
            )
        try:
            check_run_size(len(questions), config.pass_k)
        except ValueError as e:
            raise ConfigError(f"data set {data.dataset!r}: {e}") from None
        if data.limit and len(questions) < data.limit:  # a result on fewer questions than asked is said
            log.warning(
                "data set %r holds %d questions from offset %d, not the %d of --limit: evaluating those",
                *(data.dataset, len(questions), data.offset, data.limit),
            )
        check_answers(verify, questions, config.data.dataset)
        content = content_digest(questions)
        shaping = shaping_config(config, content)
        await claim_experiment(stack, db, Claim(config.exp_id, "eval", shaping, [config.exp_id], args.fresh))
        again = await judge_again_if_the_verifier_changed(db, config.exp_id, file_digest(verify))
        if again:
            when = "with --step judge" if args.step == "rollout" else "now"
            log.warning(
                "%s: the verifier's file changed since its attempts were judged: %d are judged again %s",
                *(config.exp_id, again, when),
            )
        if args.fresh or again:  # the old result goes with the attempts (or the judgements) it was computed from
            out.unlink(missing_ok=True)
            async with db.transaction() as s:
                await s.execute(delete(EvalResult).where(EvalResult.exp_id == config.exp_id))
        total = await runner.prepare(fresh=args.fresh)
        model = runner.agent.llm.model
        log.info("%s: %d attempts (%s, K=%d) with %s", config.exp_id, total, config.data.dataset, config.pass_k, model)
        start = time.perf_counter()
        await runner.run(args.step)
        rows = await runner.rows()
        # a run that did not do its job shows and leaves no result that looks like one; attempts never rolled out
        # are said first: "run the same command again" would never judge them
        if args.step == "judge" and (pending := sum(r.stage == "init" for r in rows)):
            raise RunFailed(
                f"{config.exp_id}: {pending} of {len(rows)} attempts are not rolled out yet, so no result is written;"
                " run --step rollout (or no --step) first"
            )
        remedy = ROLL_OUT_AGAIN if args.step == "judge" else RERUN  # a judge step retries no rollout
        check_attempts(rows, config.max_failed_share, config.exp_id, args.step != "rollout", remedy)
        if args.step == "rollout":  # nothing judged yet: no metrics to show or keep
            rolled, judged = sum(r.stage in ("rollout", "judged") for r in rows), sum(r.stage == "judged" for r in rows)
            next_step = "all judged already" if judged == rolled > 0 else "judge them with --step judge"
            console.print(f"{config.exp_id}: {rolled} of {len(rows)} attempts rolled out; {next_step}")
            return 0
        metrics = compute_metrics((ScoredAttempt.from_row(r) for r in rows), config.pass_k)
        metrics = metrics.model_copy(
            update={
                "exp_id": config.exp_id,
                "dataset": config.data.dataset,
                "model": model,
                "wall_time": time.perf_counter() - start,
            }
        )
        async with db.transaction() as s:  # one result per exp_id: a judge step or a resume replaces the last
            await s.execute(delete(EvalResult).where(EvalResult.exp_id == config.exp_id))
            s.add(EvalResult(exp_id=config.exp_id, metrics=metrics.model_dump(mode="json")))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(metrics.model_dump_json(indent=2) + "\n")
        print_metrics(metrics)  # after the result is kept, whatever its names hold
        console.print(f"metrics written to {out}")
    return 0


def print_metrics(m: EvalMetrics) -> None:
    # names from data and configs (a level, a tool, the model) shown as written: "[hard]" is no markup
    table = Table(title=cli.as_text(f"{m.exp_id} on {m.dataset} ({m.model})"))
    table.add_column("metric")
    table.add_column("value", justify="right")
    k = m.k
    low, high = m.mean_at_k_ci95
    table.add_row(f"Mean@{k}", f"{m.mean_at_k:.3f}  (95% CI {low:.3f}–{high:.3f})")  # shown only once judged
    table.add_row(f"Pass@{k}", f"{m.pass_at_k:.3f}")
    if m.questions_with_contrast is not None:  # practice at G = K learns from these groups only
        table.add_row("questions whose attempts differ", f"{m.questions_with_contrast} of {m.questions_scored}")
    for n, value in m.unbiased_pass_at.items():
        table.add_row(f"pass@{n}", f"{value:.3f}")
    for level, v in m.by_level.items():
        table.add_row(cli.as_text(f"Mean@{k} level {level}"), f"{v.mean_at_k:.3f} ({v.questions} q)")
    for key in (
        "questions",
        "attempts",
        "attempts_judged",
        "attempts_failed",
        "verifier_errors",
        "attempts_cut",
        "replies_empty",
    ):
        table.add_row(key, str(getattr(m, key)))
    table.add_row("avg tool calls", f"{m.avg_tool_calls:.2f}")
    for tool, t in m.tools.items():
        with_, without = t.rewards_text()
        usage = f"{t.calls} calls, {t.errors} errors, {t.mean_seconds:.2f}s avg"
        rewards = f"reward {with_} with it ({t.attempts_using} attempts), {without} without"
        table.add_row(cli.as_text(f"tool {tool}"), f"{usage}; {rewards}")
    for choice, r in m.routes.items():
        table.add_row(cli.as_text(f"router chose {choice}"), f"{r.attempts} attempts, reward {r.mean_reward:.3f}")
    table.add_row("tokens (total / avg per attempt)", f"{m.total_tokens} / {m.avg_tokens:.0f}")
    table.add_row("cost", f"${m.total_cost:.4f}")
    table.add_row("wall time", f"{m.wall_time:.1f}s")
    console.print(table)


def check_same_questions(a: list[EvaluationSample], b: list[EvaluationSample]) -> None:
    """Questions are paired by data set and index: a data set replaced between two runs would pair different
    questions, and the comparison would measure nothing."""
    asked = {(r.dataset, r.dataset_index): (r.raw_question, r.correct_answer) for r in a}
    for r in b:
        key = (r.dataset, r.dataset_index)
        if key in asked and asked[key] != (r.raw_question, r.correct_answer):
            raise ConfigError(
                f"--compare: {r.dataset}#{r.dataset_index} is another question (or answer) in {a[0].exp_id!r} than in"
                f" {r.exp_id!r}: the data set changed between them (upload --replace); compare runs on the same data"
            )


async def compare_runs(exp_a: str, exp_b: str, db: Database) -> int:
    if exp_a == exp_b:
        raise ConfigError(f"--compare: both runs are {exp_a!r}; compare a baseline with another run")
    for exp in (exp_a, exp_b):
        if PRACTICE_ROW_NAME.search(exp):
            raise ConfigError(
                f"--compare: {exp!r} holds a practice's own attempts (its rollouts or in-step evaluation), not an"
                " eval; evaluate the enhanced agent with run_eval.py --agent_config runs/<exp_id>/enhanced_agent.yaml"
            )
    async with db.sessions() as s:
        stored = {
            exp: list(await s.scalars(select(EvaluationSample).where(EvaluationSample.exp_id == exp)))
            for exp in (exp_a, exp_b)
        }
        rows = {exp: [ScoredAttempt.from_row(r) for r in samples] for exp, samples in stored.items()}
        unfinished = set(  # evals that stored no result: they failed, or stopped part-way
            await s.scalars(
                select(Experiment.exp_id).where(
                    Experiment.exp_id.in_([exp_a, exp_b]),
                    Experiment.kind == "eval",
                    Experiment.exp_id.not_in(select(EvalResult.exp_id)),
                )
            )
        )
    for exp, attempts in rows.items():
        if not attempts:
            raise ConfigError(f"--compare: no attempts stored for exp_id {exp!r}")
        if exp in unfinished or not any(a.stage == "judged" for a in attempts):
            raise ConfigError(f"--compare: run {exp!r} has no result (it failed or did not finish); rerun it first")
    check_same_questions(stored[exp_a], stored[exp_b])
    result = compare(rows[exp_a], rows[exp_b])
    if not result.rows:
        raise ConfigError(f"--compare: {exp_a!r} and {exp_b!r} judged no question in common")
    table = Table(title=f"per-question mean reward: {exp_a} (A) vs {exp_b} (B)")
    for column in ("question", "A", "B", "B - A"):
        table.add_column(column, justify="right")
    for (dataset, index), a, b in result.rows:
        table.add_row(f"{dataset}#{index}", f"{a:.3f}", f"{b:.3f}", f"{b - a:+.3f}")
    console.print(table)
    low, high = result.ci95
    verdict = "a real gain" if low > 0 else "a real loss" if high < 0 else "not distinguishable from noise"
    console.print(
        f"B - A = {result.mean_diff:+.3f} (95% CI {low:+.3f} to {high:+.3f}) over {len(result.rows)} shared questions: "
        f"{verdict}. Only in A: {result.only_a}, only in B: {result.only_b}."
    )
    return 0


async def run() -> int:
    args, overrides = parse_args()
    async with Database(args.db_url) as db:  # (opened by its first use: an eval checks all it can before)
        if args.compare:
            if not db.exists():
                raise ConfigError(f"--compare: no database at {db.describe()}; pass the --db_url the runs used")
            await db.create_tables()
            exp_a, exp_b = args.compare  # nargs=2
            return await compare_runs(exp_a, exp_b, db)
        return await evaluate(args, overrides, db)


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
