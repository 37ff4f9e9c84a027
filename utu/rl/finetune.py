"""AgileRL's training loop for a population of GRPO agents, with its arguments: `finetune_llm` (AgileRL before 2.4,
`agilerl.training.train_llm`) and `finetune_llm_reasoning` (since, `agilerl.training.llm`).

Each iteration every agent samples a group per prompt of the env's next batch, is rewarded and learns; every
`evaluation_interval` iterations each agent's `test` appends to its fitness; every `evo_steps` iterations
tournament selection and mutation make the next generation (`utu.rl.evolution`), and the elite is saved when
`save_elite`. Differences on purpose: `wb=True` writes the metrics AgileRL would send to Weights & Biases to
`<elite_path or checkpoint_path>_metrics.jsonl` beside the checkpoints (else `./finetune_metrics.jsonl`; no
W&B here; a checkpoint folder is replaced whole when saved again); TensorBoard is refused.
"""

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from utu.rl.evolution import Mutations, TournamentSelection
from utu.rl.grpo import STATE_FILE
from utu.rl.train import MetricsLog

log = logging.getLogger(__name__)


def finetune_llm(
    pop: list[Any],
    env: Any = None,
    init_hp: dict[str, Any] | None = None,
    save_elite: bool | None = None,
    elite_path: str | None = None,
    wb: bool = False,
    evo_steps: int | None = 20,
    checkpoint_steps: int | None = None,
    checkpoint_path: str | None = None,
    tournament: TournamentSelection | None = None,
    mutation: Mutations | None = None,
    wandb_api_key: str | None = None,
    evaluation_interval: int = 10,
    max_reward: float | None = None,
    verbose: bool = True,
    accelerator: Any = None,
    max_steps: int | None = None,
    num_epochs: int | None = None,
    selection_strategy: TournamentSelection | None = None,
    env_fn: Callable[[], Any] | None = None,
    tensorboard: bool = False,
    tensorboard_log_dir: str | None = None,
    wandb_kwargs: dict[str, Any] | None = None,
) -> tuple[list[Any], list[float]]:
    """Train `pop` on `env` (or one env per agent from `env_fn`) for `max_steps` prompts, counted over the whole
    population (default: `num_epochs` passes over the training set, default one), as AgileRL counts them; returns
    the final population and each agent's last fitness."""
    if tensorboard or tensorboard_log_dir or wandb_api_key or wandb_kwargs:
        raise ValueError("finetune_llm: TensorBoard and W&B keys are not supported here; wb=True writes metrics.jsonl")
    if (env is None) == (env_fn is None):
        raise ValueError("finetune_llm: give exactly one of env and env_fn")
    if tournament is not None and selection_strategy is not None:
        raise ValueError("finetune_llm: give selection_strategy or its older name tournament, not both")
    selection = selection_strategy or tournament
    evolving = selection is not None and mutation is not None
    if (selection is None) != (mutation is None):  # AgileRL evolves with both; one alone would train unevolved
        raise ValueError("finetune_llm: evolution needs both a selection_strategy (or tournament) and mutation")
    if selection is not None and len(pop) != selection.population_size:  # (said after training, before)
        raise ValueError(
            f"finetune_llm: the selection's population_size={selection.population_size} but pop has {len(pop)} agents"
        )
    if evolving and not evo_steps:
        raise ValueError("finetune_llm: tournament and mutation need evo_steps")
    evolve_every = evo_steps if evolving else None
    if save_elite and not elite_path:
        raise ValueError("finetune_llm: save_elite needs elite_path")
    if not pop:
        raise ValueError("finetune_llm: pop is empty; make it with GRPO.population(size, ...)")
    counts = {"evaluation_interval": evaluation_interval, "evo_steps": evo_steps, "max_steps": max_steps}
    counts |= {"num_epochs": num_epochs, "checkpoint_steps": checkpoint_steps}
    for name, count in counts.items():
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"finetune_llm: {name} must be a whole number >= 1, not {count!r}")
    if evolve_every and evolve_every % evaluation_interval:
        raise ValueError(
            f"finetune_llm: evo_steps={evo_steps} is not a multiple of evaluation_interval={evaluation_interval}; "
            "selection needs a fresh fitness"
        )
    envs = [env] * len(pop) if env_fn is None else [env_fn() for _ in pop]
    batch = envs[0].batch_size * envs[0].world
    if max_steps is None:
        max_steps = (num_epochs or 1) * len(envs[0])
    iterations = -(max_steps // -(batch * len(pop)))
    if iterations < evaluation_interval or (evolve_every and iterations < evolve_every):
        raise ValueError(
            f"finetune_llm: {max_steps} prompts make {iterations} iteration(s) of the population of {len(pop)}, "
            f"fewer than evaluation_interval={evaluation_interval}"
            + (f" or evo_steps={evo_steps}" if evolve_every else "")
            + ": no agent would be tested or evolved; raise max_steps (or num_epochs), or lower them"
        )
    targets = [Path(elite_path)] if elite_path and save_elite else []
    targets += [Path(checkpoint_path) / f"agent_{a.index}" for a in pop] if checkpoint_path else []
    for target in targets:
        if target.exists() and not (target / STATE_FILE).is_file():  # refused now, not a generation in
            raise ValueError(f"finetune_llm: {target} exists and is not a checkpoint; give a new path")
    beside = Path(elite_path or checkpoint_path or "finetune")
    if accelerator is None:  # every process runs this loop: only the main one writes the metrics
        accelerator = getattr(pop[0], "accelerator", None)
    main = accelerator is None or accelerator.is_main_process
    metrics = MetricsLog(beside.with_name(beside.name + "_metrics.jsonl"), tensorboard=False) if wb and main else None
    prompts = [e.reset(reset_dataloaders=True) for e in envs] if env_fn else [envs[0].reset(reset_dataloaders=True)]
    seen, next_checkpoint = 0, checkpoint_steps
    for i in range(iterations):
        for k, agent in enumerate(pop):
            slot = k if env_fn else 0
            completion_ids, action_masks = agent.get_action(prompts[slot])
            prompts[slot], rewards = envs[k].step(completion_ids)
            loss, kl = agent.learn((completion_ids, action_masks, rewards))
            seen += batch
            row = {"iteration": i, "agent": agent.index, "loss": loss, "kl": kl, "reward": float(rewards.mean())}
            if max_reward is not None:
                row["accuracy"] = float((rewards == max_reward).float().mean())
            if metrics is not None:
                metrics.write({"time": time.time(), **row, **_hyperparameters(agent)})
        if (i + 1) % evaluation_interval == 0:
            for k, agent in enumerate(pop):
                agent.test(envs[k])
            if verbose and main:
                log.info("iteration %d: fitness %s", i + 1, [round(a.fitness[-1], 3) for a in pop])
        if evolve_every and (i + 1) % evolve_every == 0:
            pop = run_selection_and_mutation(selection, pop, mutation, elite_path=elite_path, save_elite=save_elite)
            if metrics is not None:
                generation = [_hyperparameters(a) | {"agent": a.index} for a in pop]
                metrics.write({"time": time.time(), "iteration": i, "generation": generation})
        if checkpoint_steps and checkpoint_path and next_checkpoint is not None and seen >= next_checkpoint:
            for agent in pop:
                agent.save_checkpoint(Path(checkpoint_path) / f"agent_{agent.index}")
            next_checkpoint += checkpoint_steps
    if save_elite and elite_path:
        elite = max(pop, key=lambda a: a.fitness[-1] if a.fitness else float("-inf"))
        elite.save_checkpoint(elite_path)
    return pop, [a.fitness[-1] if a.fitness else float("nan") for a in pop]


finetune_llm_reasoning = finetune_llm  # AgileRL 2.4+'s name, with the same arguments


def run_selection_and_mutation(
    selection_strategy: TournamentSelection | None,
    population: list[Any],
    mutation: Mutations | None,
    env_name: str | None = None,
    algo: str | None = None,
    elite_path: str | None = None,
    save_elite: bool | None = False,
    accelerator: Any = None,
    language_model: bool | None = True,
) -> list[Any]:
    """Tournament selection then mutation (AgileRL's helper for custom loops); the elite saved when asked."""
    if selection_strategy is None or mutation is None:
        return population
    elite, population, indices = selection_strategy.select(population)
    population = mutation.mutation(population, indices=indices)
    if save_elite and elite_path:
        elite.save_checkpoint(elite_path)
    return population


def _hyperparameters(agent: Any) -> dict[str, Any]:
    return {name: agent.hyperparameter(name) for name in agent.hp_config or []} | {"mutation": agent.mut}


__all__ = ["finetune_llm", "finetune_llm_reasoning", "run_selection_and_mutation"]
