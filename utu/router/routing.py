"""An agent's router: the question's embedding -> a choice -> the tools the LLM is offered; rewards teach it.

Built from an agent config's `tool_router` (utu.config.models.ToolRouterConfig) by `open_router`. The agent asks
`choose` before its first LLM call; `run_attempt` hands the verify function's reward to `observe`; practice calls
`update(step)` after each step's rollouts, which saves the state in the run's folder (`tool_router.pt`, and
`tool_router.step<N>.pt` for `--restart_step`).
"""

import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from utu.config.models import ToolRouterConfig
from utu.errors import ConfigError
from utu.router import STATE_FILE
from utu.router.embeddings import Embedder
from utu.router.router import Decision, Router, RouterError, is_number
from utu.tracing.spans import CHAIN, set_attributes, span

log = logging.getLogger(__name__)


class AgentRouter:
    def __init__(
        self,
        router: Router,
        embedder: Embedder,
        choices: dict[str, list[str]],
        run_dir: Path | None = None,
    ):
        self.router = router
        self.embedder = embedder
        self.choices = choices
        router.offers = dict(choices)  # saved with the router: a state is refused where a choice's tools changed
        self.run_dir = run_dir  # practice's folder: the router saves there; None: frozen (evaluation, serving)

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

    async def observe_recorded(self, question: str, route: Any, reward: float) -> None:
        """An attempt judged before a crash, read back from its record (`meta.route`): its reward still counts,
        and the question's next attempts take other choices. A record that is not a decision is skipped (warned)."""
        if isinstance(route, dict) and not route.get("explored"):
            return  # a frozen decision teaches nothing
        try:
            if not (
                isinstance(route, dict) and isinstance(route.get("choice"), str) and route["choice"] in self.choices
            ):
                raise RouterError(f"no choice of this router's in {str(route)[:100]}")
            index = self.router.choices.index(route["choice"])
            features = torch.from_numpy(await self.embedder.one(question))
            log_prob = recorded_log_prob(route, self.router.choices)
            decision = self.router.recorded(question, features, index, route.get("member", -1), log_prob, group=True)
        except RouterError as e:
            log.warning("tool_router: an attempt's record is not a decision this router made (%s): not learned", e)
            return
        self.observe(decision, reward)

    def update(self, step: int) -> dict[str, dict[str, float]]:
        """One GRPO update on what practice step `step` observed, then the state saved; a step the saved state
        has learned already (its run stopped before the step was recorded) is not learned twice."""
        if self.run_dir is not None and snapshot(self.run_dir, step).exists():  # resumed from that snapshot
            self.router.buffer.clear()
            self.router.save(self.run_dir / STATE_FILE)  # in case the stop came before it was written
            return {}
        with span("route update", CHAIN, step=step, observations=len(self.router.buffer)) as current:
            report = self.router.update()
            set_attributes(current, {f"{m}.{k}": v for m, values in report.items() for k, v in values.items()})
        if self.run_dir is not None:  # the snapshot first: it is what marks the step learned
            self.router.save(snapshot(self.run_dir, step))
            self.router.save(self.run_dir / STATE_FILE)
        return report


def recorded_log_prob(route: dict[str, Any], choices: list[str]) -> float:
    """The chosen choice's log-probability in a record: kept exactly, or (a record from before it was) its
    probability, rounded to 4 places, by name or (older still) by the router's order."""
    if "log_prob" in route:
        value = route["log_prob"]
    else:
        probabilities = route.get("probabilities")
        if isinstance(probabilities, dict):
            probabilities = [probabilities.get(c) for c in choices]
        if not isinstance(probabilities, list) or len(probabilities) != len(choices):
            raise RouterError(f"its probabilities {probabilities!r} are not one per choice")
        probability = probabilities[choices.index(route["choice"])]
        if not (is_number(probability) and 0 <= probability <= 1):
            raise RouterError(f"probability {probability!r}")
        value = math.log(max(probability, 5e-5))  # rounded to 4 places: 0 was below 5e-5, not impossible
    if not is_number(value):
        raise RouterError(f"log-probability {value!r}")
    return float(value)


SNAPSHOT = re.compile(r"tool_router\.step(\d+)\.pt")


def snapshot(run_dir: Path, step: int) -> Path:
    return run_dir / f"tool_router.step{step}.pt"


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
    seen: dict[frozenset[str], str] = {}
    for name, offered in config.choices.items():
        if (same := seen.setdefault(frozenset(offered), name)) != name:
            raise ConfigError(
                f"tool_router.choices: {same} and {name} offer the same tools; the router could not tell them "
                "apart: keep one"
            )
    return dict(config.choices)


async def open_router(
    config: ToolRouterConfig, tools: list[str], *, run_dir: Path | None = None, restart_step: int | None = None
) -> AgentRouter:
    """The router of an agent config. Evaluation (no `run_dir`): `config.state`, frozen. Practice: the run's own
    state if it has one (as it was before `restart_step`, which `--fresh` sets to 0), else `config.state`, else
    a new router; saved in `run_dir` after each step."""
    choices = route_choices(config, tools)
    if config.state and not Path(config.state).is_file():  # before an embeddings server is started for nothing
        raise RouterError(f"tool_router.state: {config.state} is not a file: name a saved router (tool_router.pt)")
    embedder = Embedder.connect(config.embeddings.base_url, config.embeddings.model, config.embeddings.api_key)
    dimension = len(await embedder.one("What is the size of an embedding?"))

    def start() -> Router:
        if config.state:
            return load(Path(config.state), choices, dimension, config)
        if run_dir is None:
            first = next(iter(choices))
            log.warning("tool_router has no state: an untrained router takes %r for every question", first)
        return Router(
            list(choices),
            dimension,
            hidden=config.hidden,
            lr=config.lr,
            clip=config.clip,
            epochs=config.epochs,
            seed=config.seed,
        )

    if run_dir is None:
        return AgentRouter(start(), embedder, choices)
    router = resume(run_dir, restart_step, start, choices, dimension, config)
    return AgentRouter(router, embedder, choices, run_dir)


def resume(
    run_dir: Path,
    restart_step: int | None,
    start: Callable[[], Router],
    choices: dict[str, list[str]],
    dimension: int,
    config: ToolRouterConfig,
) -> Router:
    """Practice's router: the one saved after its last step, or (restarting at step N) after step N-1, with the
    snapshots of steps N and later removed; `start()` when there is none."""
    steps = sorted(int(m.group(1)) for p in run_dir.glob("tool_router.step*.pt") if (m := SNAPSHOT.fullmatch(p.name)))
    if restart_step is not None:
        earlier = [s for s in steps if s < restart_step]
        saved = snapshot(run_dir, earlier[-1]) if earlier else None
    elif steps:  # the last step's snapshot: the state file is written after it, so a stop may leave that older
        saved = snapshot(run_dir, steps[-1])
    else:
        saved = run_dir / STATE_FILE if (run_dir / STATE_FILE).exists() else None
    if saved is None:
        router = start()
    else:
        try:
            router = load(saved, choices, dimension, config)
        except RouterError as e:
            raise RouterError(f"{e}; it is this practice's own: --fresh starts the router afresh") from None
    # Only once the router to go on from is loaded: what was learned after it goes (nothing is lost on an error).
    for step in steps:
        if restart_step is not None and step >= restart_step:
            snapshot(run_dir, step).unlink()
    own = run_dir / STATE_FILE
    if saved is None and not (config.state and own.exists() and Path(config.state).resolve() == own.resolve()):
        own.unlink(missing_ok=True)  # a state the config starts from stays until the first step replaces it
    return router


def load(path: Path, choices: dict[str, list[str]], dimension: int, config: ToolRouterConfig) -> Router:
    """A saved router for these choices and embedding, with the config's lr, clip and epochs (they may change
    between runs; the network's size may not, and the seed only starts a new router)."""
    router = Router.load(path, choices=list(choices), features=dimension)
    trained = router.offers or {}  # files saved before the tools were kept know only the choices' names
    for name, offered in choices.items():
        if name in trained and sorted(trained[name]) != sorted(offered):
            raise RouterError(
                f"{path}: choice {name} offered {trained[name]} when it was trained, the config offers {offered}; "
                "train a router for these (another state file)"
            )
    if router.hidden != config.hidden:
        raise RouterError(f"{path}: saved with hidden={router.hidden}, but the config says hidden={config.hidden}")
    router.retune(lr=config.lr, clip=config.clip, epochs=config.epochs)
    return router
