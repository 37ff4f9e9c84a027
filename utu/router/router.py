"""A group of small GRPO policies that choose one of N named choices for a query, and learn from rewards.

    router = Router(["convert_units", "quick_convert", "none"], features=576)
    decision = router.decide(query, features, explore=True)   # sample (practice) or argmax (explore=False)
    router.observe(decision, reward)                           # the verify function's reward of that attempt
    router.update()                                            # one GRPO update over what was observed
    router.save(path); Router.load(path)

The members differ in how they explore (sampling temperature), in their advantage (how much of it is measured
against their own mean reward instead of the query's group) and in their entropy bonus, as the design's
`MultiAgentGroupRL` agents do. Exploring, a member drawn at random takes each query, and the attempts at one query take
distinct choices (sampled without replacement from the member's policy): they are the group whose rewards are
compared. Frozen, the router takes the choice the members' averaged probabilities rank first.
"""

import contextlib
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from utu.errors import UtuError
from utu.router.policy import PolicyNet, group_advantages, grpo_loss

FORMAT = "utu-router/1"
PLANS_KEPT = 4096  # queries whose group of choices is being tried; older ones are forgotten


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for the router's tiny networks: on a 2-core machine busy with an LLM server, its
    thread pool made an update 77 times slower (2.6 s against 0.034 s, measured here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class RouterError(UtuError):
    """A router state file that cannot be used, or a router asked for what it cannot do."""


@dataclass(frozen=True)
class Member:
    name: str
    temperature: float = 1.0  # exploration: logits are divided by it before sampling
    advantage_weight: float = 0.0  # share of the advantage taken against the member's mean reward of the batch
    entropy_coef: float = 0.01


# As the design's agents: one steady, one that explores more and weighs its own baseline less, one the reverse.
DEFAULT_MEMBERS = (
    Member("steady", temperature=1.0, advantage_weight=0.5, entropy_coef=0.01),
    Member("curious", temperature=1.5, advantage_weight=0.3, entropy_coef=0.02),
    Member("focused", temperature=0.7, advantage_weight=0.7, entropy_coef=0.01),
)


@dataclass
class Decision:
    query: str
    choice: str
    index: int
    member: int  # who chose; -1: the members together (frozen)
    probabilities: list[float]  # of every choice, under the policy that decided
    log_prob: float  # of this choice under the member's policy when it decided (the update's old policy)
    explored: bool
    features: torch.Tensor = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """What an attempt's record and its span keep of the decision."""
        return {
            "choice": self.choice,
            "member": self.member,
            "explored": self.explored,
            "probabilities": [round(p, 4) for p in self.probabilities],
        }


@dataclass
class _Observation:
    query: str
    features: torch.Tensor
    index: int
    member: int
    log_prob: float
    reward: float


class Router:
    def __init__(
        self,
        choices: list[str],
        features: int,
        *,
        members: tuple[Member, ...] = DEFAULT_MEMBERS,
        hidden: int = 64,
        lr: float = 0.01,
        clip: float = 0.2,
        epochs: int = 8,
        seed: int = 0,
    ):
        if len(choices) < 2 or len(set(choices)) != len(choices):
            raise RouterError(f"a router needs at least two distinct choices, got {choices}")
        if not members:
            raise RouterError("a router needs at least one member")
        self.choices = list(choices)
        self.features = features
        self.members = tuple(members)
        self.hidden, self.lr, self.clip, self.epochs, self.seed = hidden, lr, clip, epochs, seed
        torch.manual_seed(seed)
        self.nets = [PolicyNet(features, len(choices), hidden) for _ in members]
        self.optimizers = [torch.optim.Adam(net.parameters(), lr=lr) for net in self.nets]
        self.generator = torch.Generator().manual_seed(seed)
        self.buffer: list[_Observation] = []
        # Embeddings of a decoder's mean pool all point one way (cosine 0.8-0.9 between unrelated queries here):
        # centred on the mean of the queries seen and scaled to unit spread, they tell queries apart.
        self.norm = {"count": torch.zeros(()), "mean": torch.zeros(features), "square": torch.zeros(())}
        self.updates = 0
        self.observed = 0
        self._plans: OrderedDict[str, tuple[int, list[int], torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()  # decisions and observations arrive from many attempts at once
        self._frozen_fn: Callable[[np.ndarray], np.ndarray] | None = None

    # --- deciding --------------------------------------------------------------------------------------------

    def decide(self, query: str, features: torch.Tensor, *, explore: bool, member: int | None = None) -> Decision:
        """The choice for one attempt at `query`. Exploring, attempts at the same query take distinct choices
        (each group of attempts is one member's sample without replacement) until all were tried. `member`:
        that member decides (exploring: instead of one drawn at random; frozen: its argmax, not the average)."""
        features = self._checked(features)
        if member is not None and not 0 <= member < len(self.members):
            raise RouterError(f"member {member}: this router has members 0-{len(self.members) - 1}")
        if not explore and member is not None:
            with torch.no_grad():
                log_probs = torch.log_softmax(self.nets[member](self._normalised(features)), -1)
            index = int(log_probs.argmax())
            probabilities = log_probs.exp().tolist()
            return Decision(
                query, self.choices[index], index, member, probabilities, float(log_probs[index]), False, features
            )
        if not explore:
            probs = self._frozen()(features.numpy())  # normalised inside
            index = int(probs.argmax())
            log_prob = math.log(float(probs[index]))
            return Decision(query, self.choices[index], index, -1, probs.tolist(), log_prob, False, features)
        with self._lock, torch.no_grad():
            member, order, log_probs = self._plan(query, self._normalised(features), member)
            index = order.pop(0)
            if not order:
                del self._plans[query]
            probabilities = log_probs.exp().tolist()
            return Decision(
                query, self.choices[index], index, member, probabilities, float(log_probs[index]), True, features
            )

    def decision_of(self, query: str, features: torch.Tensor, index: int, member: int) -> Decision:
        """A choice made elsewhere (the design's `observe(agent_id, observation, action, ...)`), as the member's
        explored decision, so its reward can be observed."""
        features = self._checked(features)
        with torch.no_grad():
            log_probs = torch.log_softmax(self.nets[member](self._normalised(features)), -1)
        probabilities = log_probs.exp().tolist()
        return Decision(
            query, self.choices[index], index, member, probabilities, float(log_probs[index]), True, features
        )

    def _centre_and_spread(self) -> tuple[torch.Tensor, float]:
        if self.norm["count"] < 2:  # nothing learned yet: features as they come
            return torch.zeros(self.features), 1.0
        return self.norm["mean"], float((self.norm["square"] / self.norm["count"]).sqrt()) + 1e-6

    def _normalised(self, features: torch.Tensor) -> torch.Tensor:
        centre, spread = self._centre_and_spread()
        return (features - centre) / spread

    def _learn_norm(self, features: torch.Tensor) -> None:
        """Fold a batch into the running mean and mean squared distance from it (Chan et al.'s merge)."""
        count, mean, square = self.norm["count"], self.norm["mean"], self.norm["square"]
        n, batch_mean = len(features), features.mean(0)
        delta = batch_mean - mean
        total = count + n
        self.norm["mean"] = mean + delta * n / total
        batch_square = ((features - batch_mean) ** 2).sum(1).mean() * n
        self.norm["square"] = square + batch_square + (delta**2).sum() * count * n / total
        self.norm["count"] = total

    def _frozen(self) -> Callable[[np.ndarray], np.ndarray]:
        """The members' averaged probabilities as one numpy function of the features, rebuilt after each update:
        a tenth of torch's per-call overhead, so a frozen decision takes microseconds."""
        if self._frozen_fn is None:
            with torch.no_grad():
                w1 = np.concatenate([net.hidden.weight.numpy() for net in self.nets])  # (members*hidden, F)
                b1 = np.concatenate([net.hidden.bias.numpy() for net in self.nets])
                w2 = np.stack([net.out.weight.numpy() for net in self.nets])  # (members, choices, hidden)
                b2 = np.stack([net.out.bias.numpy() for net in self.nets])
            members = len(self.nets)
            centre, spread = self._centre_and_spread()
            mean = centre.numpy()

            def probabilities(features: np.ndarray) -> np.ndarray:
                hidden = np.tanh(w1 @ ((features - mean) / spread) + b1).reshape(members, -1)
                logits = np.einsum("mch,mh->mc", w2, hidden) + b2
                exp = np.exp(logits - logits.max(axis=1, keepdims=True))
                return (exp / exp.sum(axis=1, keepdims=True)).mean(axis=0)

            self._frozen_fn = probabilities
        return self._frozen_fn

    def _plan(self, query: str, features: torch.Tensor, member: int | None) -> tuple[int, list[int], torch.Tensor]:
        if query in self._plans and member in (None, self._plans[query][0]):
            self._plans.move_to_end(query)
            return self._plans[query]
        if member is None:  # drawn, not in turns: turns would follow any period in the order queries arrive in
            member = int(torch.randint(len(self.members), (1,), generator=self.generator))
        log_probs = torch.log_softmax(self.nets[member](features), -1)
        # Gumbel top-k: a sample without replacement of every choice, in order, at the member's temperature.
        gumbel = -torch.log(-torch.log(torch.rand(len(self.choices), generator=self.generator)))
        order = torch.argsort(log_probs / self.members[member].temperature + gumbel, descending=True).tolist()
        self._plans[query] = (member, order, log_probs)
        while len(self._plans) > PLANS_KEPT:
            self._plans.popitem(last=False)
        return self._plans[query]

    def _checked(self, features: torch.Tensor) -> torch.Tensor:
        features = torch.as_tensor(features, dtype=torch.float32).flatten()
        if features.numel() != self.features:
            raise RouterError(f"features of size {features.numel()}, but this router reads {self.features}")
        return features

    # --- learning --------------------------------------------------------------------------------------------

    def observe(self, decision: Decision, reward: float) -> None:
        """Keep an explored decision's reward for the next update; a frozen decision teaches nothing."""
        if not decision.explored:
            return
        if not math.isfinite(reward):
            raise RouterError(f"reward {reward!r} for {decision.choice!r} is not a finite number")
        with self._lock:
            self.buffer.append(
                _Observation(
                    decision.query, decision.features, decision.index, decision.member, decision.log_prob, reward
                )
            )
            self.observed += 1

    def update(self) -> dict[str, dict[str, float]]:
        """One GRPO update of each member on the observations of the queries it explored; empties the buffer.
        Returns per member: samples, mean reward, surrogate, entropy, clipped fraction."""
        with one_thread():
            return self._update()

    def _update(self) -> dict[str, dict[str, float]]:
        with self._lock:
            batch, self.buffer = self.buffer, []
        if batch:
            self._learn_norm(torch.stack([o.features for o in batch]))
        report: dict[str, dict[str, float]] = {}
        for m, (member, net, optimizer) in enumerate(zip(self.members, self.nets, self.optimizers, strict=True)):
            own = [o for o in batch if o.member == m]
            if not own:
                continue
            queries = {q: i for i, q in enumerate(dict.fromkeys(o.query for o in own))}
            features = self._normalised(torch.stack([o.features for o in own]))
            actions = torch.tensor([o.index for o in own])
            old = torch.tensor([o.log_prob for o in own])
            rewards = torch.tensor([o.reward for o in own])
            grouped = group_advantages(rewards, torch.tensor([queries[o.query] for o in own]))
            advantages = (1 - member.advantage_weight) * grouped + member.advantage_weight * (rewards - rewards.mean())
            for _ in range(self.epochs):
                terms = grpo_loss(
                    net(features),
                    actions,
                    old,
                    advantages,
                    clip=self.clip,
                    entropy_coef=member.entropy_coef,
                )
                optimizer.zero_grad()
                terms.loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
            report[member.name] = {
                "samples": len(own),
                "mean_reward": float(rewards.mean()),
                "surrogate": terms.surrogate,
                "entropy": terms.entropy,
                "clipped": terms.clipped,
            }
        if report:
            self.updates += 1
            self._frozen_fn = None
        return report

    # --- state -----------------------------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return {"hidden": self.hidden, "lr": self.lr, "clip": self.clip, "epochs": self.epochs, "seed": self.seed}

    def save(self, path: str | Path) -> None:
        """Weights, optimisers and observations not yet learned from, written whole or not at all."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            state = {
                "format": FORMAT,
                "choices": self.choices,
                "features": self.features,
                "members": [asdict(m) for m in self.members],
                "settings": self.settings,
                "nets": [net.state_dict() for net in self.nets],
                "optimizers": [o.state_dict() for o in self.optimizers],
                "buffer": [asdict(o) for o in self.buffer],
                "norm": self.norm,
                "updates": self.updates,
                "observed": self.observed,
            }
        partial = path.with_name(path.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, path)

    @classmethod
    def load(cls, path: str | Path, *, choices: list[str] | None = None, features: int | None = None) -> "Router":
        """A saved router; `choices`/`features`, when given, must be what it was saved with (else RouterError)."""
        path = Path(path)
        try:
            state = torch.load(path, weights_only=True)
            if not isinstance(state, dict) or state.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            router = cls(
                state["choices"],
                state["features"],
                members=tuple(Member(**m) for m in state["members"]),
                **state["settings"],
            )
            for net, weights in zip(router.nets, state["nets"], strict=True):
                net.load_state_dict(weights)
            for optimizer, saved in zip(router.optimizers, state["optimizers"], strict=True):
                optimizer.load_state_dict(saved)
            router.norm = {key: torch.as_tensor(state["norm"][key]) for key in ("count", "mean", "square")}
            router._frozen_fn = None
            router.buffer = [_Observation(**o) for o in state["buffer"]]
            router.updates, router.observed = state["updates"], state["observed"]
        except FileNotFoundError:
            raise RouterError(f"{path}: no router state there") from None
        except RouterError:
            raise
        except Exception as e:  # noqa: BLE001 - any way a file can be broken is the same error to the user
            raise RouterError(
                f"{path}: not a usable router state ({type(e).__name__}: {str(e)[:200]}); "
                "delete it to start the router afresh"
            ) from None
        if choices is not None and list(choices) != router.choices:
            raise RouterError(
                f"{path}: saved for choices {router.choices}, but the config names {list(choices)}; "
                "use another state file (or delete it) when the choices change"
            )
        if features is not None and features != router.features:
            raise RouterError(
                f"{path}: saved for features of size {router.features}, but the embedding gives {features}; "
                "use the embedding model it was trained with, or another state file"
            )
        return router
