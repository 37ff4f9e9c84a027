"""The training loop: generate, score, learn, log, checkpoint. One step per batch of prompts.

Metrics of every step go to `metrics.jsonl` (and TensorBoard when it is installed); the wall time is split
into generation, scoring and the update, because on a CPU generation dominates.
"""

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from utu.eval.metrics import ScoredAttempt, tool_stats
from utu.names import replace_text
from utu.rl.batch import sum_across_processes
from utu.rl.env import GRPOEnv, Prompt
from utu.rl.grpo import LocalGRPO, Rollout

log = logging.getLogger(__name__)


class MetricsLog:
    """Appends one JSON object per step to a JSONL file and mirrors scalars to TensorBoard if available."""

    def __init__(self, path: Path, tensorboard: bool = True, resumed_at: int | None = None):
        """`resumed_at`: the step the checkpoint holds (0: none); records of later steps, made by a run stopped
        before it saved them, are dropped (the resumed run makes those steps again). None: append to all."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if resumed_at is not None:
            self._keep_up_to(resumed_at)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional
                log.debug("tensorboard not installed: metrics go to %s only", path)
            else:
                purge = None if resumed_at is None else resumed_at + 1
                self.writer = SummaryWriter(str(path.parent / "tensorboard"), purge_step=purge)

    def _keep_up_to(self, step: int) -> None:
        if not self.path.is_file():
            return
        lines = self.path.read_text().splitlines(keepends=True)
        kept = [line for line in lines if _step_of(line) <= step]
        if len(kept) < len(lines):
            replace_text(self.path, "".join(kept))

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            step = record.get("step", 0)
            for key, value in record.items():
                if isinstance(value, int | float) and key != "step":
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _step_of(line: str) -> float:
    """A record's step; a line cut short by a kill, or blank, is past any step (dropped)."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


async def train_step(agent: LocalGRPO, env: GRPOEnv) -> dict[str, Any]:
    """One GRPO step on the batch that belongs to `agent.step`; returns its metrics."""
    batch = env.batch_at(agent.step)
    # Under `accelerate launch`, process r takes prompts r, r + W, ... (whole groups stay together; learn()
    # relies on this split). Every process needs at least one prompt.
    world = agent.accelerator.num_processes
    if len(batch) < world:
        raise ValueError(f"step {agent.step} has {len(batch)} prompt(s) for {world} processes: give each at least one")
    batch = batch[agent.accelerator.process_index :: world]
    start = time.perf_counter()
    # Torch runs on the event loop's thread on purpose: from a worker thread it was 2-3x slower on these CPUs
    # (a second OpenMP pool competing with the first), and nothing else needs the loop while the model works.
    rollout = await agent.sample([p.messages for p in batch], env.tools)
    generated = time.perf_counter()
    rewards = await env.rewards.score(batch, rollout.texts)
    scored = time.perf_counter()
    metrics = agent.learn(rollout, rewards)
    counts = torch.tensor([rollout.completion_ids.size(0), rollout.loss_mask.sum().item()])
    completions, tokens = sum_across_processes(agent.accelerator, counts.to(agent.accelerator.device)).tolist()
    if rollout.tool_logs is not None:
        metrics |= tool_metrics(agent, batch, rollout, rewards)
    return {
        "step": agent.step,
        **metrics,
        "gen_time": generated - start,
        "reward_time": scored - generated,
        "step_time": time.perf_counter() - start,
        "completions": int(completions),  # all processes'; the times are the main process's
        "tokens_generated_per_s": tokens / max(generated - start, 1e-9),
    }


def tool_metrics(agent: LocalGRPO, batch: list[Prompt], rollout: Rollout, rewards: torch.Tensor) -> dict[str, Any]:
    """Per tool, the fields evaluation and practice report (`utu.eval.metrics.tool_stats`), over every process's
    completions: tools/<name>/calls, errors, mean_seconds, max_seconds, attempts_using, reward_using,
    reward_not_using; and the turns per completion, and the seconds spent in tools and in appending results."""
    assert rollout.tool_logs is not None and rollout.turns is not None  # a rollout with tools: the caller checks
    g = rollout.group_size
    attempts = [
        ScoredAttempt(question=("", batch[row // g].index), stage="judged", reward=reward, tools=log)
        for row, (reward, log) in enumerate(zip(rewards.flatten().tolist(), rollout.tool_logs, strict=True))
    ]
    turns = rollout.turns.tolist()
    if agent.accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        attempts, turns = gather_object(attempts), gather_object(turns)
    out: dict[str, Any] = {"turns/mean": sum(turns) / len(turns)}
    for tool, stats in tool_stats(attempts).items():
        out |= {f"tools/{tool}/{key}": value for key, value in stats.model_dump().items() if value is not None}
    seconds = rollout.seconds or {}
    return out | {"tool_time": seconds.get("tools", 0.0), "results_time": seconds.get("results", 0.0)}


async def train(
    agent: LocalGRPO,
    env: GRPOEnv,
    steps: int,
    metrics: MetricsLog | None,
    checkpoint: Path | None = None,
    save_every: int = 0,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run until `agent.step == steps`, resuming from wherever the agent is. Every process runs it; only the
    main one should pass `metrics` (the records are already reduced across processes)."""
    while agent.step < steps:
        record = await train_step(agent, env)
        if metrics is not None:
            metrics.write(record)
        if on_step is not None:
            on_step(record)
        if checkpoint is not None and (agent.step == steps or (save_every and agent.step % save_every == 0)):
            agent.save_checkpoint(checkpoint)
