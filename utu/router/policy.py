"""The router's policy and its GRPO update: a small network from a query's features to logits over the choices.

The update is GRPO's, on one-step episodes: the choices tried for the same query form a group, each choice's
advantage is its reward against the group's mean (scaled by the group's spread), and the loss is PPO's clipped
surrogate with an entropy bonus. No value network: the group's mean is the baseline, which is GRPO's point.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn


class PolicyNet(nn.Module):
    """features -> logits: one hidden layer is enough to tell kinds of queries apart in an embedding."""

    def __init__(self, features: int, choices: int, hidden: int = 64):
        super().__init__()
        self.hidden = nn.Linear(features, hidden)
        self.out = nn.Linear(hidden, choices)
        nn.init.zeros_(self.out.weight)  # a new router starts uniform over its choices
        nn.init.zeros_(self.out.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(features)))


class FeatureNorm:
    """Features centred on the running mean of the queries learned from, and scaled so that their distance from
    it is 1 on average (root mean square): a decoder's mean-pooled embeddings all point one way (cosine 0.8-0.9
    between unrelated questions here), and centred they tell questions apart. Until two queries were learned
    from, features pass as they are."""

    def __init__(self, features: int):
        self.count, self.mean, self.square = 0.0, torch.zeros(features), 0.0  # square: summed squared distances

    def centre_and_spread(self) -> tuple[torch.Tensor, float]:
        if self.count < 2:
            return torch.zeros_like(self.mean), 1.0
        return self.mean, math.sqrt(self.square / self.count) + 1e-6

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        centre, spread = self.centre_and_spread()
        return (features - centre) / spread

    def learn(self, batch: torch.Tensor) -> None:
        """Fold a batch in (Chan et al.'s merge of means and squared distances), in float64: a float32 square
        overflows from features of about 1e19 (any finite float32 feature's square fits a float64)."""
        batch = batch.double()
        n, batch_mean = len(batch), batch.mean(0)
        delta, total = batch_mean - self.mean.double(), self.count + n
        batch_square = float(((batch - batch_mean) ** 2).sum())
        self.square += batch_square + float((delta**2).sum()) * self.count * n / total
        self.mean = (self.mean.double() + delta * n / total).float()
        self.count = total

    def state(self) -> dict:
        return {"count": self.count, "mean": self.mean, "square": self.square}

    def load(self, state: dict) -> None:
        mean = torch.as_tensor(state["mean"], dtype=torch.float32)
        if mean.shape != self.mean.shape:
            raise ValueError(f"its feature mean has {mean.numel()} values, not {self.mean.numel()}")
        self.count, self.mean, self.square = float(state["count"]), mean, float(state["square"])


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Each reward against its group's mean, over the group's standard deviation (population); 0 in a group
    whose rewards are all equal (it says nothing about which choice is better)."""
    advantages = torch.zeros_like(rewards)
    for group in groups.unique():
        members = groups == group
        r = rewards[members]
        advantages[members] = (r - r.mean()) / (r.std(unbiased=False) + eps)
    return advantages


@dataclass
class LossTerms:
    loss: torch.Tensor
    surrogate: float  # mean clipped surrogate (to maximise)
    entropy: float  # mean entropy of the policy over the batch
    clipped: float  # fraction of samples whose ratio was clipped against their advantage


def grpo_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip: float = 0.2,
    entropy_coef: float = 0.01,
) -> LossTerms:
    """-(mean of min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)) - entropy_coef * mean entropy."""
    log_probs = torch.log_softmax(logits, dim=-1)
    taken = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1)
    ratio = torch.exp(torch.clamp(taken - old_log_probs, -20.0, 20.0))  # finite whatever the old policy said
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    entropy = -(log_probs.exp() * log_probs).sum(dim=-1)
    loss = -surrogate.mean() - entropy_coef * entropy.mean()
    return LossTerms(
        loss=loss,
        surrogate=float(surrogate.mean().detach()),
        entropy=float(entropy.mean().detach()),
        clipped=float((clipped < unclipped).float().mean()),
    )
