"""Parameter-updating GRPO on a local model, rewarded by the same verify functions as practice and evaluation.

    python scripts/run_grpo.py                                   # SmolLM2-135M on MAWPS, on the CPU
    python scripts/run_grpo.py --config_name toy                 # a seconds-long smoke run on a tiny model
    python scripts/run_grpo.py --steps 40 trainer.lr=1e-5 trainer.beta=0.04

Writes runs/<exp_id>/grpo/: metrics.jsonl (one line per step), tensorboard/ (if installed), checkpoint/
(model or LoRA adapter, optimizer, scheduler, RNG, step) and test.json (Mean@k / Pass@k before and after).
Running the same command again resumes from the checkpoint; --fresh starts over.
Several processes: `accelerate launch --multi_gpu --num_processes 2 scripts/run_grpo.py ...` (docs/rl.md: what is
tested on the CPU, what is expected on GPUs).
"""

import argparse
import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from utu import cli
from utu.app import open_client
from utu.cli import refuse_unknown_flags
from utu.config.flags import add_flags, add_place_flags, given
from utu.config.loader import load_config, load_model_config, validate
from utu.config.models import shaping_dump
from utu.config.rl import RLConfig
from utu.db.experiments import changed_fields
from utu.errors import ConfigError
from utu.names import inside, replace_text, writable_folder
from utu.verify import Verifier, load_verifier

log = logging.getLogger("run_grpo")
console = cli.plain_console()


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_name", default="smollm2_mawps", help="config under configs/rl/ (%(default)s)")
    parser.set_defaults(rl_flags=add_flags(parser, RLConfig, ["exp_id", "steps", "prompts_per_step", "save_every"]))
    parser.add_argument("--fresh", action="store_true", help="delete this exp_id's checkpoint and metrics first")
    add_place_flags(parser, "grpo/: the checkpoint, metrics and results")
    args, overrides = parser.parse_known_args()
    refuse_unknown_flags(parser, overrides)
    return args, overrides


def build_config(args: argparse.Namespace, overrides: list[str]) -> RLConfig:
    config = load_config("rl", args.config_name, RLConfig, overrides)
    flags = given(args, args.rl_flags)
    return validate(config.model_dump() | flags, RLConfig, {"": "command line"})


def split(questions: list, config: RLConfig) -> tuple[list, list]:
    """The last `test_size` questions are held out; training uses the rest (or its first `train_limit`)."""
    size = config.data.test_size
    if len(questions) <= size:
        raise ConfigError(f"data.test_size: {size} leaves no training questions (the data set has {len(questions)})")
    train, test = questions[: len(questions) - size], questions[len(questions) - size :]
    return train[: config.data.train_limit], test


def build_agent(config: RLConfig, checkpoint: Path) -> Any:
    try:
        from utu.rl.grpo import LocalGRPO, load_causal_lm
        from utu.rl.toy import char_tokenizer, tiny_llama
    except ImportError as e:
        raise ConfigError(f"the RL module needs its extra: run `make install-rl` ({e})") from e
    if checkpoint.is_dir():
        try:
            agent = LocalGRPO.load(checkpoint, device=config.model.device)
        except ValueError as e:  # e.g. saved by a different number of processes
            raise ConfigError(str(e)) from e
        except (OSError, RuntimeError, EOFError, KeyError) as e:  # a file missing, cut short or not torch's
            why = " ".join(str(e).split())[:200]
            raise ConfigError(f"{checkpoint}: cannot resume from it ({why}); use --fresh to start over") from e
        saved = agent.settings.model_dump()
        changed = sorted(k for k, v in config.trainer.model_dump().items() if saved.get(k) != v)
        if changed:
            raise ConfigError(
                f"{checkpoint}: trainer settings differ from the checkpoint ({', '.join(changed)}); "
                "use --fresh to start over or a new --exp_id"
            )
        log.info("resuming %s at step %d", checkpoint, agent.step)
        return agent
    knobs = config.trainer.model_dump()
    if config.model.path == "toy":
        tokenizer = char_tokenizer()
        model = tiny_llama(len(tokenizer), seed=config.trainer.seed)
        return LocalGRPO(model, tokenizer, device=config.model.device, **knobs)
    source = embedded_source(config.model.path) or {"path": config.model.path}
    if config.model.gguf_file:
        source["gguf_file"] = config.model.gguf_file
    log.info("loading %s (a GGUF file is dequantised to fp32: about 25 s for 135M)", source)
    try:
        model, tokenizer = load_causal_lm(source)
    except (OSError, ValueError) as e:
        raise ConfigError(f"model.path: cannot load {source}: {e}") from e
    return LocalGRPO(model, tokenizer, device=config.model.device, model_source=source, **knobs)


def restore_checkpoint_of_a_cut_save(checkpoint: Path) -> None:
    """A save killed between its two renames left the previous checkpoint as `checkpoint.old` and none in place:
    that one is the run's last, and is resumed from (the next save removes the `.tmp` it left)."""
    old = checkpoint.with_name(checkpoint.name + ".old")
    if not checkpoint.exists() and (old / "trainer_state.pt").is_file():  # (grpo.STATE_FILE: no torch import here)
        old.rename(checkpoint)
        log.warning("%s: a save was cut short; resuming from the checkpoint before it", checkpoint)


def check_local_model(path: str) -> None:
    """A model.path written as a folder (`/`, `./`, `../`, `~`) that is none: said so, not as a malformed hub id."""
    folder = Path(path).expanduser()
    if path.startswith(("/", "./", "../", "~")) and not folder.is_dir():
        what = "is a file, not a model folder" if folder.exists() else "no such folder"
        raise ConfigError(f"model.path: {path}: {what} (a local model folder, a hub id, or an embedded model's name)")


def embedded_source(path: str) -> dict[str, str] | None:
    """The GGUF of an embedded model named as model.path ("embedded": SmolLM2-135M), or None."""
    from utu.errors import LLMError
    from utu.llm.weights import MODELS
    from utu.rl.grpo import embedded_model_source

    if path != "embedded" and path not in MODELS:
        return None
    try:
        return embedded_model_source("smollm2-135m" if path == "embedded" else path)
    except LLMError as e:  # a Qwen model not fetched yet
        raise ConfigError(f"model.path: {e}") from e


def progress_line(record: dict[str, Any]) -> str:
    parts = [f"reward {record['reward']:.3f}", f"len {record['completions/mean_length']:.0f}"]
    if "kl" in record:
        parts.append(f"kl {record['kl']:.4f}")
    parts.append(f"zero-std {record['frac_reward_zero_std']:.2f}")
    return " | ".join(parts)


def process_state(device: str) -> Any:
    """Accelerate's view of this process (one of several under `accelerate launch` / `torchrun`); on the CPU
    the processes talk over gloo. Created before the trainer's Accelerator, which then shares it."""
    try:
        from accelerate import PartialState
    except ImportError as e:
        raise ConfigError(f"the RL module needs its extra: run `make install-rl` ({e})") from e
    state = PartialState(cpu=device == "cpu")
    if device == "cuda" and state.device.type != "cuda":
        log.warning("model.device cuda: no GPU is visible, so this run uses the CPU")
    return state


async def run() -> int:
    args, overrides = parse_args()
    config = build_config(args, overrides)
    out = inside(args.output_dir, config.exp_id, "grpo")
    state = process_state(config.model.device)
    if config.prompts_per_step < state.num_processes:
        raise ConfigError(
            f"prompts_per_step: {config.prompts_per_step} prompt(s) for {state.num_processes} processes; "
            "give each process at least one"
        )
    verify = load_verifier(config.verify_filename, config.verify_func_name)  # before --fresh deletes anything
    embedded_source(config.model.path)  # (an embedded model not fetched yet: said before --fresh too)
    check_local_model(config.model.path)
    if state.is_main_process:  # only the main process touches the results folder
        writable_folder(out)
        if args.fresh:
            shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        restore_checkpoint_of_a_cut_save(out / "checkpoint")
    state.wait_for_everyone()
    check_same_run(out, config, write=state.is_main_process)  # every process refuses, none waits for another
    async with contextlib.AsyncExitStack() as stack:
        judge = await open_judge_for(config, stack)
        verifier = Verifier(verify, timeout=config.verify_timeout, llm=judge)
        await train_and_test(args, config, out, verifier, stack)
    # Leave together: a process that exits while another still talks to it aborts that one.
    state.wait_for_everyone()
    state.destroy_process_group()
    return 0


RUN_FILE = "run.json"


def shaping(config: RLConfig) -> dict[str, Any]:
    """What a resumed run must share with the run it resumes: its shaping knobs (not how long it trains, where,
    how often it saves; no endpoint or key). The trainer's are checked against the checkpoint too."""
    kept = json.loads(json.dumps(shaping_dump(config), default=str))
    if kept["agent"] is not None:
        kept["agent"].pop("model")  # the trained model answers: the agent's model is not used
    return kept


def check_same_run(out: Path, config: RLConfig, write: bool) -> None:
    """Refuse to resume `out` under other data, model, prompts or verifier: the held-out test's "before" and the
    checkpoint were made under the recorded ones. A folder without the record (an older run) records them now."""
    path, now = out / RUN_FILE, shaping(config)
    computed = any((out / name).exists() for name in ("test.json", "metrics.jsonl", "checkpoint"))
    changed = changed_fields(_json_of(path), now) if path.is_file() else None
    if changed and computed:
        raise ConfigError(
            f"{out}: this run was made with other settings (changed: {', '.join(changed)}); "
            "use --fresh to start over, or a new --exp_id"
        )
    if write and (changed or not path.is_file()):  # a run refused before it computed anything is remade
        replace_text(path, json.dumps(now, indent=2))


def _json_of(path: Path) -> Any:
    """A record this command wrote, or one line saying it is damaged (a file cut short, or edited)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ConfigError(f"{path}: cannot read it ({e}); use --fresh to start over") from e


async def open_judge_for(config: RLConfig, stack: contextlib.AsyncExitStack):
    """The judge client LLM-graded verifiers get (as in evaluation and practice), or None."""
    judge = config.judge_model
    if judge is None and os.environ.get("JUDGE_LLM_BASE_URL"):
        judge = load_model_config("judge")
    return None if judge is None else await open_client(stack, judge, env_prefix="JUDGE_LLM")


async def open_tools(config: RLConfig, agent: Any, stack: contextlib.AsyncExitStack) -> Any:
    """The agent config's tools as the trained model sees them (None: no agent, or one without toolkits, and
    completions are single replies). MCP servers start here and stop with `stack`."""
    if config.agent is None or not config.agent.toolkits:
        return None
    from utu.rl.tool_chat import ToolChat
    from utu.tools.registry import open_toolkits
    from utu.tools.runner import ToolRunner

    if agent.tokenizer is None:
        raise ConfigError("agent.toolkits: tools need a model with a tokenizer and chat template")
    toolkits = await open_toolkits(stack, config.agent.toolkits)
    bare = config.agent.text_tool_calls  # off: only the chat template's <tool_call> blocks are calls
    return ToolChat(agent.tokenizer, ToolRunner(toolkits), max_turns=config.agent.max_turns, bare_calls=bare)


async def train_and_test(
    args, config: RLConfig, out: Path, verifier: Verifier, stack: contextlib.AsyncExitStack
) -> None:
    from utu.config.rl import DEFAULT_SYSTEM_PROMPT
    from utu.rl.env import GRPOEnv, PromptTemplate, load_questions

    questions = await load_questions(config.data.dataset, config.data.file_path, args.db_url)
    train_questions, test_questions = split(questions, config)
    from utu.rl.train import MetricsLog, train

    checkpoint = out / "checkpoint"
    agent = build_agent(config, checkpoint)
    tools = await open_tools(config, agent, stack)
    system = config.data.system or DEFAULT_SYSTEM_PROMPT
    template = PromptTemplate(system=system, user=config.data.user, agent=config.agent)
    batch, seed = config.prompts_per_step, config.trainer.seed
    env = GRPOEnv(train_questions, template, verifier, batch_size=batch, seed=seed, tools=tools)
    test_env = GRPOEnv(test_questions, template, verifier, tools=tools)

    main = agent.accelerator.is_main_process
    results_file = out / "test.json"
    results = _json_of(results_file) if results_file.is_file() else {}
    if "before" not in results:
        say(main, f"testing the starting model on {len(test_questions)} held-out questions (k={config.test_k})")
        results["before"] = await agent.test(test_env, k=config.test_k)
        if main:
            replace_text(results_file, json.dumps(results, indent=2))
    # metrics are already reduced across processes; steps past the checkpoint's are made again
    metrics = MetricsLog(out / "metrics.jsonl", resumed_at=agent.step) if main else None
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not main) as progress:
        task = progress.add_task("GRPO", total=config.steps, completed=agent.step)

        def show_step(record: dict[str, Any]) -> None:
            progress.update(task, completed=record["step"], description=progress_line(record))

        await train(agent, env, config.steps, metrics, checkpoint, config.save_every, on_step=show_step)
    if metrics is not None:
        metrics.close()
    say(main, "testing the trained model")
    results["after"] = await agent.test(test_env, k=config.test_k)
    results["steps"] = agent.step
    if main:
        replace_text(results_file, json.dumps(results, indent=2))
        show(results, config.test_k, out)


def say(main: bool, text: str) -> None:
    if main:
        console.print(text)


def show(results: dict[str, Any], k: int, out: Path) -> None:
    table = Table(title=f"held-out test ({results['before']['prompts']} questions, k={k})")
    for column in ("", f"Mean@{k}", f"Pass@{k}"):
        table.add_column(column)
    for name in ("before", "after"):
        r = results[name]
        table.add_row(name, f"{r[f'Mean@{k}']:.3f}", f"{r[f'Pass@{k}']:.3f}")
    console.print(table)
    console.print(f"metrics: {out / 'metrics.jsonl'}; checkpoint: {out / 'checkpoint'}")


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
