"""The design's names for the router (../reference: `MultiAgentGroupRL`, `ToolSelectionGRPO`), over `Router`.

    selector = ToolSelectionGRPO(["convert_units", "calculator", "none"])   # embedded-model features
    tool = selector.select_tool("Convert 3 miles to km")
    selector.observe_result(selector.current_agent_id, reward)            # the verify function's reward
    selector.update(); selector.save(); selector.load()

Where they differ from the sketch, on purpose: features are a real embedding (never random); the reward is the
number you pass (or what your `context_evaluator(result, context)` returns), not a quality delta; agents are
drawn at random per query instead of taking turns; updates are GRPO's over the choices tried for the same query.
"""

import functools
import random
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openai
import torch

from utu.errors import LLMError
from utu.router.embeddings import checked_vector, embedded_text, endpoint
from utu.router.router import DEFAULT_MEMBERS, Decision, Member, Router, RouterError

FeatureExtractor = Callable[[Any], Sequence[float]]


def embedding_features(base_url: str | None = None, model: str | None = None, api_key: str | None = None):
    """A cached, synchronous text -> embedding function: the endpoint given, else the embedded model's."""
    base_url, model = endpoint(base_url, model, "embedding_features: a base_url needs its model's name (model=...)")
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", max_retries=3)

    @functools.lru_cache(maxsize=20_000)
    def embed(text: str) -> np.ndarray:
        try:
            reply = client.embeddings.create(model=model, input=[embedded_text(text)])
        except openai.OpenAIError as e:
            raise LLMError(f"embeddings from {base_url} ({model}) failed: {e}") from e
        if len(reply.data) != 1:
            raise LLMError(f"embeddings: asked for 1, the endpoint gave {len(reply.data)}")
        return checked_vector(reply.data[0].embedding, base_url)

    return embed


class MultiAgentGroupRL:
    """Several GRPO policies by id over one action space: `select_action`, `observe`, `update_all_agents`."""

    def __init__(
        self,
        agent_configs: Sequence[dict[str, Any]],
        feature_extractor: FeatureExtractor,
        reward_function: Callable[..., float] | None = None,  # the design's; `observe` takes the reward itself
        update_interval: int = 1000,
        training_epochs: int = 10,
        batch_size: int = 64,  # accepted for the design's signature: an update takes every observation
        save_dir: str | Path = "runs/router",
        device: str = "cpu",  # the policies are small enough that the CPU is the right place
        *,
        action_names: Sequence[str] | None = None,
    ):
        if not agent_configs:
            raise RouterError("agent_configs: give at least one agent ({'agent_id': ..., 'action_dim': N})")
        dims = {int(c["action_dim"]) for c in agent_configs if "action_dim" in c}
        if action_names is None and len(dims) != 1:
            raise RouterError("agent_configs: every agent needs the same action_dim (or pass action_names)")
        self.action_names = list(action_names) if action_names else [str(i) for i in range(dims.pop())]
        self.agent_ids = [str(c.get("agent_id", i)) for i, c in enumerate(agent_configs)]
        if len(set(self.agent_ids)) != len(self.agent_ids):
            raise RouterError(f"agent_configs: every agent_id must be distinct, got {self.agent_ids}")
        members = tuple(
            Member(
                self.agent_ids[i],
                temperature=float(c.get("temperature", 1.0)),
                advantage_weight=float(c.get("relative_advantage_weight", 0.5)),
                entropy_coef=float(c.get("entropy_coef", 0.01)),
            )
            for i, c in enumerate(agent_configs)
        )
        self.feature_extractor = feature_extractor
        self.reward_function = reward_function
        self.update_interval = update_interval
        self.save_dir = Path(save_dir)
        self.training_epochs = training_epochs
        self._members = members
        self.router: Router | None = None  # made on the first observation: its size is the features'

    def _router(self, features: torch.Tensor) -> Router:
        if self.router is None:
            self.router = Router(
                self.action_names, features.numel(), members=self._members, epochs=self.training_epochs
            )
        return self.router

    def _member(self, agent_id: Any) -> int:
        if str(agent_id) not in self.agent_ids:
            raise RouterError(f"agent {agent_id!r}: the agents are {self.agent_ids}")
        return self.agent_ids.index(str(agent_id))

    def _features(self, observation: Any) -> tuple[str, torch.Tensor]:
        features = torch.as_tensor(np.asarray(self.feature_extractor(observation), dtype=np.float32))
        return str(observation), features

    def select_action(self, agent_id: Any, observation: Any, deterministic: bool = False) -> tuple[int, float]:
        """(action index, its log-probability) from that agent's policy."""
        index, log_prob, _ = self._decide(agent_id, observation, deterministic)
        return index, log_prob

    def _decide(self, agent_id: Any, observation: Any, deterministic: bool) -> tuple[int, float, Decision]:
        query, features = self._features(observation)
        decision = self._router(features).decide(
            query, features, explore=not deterministic, member=self._member(agent_id), group=False
        )
        return decision.index, decision.log_prob, decision

    def observe(
        self,
        agent_id: Any,
        observation: Any,
        action: int,
        reward: float,
        next_observation: Any = None,
        done: bool = True,
    ) -> dict[str, dict[str, float]] | None:
        """Keep one (observation, action, reward); every `update_interval` observations, an update."""
        self._keep(agent_id, observation, action, reward)
        return self._update_when_due()

    def _keep(self, agent_id: Any, observation: Any, action: int, reward: float) -> None:
        whole = isinstance(action, int | np.integer) and not isinstance(action, bool)
        if not (whole and 0 <= action < len(self.action_names)):
            raise RouterError(f"action {action!r}: the actions are 0-{len(self.action_names) - 1}")
        query, features = self._features(observation)
        router = self._router(features)
        member = self._member(agent_id)
        log_prob = router.log_prob_of(features, action, member)
        router.observe(router.recorded(query, features, int(action), member, log_prob), float(reward))

    def _update_when_due(self) -> dict[str, dict[str, float]] | None:
        if self.router is not None and len(self.router.buffer) >= self.update_interval:
            return self.update_all_agents()
        return None

    def update_all_agents(self) -> dict[str, dict[str, float]]:
        return self.router.update() if self.router else {}

    def _path(self, suffix: str) -> Path:
        return self.save_dir / f"router{suffix}.pt"

    def save_agents(self, suffix: str = "") -> Path:
        """The router to `save_dir/router<suffix>.pt`, replacing only a router state saved there before."""
        if self.router is None:
            raise RouterError("nothing to save: no agent has observed anything yet")
        path = self._path(suffix)
        if path.exists():
            Router.load(path)  # a RouterError if the file there is not a router's: it is kept
        self.router.save(path)
        return path

    def load_agents(self, suffix: str = "") -> None:
        path = self._path(suffix)
        router = Router.load(path, choices=self.action_names)
        if router.choices != self.action_names:  # an action is its index here: the same order or none
            raise RouterError(f"{path}: saved for actions {router.choices} in order; these are {self.action_names}")
        saved = [m.name for m in router.members]
        if saved != self.agent_ids:
            raise RouterError(f"{path}: saved for agents {saved}, but these are {self.agent_ids}")
        self.router = router


class ToolSelectionGRPO:
    """The design's tool selector: `select_tool(user_query, context)`, `observe_result(agent_id, result, ...)`."""

    def __init__(
        self,
        tool_registry: Sequence[str] | dict[str, Any],
        context_evaluator: Callable[[Any, Any], float] | None = None,
        state_dim: int | None = None,  # the embedding's size, read from the first query; given, it is checked
        num_agents: int = 3,
        update_interval: int = 100,
        device: str = "cpu",
        *,
        feature_extractor: Callable[[str], Sequence[float]] | None = None,
        save_dir: str | Path = "runs/router",
    ):
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise RouterError(f"num_agents {num_agents!r}: a selector needs at least one agent")
        self.tools = list(tool_registry)
        self.context_evaluator = context_evaluator
        self.state_dim = state_dim
        members = [asdict_member(m) for m in (DEFAULT_MEMBERS * num_agents)[:num_agents]]
        for i, m in enumerate(members):
            m["agent_id"] = f"{m['agent_id']}_{i}" if num_agents > len(DEFAULT_MEMBERS) else m["agent_id"]
        self.group = MultiAgentGroupRL(
            members,
            self._checked(feature_extractor or embedding_features()),
            update_interval=update_interval,
            save_dir=save_dir,
            action_names=self.tools,
        )
        self.current_agent_id: str | None = None
        self._pending: dict[str, deque[tuple[str, int]]] = {}  # per agent, its choices awaiting results in order
        self._draw = random.Random(0)  # which agent decides: its own generator, not torch's global one

    def _checked(self, extract: Callable[[str], Sequence[float]]) -> FeatureExtractor:
        def features(query: Any) -> Sequence[float]:
            vector = extract(str(query))
            if self.state_dim is not None and len(vector) != self.state_dim:
                raise RouterError(f"state_dim {self.state_dim}, but the features have {len(vector)} values")
            return vector

        return features

    def select_tool(self, user_query: str, context: Any = None, visualizer: Any = None) -> str:
        """The tool for this query, from an agent drawn at random (exploring); `visualizer(agent_id, probs)`."""
        agent_id = self._draw.choice(self.group.agent_ids)
        index, _, decision = self.group._decide(agent_id, user_query, deterministic=False)
        if visualizer is not None:
            visualizer(agent_id, dict(zip(self.tools, decision.probabilities, strict=True)))
        self.current_agent_id = agent_id
        self._pending.setdefault(agent_id, deque()).append((user_query, index))
        return self.tools[index]

    def observe_result(self, agent_id: str, result: Any, context: Any = None, done: bool = True) -> None:
        """The reward of that agent's oldest tool choice still waiting for its result (results come back in the
        order the choices were made): `result` itself, or `context_evaluator(result, context)`."""
        if not self._pending.get(agent_id):
            raise RouterError(f"agent {agent_id!r} has no tool choice waiting for its result")
        query, index = self._pending[agent_id][0]
        reward = self.context_evaluator(result, context) if self.context_evaluator else float(result)
        self.group._keep(agent_id, query, index, reward)
        self._pending[agent_id].popleft()  # only once kept: a failed evaluation leaves it waiting, a kept one not
        self.group._update_when_due()

    def update(self) -> dict[str, dict[str, float]]:
        return self.group.update_all_agents()

    def save(self, suffix: str = "") -> Path:
        return self.group.save_agents(suffix)

    def load(self, suffix: str = "") -> None:
        self.group.load_agents(suffix)


def asdict_member(member: Member) -> dict[str, Any]:
    return {
        "agent_id": member.name,
        "temperature": member.temperature,
        "relative_advantage_weight": member.advantage_weight,
        "entropy_coef": member.entropy_coef,
    }
