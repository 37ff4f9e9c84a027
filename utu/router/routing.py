"""An agent's router: the question's embedding -> a choice -> the tools the LLM is offered; rewards teach it.

Built from an agent config's `tool_router` (utu.config.models.ToolRouterConfig) by `open_router`. The agent asks
`choose` before its first LLM call; `run_attempt` hands the verify function's reward to `observe`; practice calls
`update` after each step's rollouts and saves the state in the run's folder.
"""

import logging
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from utu.config.models import ToolRouterConfig
from utu.errors import ConfigError
from utu.router import STATE_FILE
from utu.router.embeddings import Embedder
from utu.router.router import Decision, Router
from utu.tracing.spans import CHAIN, set_attributes, span

log = logging.getLogger(__name__)


class AgentRouter:
    def __init__(self, router: Router, embedder: Embedder, choices: dict[str, list[str]], save_to: Path | None = None):
        self.router = router
        self.embedder = embedder
        self.choices = choices
        self.save_to = save_to
        self._stats: dict[str, list[float]] = defaultdict(list)  # choice -> rewards observed (explored or not)
        self._lock = threading.Lock()

    async def choose(self, question: str, *, explore: bool) -> Decision:
        with span("route", CHAIN, input=question, explore=explore) as current:
            features = torch.from_numpy(await self.embedder.one(question))
            decision = self.router.decide(question, features, explore=explore)
            probabilities = dict(zip(self.router.choices, decision.probabilities, strict=True))
            set_attributes(current, {"choice": decision.choice, "member": decision.member} | _prefixed(probabilities))
        return decision

    def offered(self, decision: Decision) -> list[str]:
        """The tools the LLM may call after this decision."""
        return self.choices[decision.choice]

    def observe(self, decision: Decision, reward: float) -> None:
        with span("route reward", CHAIN, choice=decision.choice, reward=reward, explored=decision.explored):
            self.router.observe(decision, reward)
        with self._lock:
            self._stats[decision.choice].append(reward)

    def update(self) -> dict[str, dict[str, float]]:
        """One GRPO update on what practice observed since the last, then the state saved (if it has a place)."""
        with span("route update", CHAIN, observations=len(self.router.buffer)) as current:
            report = self.router.update()
            set_attributes(current, {f"{m}.{k}": v for m, values in report.items() for k, v in values.items()})
        if self.save_to is not None:
            self.router.save(self.save_to)
        return report

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per choice: how often it was taken and the mean reward of those attempts (in this process)."""
        with self._lock:
            return {
                c: {"attempts": len(r), "mean_reward": sum(r) / len(r) if r else None}
                for c, r in sorted(self._stats.items())
            }


def _prefixed(probabilities: dict[str, float]) -> dict[str, float]:
    return {f"probability.{c}": round(p, 4) for c, p in probabilities.items()}


def route_choices(config: ToolRouterConfig, tools: list[str]) -> dict[str, list[str]]:
    """The config's choices, checked against the agent's tools (each tool alone when the config names none)."""
    if config.choices is None:
        if len(tools) < 2:
            raise ConfigError(f"tool_router: the agent has {len(tools)} tool(s); a router needs two choices or more")
        return {t: [t] for t in tools}
    unknown = sorted({t for offered in config.choices.values() for t in offered} - set(tools))
    if unknown:
        raise ConfigError(
            f"tool_router.choices names {', '.join(unknown)}, which the agent's toolkits do not offer "
            f"(its tools: {', '.join(sorted(tools)) or 'none'})"
        )
    if len(config.choices) < 2:
        raise ConfigError("tool_router.choices: a router needs two choices or more")
    return dict(config.choices)


async def open_router(config: ToolRouterConfig, tools: list[str], *, run_dir: Path | None = None) -> AgentRouter:
    """The router of an agent config. `run_dir` (practice): resume from its saved state if there is one, else
    from `config.state`, and save there after each update. Without it (evaluation) `config.state` is used frozen."""
    choices = route_choices(config, tools)
    embedder = Embedder.connect(config.embeddings.base_url, config.embeddings.model, config.embeddings.api_key)
    dimension = len(await embedder.one("What is the size of an embedding?"))
    saved = run_dir / STATE_FILE if run_dir is not None else None
    start = saved if saved is not None and saved.exists() else Path(config.state) if config.state else None
    if start is not None:
        router = Router.load(start, choices=list(choices), features=dimension)
    else:
        if run_dir is None:
            log.warning(
                "tool_router has no state: an untrained router takes %r for every question", next(iter(choices))
            )
        router = Router(
            list(choices),
            dimension,
            hidden=config.hidden,
            lr=config.lr,
            clip=config.clip,
            epochs=config.epochs,
            seed=config.seed,
        )
    return AgentRouter(router, embedder, choices, save_to=saved)
