"""What a practice run talks to: agent, learner, verifier and budget, opened from its config (each client
preflighted and closed with the run's `AsyncExitStack`), and the loop built from them."""

from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from utu.agents import Agent
from utu.app import budget, open_agent, open_client, open_judge
from utu.config.models import TrainingFreeGRPOConfig
from utu.db.engine import Database
from utu.llm.usage import UsageTracker
from utu.practice.experience_updater import ExperienceUpdater
from utu.practice.library import Library
from utu.practice.loop import PracticeLoop
from utu.verify import Verifier, load_verifier, warm_up


@dataclass
class PracticeParts:
    """What a practice run talks to, opened (each client preflighted) before its loop is built."""

    agent: Agent
    updater: ExperienceUpdater
    verifier: Verifier
    usage: UsageTracker

    def loop(
        self, config: TrainingFreeGRPOConfig, db: Database, initial: Library | None = None, pipeline: bool = True
    ) -> PracticeLoop:
        """The practice loop, starting from the `initial` library (default: empty)."""
        return PracticeLoop(
            config, db, self.agent, self.updater, self.verifier, self.usage, initial=initial, pipeline=pipeline
        )


async def open_practice(
    stack: AsyncExitStack,
    config: TrainingFreeGRPOConfig,
    verify: Callable[..., Any] | None = None,
    run_dir: Path | None = None,
) -> PracticeParts:
    """Agent, learner (the agent's client unless `learner_model` is set), verifier; closed with `stack`. `verify`:
    the verify function, if the caller loaded it already (else loaded from the config). `run_dir`: the run's
    folder, where an agent's router resumes and saves."""
    ev = config.evaluation
    verify = verify or load_verifier(ev.verify_filename, ev.verify_func_name)
    warm_up(verify)  # while the clients connect and the first rollouts run
    usage = budget(config.practice.max_cost, ev.agent.model, config.practice.learner_model, ev.judge_model)
    client = await open_client(stack, ev.agent.model, usage)
    learner = client
    if config.practice.learner_model:
        learner = await open_client(stack, config.practice.learner_model, usage)
    judge = await open_judge(stack, ev, usage)
    verifier = Verifier(verify, ev.verify_timeout, ev.timeout_score, llm=judge)
    agent = await open_agent(stack, ev.agent, client, run_dir=run_dir, restart_step=config.practice.restart_step)
    return PracticeParts(agent, ExperienceUpdater(learner, config.practice), verifier, usage)
