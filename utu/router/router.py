"""A group of small GRPO policies that choose one of N named choices for a query, and learn from rewards.

    router = Router(["convert_units", "quick_convert", "none"], features=576)
    decision = router.decide(query, features, explore=True)   # sample (practice) or argmax (explore=False)
    router.observe(decision, reward)                           # the verify function's reward of that attempt
    router.update()                                            # one GRPO update over what was observed
    router.save(path); Router.load(path)

The members differ in how they explore (sampling temperature), in their advantage (how much of it is measured
against their batch's mean reward instead of the query's group) and in their entropy bonus, as the design's
`MultiAgentGroupRL` agents do. Exploring, a member drawn at random takes each query, and the attempts at it take
distinct choices (a sample without replacement from that member's tempered policy; past N attempts, a new sample
from the same member): they are the group whose rewards are compared. Frozen, the router takes the choice the
members' averaged probabilities rank first.
"""

import contextlib
import copy
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from utu.errors import UtuError
from utu.names import replacing
from utu.router.policy import FeatureNorm, PolicyNet, group_advantages, grpo_loss

FORMAT = "utu-router/1"
PLANS_KEPT = 4096  # queries whose group of choices is being tried; older ones are forgotten


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for the router's tiny networks: on a 2-core machine busy with an LLM server, its
    thread pool made an update 77 times slower (2.6 s against 0.034 s, measured here). The setting is the
    process's: a process training an LLM beside the router should not update it concurrently."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool)


def feature_like(values: torch.Tensor, size: int) -> bool:
    """A 1-D vector of `size` finite values within ±MAX_FEATURE, as a router's features are."""
    return values.shape == (size,) and bool(torch.isfinite(values).all()) and float(values.abs().max()) <= MAX_FEATURE


class RouterError(UtuError):
    """A router state file that cannot be used, or a router asked for what it cannot do."""


@dataclass(frozen=True)
class Member:
    name: str
    temperature: float = 1.0  # exploration: logits are divided by it before sampling
    advantage_weight: float = 0.0  # share of the advantage taken against the member's batch instead of the group
    entropy_coef: float = 0.01

    def __post_init__(self) -> None:
        if not (0 < self.temperature < math.inf and 0 <= self.advantage_weight <= 1 and 0 <= self.entropy_coef < 1):
            raise RouterError(
                f"member {self.name!r}: temperature {self.temperature}, advantage_weight {self.advantage_weight}, "
                f"entropy_coef {self.entropy_coef}: need temperature > 0, advantage_weight in [0, 1] and "
                "entropy_coef in [0, 1)"
            )


MAX_REWARD = 1e6  # float32 keeps rewards; far beyond this their spread overflows (a verifier's are within [0, 1])
MAX_FEATURE = 1e6  # an embedding's values are a few units; far beyond, centring and scaling overflow float32
MAX_EPOCHS = 1000  # an update's passes over its batch; a file asking for more would stall every update

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
    # Every choice's probability under the deciding policy at temperature 1 (the members' average when frozen);
    # an exploring member sampled from these at its own temperature.
    probabilities: list[float]
    log_prob: float  # log of probabilities[index]: the update's reference ("old") policy for the ratio
    explored: bool
    features: torch.Tensor = field(repr=False)
    choices: tuple[str, ...]  # the router's, in the order of `probabilities`

    def summary(self) -> dict[str, Any]:
        """What an attempt's record and its span keep of the decision."""
        return {
            "choice": self.choice,
            "member": self.member,
            "explored": self.explored,
            "probabilities": {c: round(p, 4) for c, p in zip(self.choices, self.probabilities, strict=True)},
            "log_prob": self.log_prob,  # exact: an attempt read back after a stop is learned from as it was decided
        }


@dataclass
class _Observation:
    query: str
    features: torch.Tensor
    index: int
    member: int
    log_prob: float
    reward: float


@dataclass
class _Plan:
    """The choices still to try for one query's attempts, in the order one member sampled them."""

    member: int
    order: list[int]


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
        if len(choices) < 2 or len(set(choices)) != len(choices) or not all(isinstance(c, str) for c in choices):
            raise RouterError(f"a router needs at least two distinct choices, named by strings, got {choices}")
        if not members:
            raise RouterError("a router needs at least one member")
        if not (is_whole(epochs) and 1 <= epochs <= MAX_EPOCHS) or not 0 < clip < 1 or not lr > 0:
            raise RouterError(
                f"epochs {epochs}, clip {clip}, lr {lr}: need 1 <= epochs <= {MAX_EPOCHS}, 0 < clip < 1 and lr > 0"
            )
        self.choices = list(choices)
        self.features = features
        self.members = tuple(members)
        self.hidden, self.lr, self.clip, self.epochs, self.seed = hidden, lr, clip, epochs, seed
        with torch.random.fork_rng():  # seeded weights, without reseeding the caller's torch
            torch.manual_seed(seed)
            self.nets = [PolicyNet(features, len(choices), hidden) for _ in members]
        self.optimizers = [torch.optim.Adam(net.parameters(), lr=lr) for net in self.nets]
        self.generator = torch.Generator().manual_seed(seed)
        self.norm = FeatureNorm(features)
        self.buffer: list[_Observation] = []
        self.updates = 0
        self.observed = 0
        self._plans: OrderedDict[str, _Plan] = OrderedDict()
        self._lock = threading.Lock()  # decisions, observations and updates arrive from many attempts at once
        self._frozen_fn: Callable[[np.ndarray], np.ndarray] | None = None
        self.offers: dict[str, list[str]] | None = None  # each choice's tools, kept with the state (utu.router.routing)

    # --- deciding --------------------------------------------------------------------------------------------

    def decide(
        self, query: str, features: torch.Tensor, *, explore: bool, member: int | None = None, group: bool = True
    ) -> Decision:
        """The choice for one attempt at `query`. Exploring, attempts at the same query take distinct choices
        (`group`; else each is an independent sample). `member`: that member decides (exploring: instead of one
        drawn at random; frozen: its argmax instead of the members' average)."""
        features = self._checked(features)
        if member is not None and not 0 <= member < len(self.members):
            raise RouterError(f"member {member}: this router has members 0-{len(self.members) - 1}")
        with self._lock, torch.no_grad():
            if not explore and member is None:
                averaged = self._frozen()(features.numpy())
                index = int(averaged.argmax())
                log_prob = math.log(float(averaged[index]))
                probabilities = averaged.tolist()
                choice = self.choices[index]
                return Decision(query, choice, index, -1, probabilities, log_prob, False, features, tuple(self.choices))
            if member is None:  # drawn, not in turns: turns would follow any period in the order queries arrive in
                member = self._plans[query].member if group and query in self._plans else self._draw_member()
            log_probs = torch.log_softmax(self.nets[member](self.norm(features)), -1)
            if not explore:
                index = int(log_probs.argmax())
            elif group:
                index = self._next_in_plan(query, member, log_probs)
            else:
                index = self._sample(member, log_probs)[0]
        probabilities, log_prob, choice = log_probs.exp().tolist(), float(log_probs[index]), self.choices[index]
        return Decision(query, choice, index, member, probabilities, log_prob, explore, features, tuple(self.choices))

    def _draw_member(self) -> int:
        return int(torch.randint(len(self.members), (1,), generator=self.generator))

    def _sample(self, member: int, log_probs: torch.Tensor) -> list[int]:
        """Every choice, in the order of one sample without replacement at the member's temperature (Gumbel
        top-k)."""
        gumbel = -torch.log(-torch.log(torch.rand(len(self.choices), generator=self.generator)))
        return torch.argsort(log_probs / self.members[member].temperature + gumbel, descending=True).tolist()

    def _next_in_plan(self, query: str, member: int, log_probs: torch.Tensor) -> int:
        plan = self._plans.get(query)
        if plan is None or plan.member != member or not plan.order:  # past N attempts: a new sample, same member
            plan = self._plans[query] = _Plan(member, self._sample(member, log_probs))
        self._keep_recent(query)
        return plan.order.pop(0)

    def _keep_recent(self, query: str) -> None:
        self._plans.move_to_end(query)
        while len(self._plans) > PLANS_KEPT:
            self._plans.popitem(last=False)

    def log_prob_of(self, features: torch.Tensor, index: int, member: int) -> float:
        """The member's log-probability of choice `index` for these features, now."""
        with self._lock, torch.no_grad():
            return float(torch.log_softmax(self.nets[member](self.norm(self._checked(features))), -1)[index])

    def recorded(
        self, query: str, features: torch.Tensor, index: int, member: int, log_prob: float, *, group: bool = False
    ) -> Decision:
        """An explored decision made earlier (read back from an attempt's record), so its reward can be observed.
        `group`: it was one of the query's group of distinct choices, so the query's next attempts take others."""
        features = self._checked(features)
        if not (is_whole(index) and 0 <= index < len(self.choices)):
            raise RouterError(f"choice {index!r}: this router has choices 0-{len(self.choices) - 1}")
        if not (is_whole(member) and 0 <= member < len(self.members)):
            raise RouterError(f"member {member!r}: this router has members 0-{len(self.members) - 1}")
        if not (is_number(log_prob) and -math.inf < log_prob <= 0):
            raise RouterError(f"log-probability {log_prob!r}: a router's decisions have a finite one, at most 0")
        if group:
            with self._lock, torch.no_grad():
                plan = self._plans.get(query)
                if plan is None or plan.member != member or index not in plan.order:
                    log_probs = torch.log_softmax(self.nets[member](self.norm(features)), -1)
                    plan = self._plans[query] = _Plan(member, self._sample(member, log_probs))
                plan.order.remove(index)
                self._keep_recent(query)
        probabilities = [math.exp(log_prob) if i == index else float("nan") for i in range(len(self.choices))]
        choice, log_prob = self.choices[index], float(log_prob)
        return Decision(query, choice, index, member, probabilities, log_prob, True, features, tuple(self.choices))

    def _frozen(self) -> Callable[[np.ndarray], np.ndarray]:
        """The members' averaged probabilities as one numpy function of the features, rebuilt after each update:
        a tenth of torch's per-call overhead, so a frozen decision takes microseconds. Called under the lock."""
        if self._frozen_fn is None:
            w1 = np.concatenate([net.hidden.weight.detach().numpy() for net in self.nets])  # (members*hidden, F)
            b1 = np.concatenate([net.hidden.bias.detach().numpy() for net in self.nets])
            w2 = np.stack([net.out.weight.detach().numpy() for net in self.nets])  # (members, choices, hidden)
            b2 = np.stack([net.out.bias.detach().numpy() for net in self.nets])
            members = len(self.nets)
            centre, spread = self.norm.centre_and_spread()
            mean = centre.numpy()

            def probabilities(features: np.ndarray) -> np.ndarray:
                hidden = np.tanh(w1 @ ((features - mean) / spread) + b1).reshape(members, -1)
                logits = np.einsum("mch,mh->mc", w2, hidden) + b2
                exp = np.exp(logits - logits.max(axis=1, keepdims=True))
                return (exp / exp.sum(axis=1, keepdims=True)).mean(axis=0)

            self._frozen_fn = probabilities
        return self._frozen_fn

    def _checked(self, features: torch.Tensor) -> torch.Tensor:
        features = torch.as_tensor(features, dtype=torch.float32).flatten()
        if features.numel() != self.features:
            raise RouterError(f"features of size {features.numel()}, but this router reads {self.features}")
        if not feature_like(features, self.features):
            raise RouterError(
                f"features with NaN, infinite or huge values (beyond ±{MAX_FEATURE:g}): the embedding endpoint sent "
                "a broken vector"
            )
        return features

    # --- learning --------------------------------------------------------------------------------------------

    def observe(self, decision: Decision, reward: float) -> None:
        """Keep an explored decision's reward for the next update; a frozen decision teaches nothing."""
        if not decision.explored:
            return
        if not math.isfinite(reward) or abs(reward) > MAX_REWARD:
            raise RouterError(f"reward {reward!r} for {decision.choice!r}: a reward is a number within ±{MAX_REWARD:g}")
        d = decision
        with self._lock:
            self.buffer.append(_Observation(d.query, d.features, d.index, d.member, d.log_prob, reward))
            self.observed += 1

    def update(self) -> dict[str, dict[str, float]]:
        """One GRPO update of each member on the observations of the queries it explored; empties the buffer and
        ends every group in progress (their choices came from the policy before the update). Returns per member:
        samples, mean reward, surrogate, entropy, clipped fraction."""
        with self._lock, one_thread():
            batch = self.buffer
            before = [(copy.deepcopy(n.state_dict()), copy.deepcopy(o.state_dict())) for n, o in self._pairs()]
            try:
                report = self._update(batch)
                if not self._weights_finite():
                    self.buffer, self._plans = [], OrderedDict()  # they would break every later update the same way
                    raise RouterError(
                        f"an update made the router's weights NaN or infinite: it was undone and its {len(batch)} "
                        "observations dropped"
                    )
            except BaseException:  # all members or none; an interrupted update's observations stay for the next
                for (net, optimizer), (weights, moments) in zip(self._pairs(), before, strict=True):
                    net.load_state_dict(weights)
                    optimizer.load_state_dict(moments)
                raise
            self.buffer, self._plans = [], OrderedDict()
            if report:
                self.updates += 1
                self.norm.learn(torch.stack([o.features for o in batch]))  # after: the ratios start at 1
                self._frozen_fn = None
            return report

    def _check_loaded(self) -> None:
        """What a file may hold that no router would have saved (ValueError): it would decide or learn wrongly."""
        norm = self.norm
        moments = [st for o in self.optimizers for st in o.state_dict()["state"].values()]
        finite = all(bool(torch.isfinite(t).all()) for st in moments for t in st.values())
        if not (self._weights_finite() and finite):
            raise ValueError("NaN or infinite weights")
        if any(bool((st["exp_avg_sq"] < 0).any()) or float(st["step"]) < 0 for st in moments):
            raise ValueError("an optimiser state no update makes (negative squares or steps)")
        if not (0 <= norm.count < math.inf and 0 <= norm.square < math.inf and feature_like(norm.mean, self.features)):
            raise ValueError("a feature mean that no embedding gives (NaN, huge or negative counts)")
        for o in self.buffer:
            whole = is_whole(o.index) and is_whole(o.member)
            if not (whole and 0 <= o.index < len(self.choices) and 0 <= o.member < len(self.members)):
                raise ValueError(f"an observation out of range (choice {o.index!r}, member {o.member!r})")
            if not (abs(o.reward) <= MAX_REWARD and -math.inf < o.log_prob <= 0):
                raise ValueError(f"an observation's reward {o.reward!r} or log-probability {o.log_prob!r}")
            if not feature_like(o.features, self.features):
                raise ValueError("an observation with NaN, infinite, huge or misshapen features")
        if not all(is_whole(n) and n >= 0 for n in (self.updates, self.observed)):
            raise ValueError(f"counts {self.updates!r}, {self.observed!r} are not whole numbers")

    def _weights_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for net in self.nets for p in net.parameters())

    def _pairs(self) -> list[tuple[PolicyNet, torch.optim.Optimizer]]:
        return list(zip(self.nets, self.optimizers, strict=True))

    def _update(self, batch: list[_Observation]) -> dict[str, dict[str, float]]:
        report: dict[str, dict[str, float]] = {}
        for m, (member, net, optimizer) in enumerate(zip(self.members, self.nets, self.optimizers, strict=True)):
            own = [o for o in batch if o.member == m]
            if not own:
                continue
            queries = {q: i for i, q in enumerate(dict.fromkeys(o.query for o in own))}
            features = self.norm(torch.stack([o.features for o in own]))  # as when they were decided
            actions = torch.tensor([o.index for o in own])
            old = torch.tensor([o.log_prob for o in own])
            rewards = torch.tensor([o.reward for o in own])
            advantages = self._advantages(m, features, rewards, torch.tensor([queries[o.query] for o in own]))
            for _ in range(self.epochs):
                terms = grpo_loss(
                    net(features), actions, old, advantages, clip=self.clip, entropy_coef=member.entropy_coef
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
        return report

    def _advantages(self, m: int, features: torch.Tensor, rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """Member m's advantages: each reward against its query's group, mixed with a share against the batch."""
        weight = self.members[m].advantage_weight
        grouped = group_advantages(rewards, groups)
        batch_wide = group_advantages(rewards, torch.zeros(len(rewards)))  # the same scale, against the batch
        return (1 - weight) * grouped + weight * batch_wide

    def retune(self, *, lr: float, clip: float, epochs: int) -> None:
        """The knobs a resumed router may change (the network's shape and the seed it started from may not)."""
        self.lr, self.clip, self.epochs = lr, clip, epochs
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr

    # --- state -----------------------------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return {"hidden": self.hidden, "lr": self.lr, "clip": self.clip, "epochs": self.epochs, "seed": self.seed}

    def save(self, path: str | Path) -> None:
        """Weights, optimisers, exploration's random state and observations not yet learned from, written whole or
        not at all."""
        path = Path(path)
        if path.is_dir():
            raise RouterError(f"{path} is a folder; give the router's state a file name, e.g. {path / 'router.pt'}")
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise RouterError(f"{path} is not a regular file: the router's state replaces only a file it wrote")
        with self._lock:
            state = {
                "format": FORMAT,
                "choices": self.choices,
                "features": self.features,
                "members": [asdict(m) for m in self.members],
                "settings": self.settings,
                "nets": [copy.deepcopy(net.state_dict()) for net in self.nets],  # not the live tensors
                "optimizers": [copy.deepcopy(o.state_dict()) for o in self.optimizers],
                "buffer": [asdict(o) for o in self.buffer],
                "norm": self.norm.state(),
                "generator": self.generator.get_state(),  # a resumed router explores as the uninterrupted one
                "offers": self.offers,
                "updates": self.updates,
                "observed": self.observed,
            }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path, binary=True) as out:
                torch.save(state, out)
        except OSError as e:
            raise RouterError(f"cannot save the router to {path}: {e.strerror or e}") from None

    @classmethod
    def load(cls, path: str | Path, *, choices: list[str] | None = None, features: int | None = None) -> "Router":
        """A saved router; `choices` (in any order: a choice is known by its name) and `features`, when given,
        must be what it was saved with (else RouterError)."""
        path = Path(path)
        if not path.is_file():
            raise RouterError(f"{path}: no router state there" + (" (it is a folder)" if path.is_dir() else ""))
        try:
            try:
                state = torch.load(path, weights_only=True)
            except Exception:  # noqa: BLE001 - torch's own words here are about pickling options, not the file
                raise ValueError("unreadable: not a file a router saved, or cut short") from None
            if not isinstance(state, dict) or state.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            shapes = {tuple(weights["hidden.weight"].shape) for weights in state["nets"]}
            if shapes != {(state["settings"]["hidden"], state["features"])}:  # before networks of that size are made
                raise ValueError(f"weights of shapes {sorted(shapes)} for its settings")
            if len(state["members"]) != len(state["nets"]):
                raise ValueError(f"{len(state['members'])} members with {len(state['nets'])} networks")
            offers = state.get("offers")
            if offers is not None and not (
                isinstance(offers, dict)
                and all(isinstance(t, list) and all(isinstance(x, str) for x in t) for t in offers.values())
            ):
                raise ValueError("its choices' tools are not lists of tool names")
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
            router.norm.load(state["norm"])
            if "generator" in state:  # files saved before it was kept explore from the seed's start
                router.generator.set_state(state["generator"])
            router.buffer = [_Observation(**o) for o in state["buffer"]]
            router.offers = offers
            router.updates, router.observed = state["updates"], state["observed"]
            router._check_loaded()
        except Exception as e:  # noqa: BLE001 - any way a file can be broken is the same error to the user
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise RouterError(f"{path}: not a usable router state ({reason})") from None
        if choices is not None and sorted(choices) != sorted(router.choices):
            raise RouterError(
                f"{path}: saved for choices {router.choices}, but the config names {list(choices)}; "
                "a router learns its choices: train one for these (another state file)"
            )
        if features is not None and features != router.features:
            raise RouterError(
                f"{path}: saved for features of size {router.features}, but the embedding gives {features}; "
                "use the embedding model it was trained with, or another state file"
            )
        return router
