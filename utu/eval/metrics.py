"""Metrics over judged attempts: Mean@K, Pass@K, unbiased pass@k, per level, bootstrap confidence intervals.

Mean@K (the paper's metric) is the mean over questions of the mean reward of their K attempts.
Pass@K is the share of questions with at least one correct attempt. For k < K, pass@k is the unbiased
estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021), averaged over questions. Confidence intervals
resample questions (not attempts), because questions are the unit that varies between benchmarks.
"""

import random
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import comb
from typing import Any

from pydantic import BaseModel

from utu.eval.outcome import empty_reply

BOOTSTRAP_SAMPLES = 2000


@dataclass
class ScoredAttempt:
    """What metrics need from an `evaluation_data` row."""

    question: tuple[str, int]  # (dataset, dataset_index)
    stage: str
    reward: float | None = None
    correct: bool | None = None
    level: str | None = None
    tokens: int | None = None
    cost: float | None = None
    tool_calls: int | None = None
    time_cost: float | None = None
    verify_error: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)  # the agent's tool log (utu.agents.AgentResult)
    cut: bool = False  # its final reply was cut by the token limit (stop reason max_tokens)
    route: str | None = None  # the router's choice for it, when the agent has a router
    empty: bool = False  # judged, and its final reply was empty (which a verifier scores, usually as wrong)

    @classmethod
    def from_row(cls, row: Any) -> "ScoredAttempt":
        return cls(
            question=(row.dataset, row.dataset_index),
            stage=row.stage,
            reward=row.reward,
            correct=row.correct,
            level=row.level,
            tokens=row.tokens,
            cost=row.cost,
            tool_calls=row.tool_calls,
            time_cost=row.time_cost,
            verify_error=row.stage == "judged" and row.error is not None,
            tools=(row.meta or {}).get("tools") or [],
            cut=(row.meta or {}).get("stop_reason") == "max_tokens",
            route=((row.meta or {}).get("route") or {}).get("choice"),
            empty=row.stage == "judged" and empty_reply(row),
        )


def judged_reward(attempt: Any) -> float:
    """A judged attempt's reward (a ScoredAttempt or an `evaluation_data` row): judging always sets one."""
    reward: float | None = attempt.reward
    assert reward is not None, "a judged attempt without a reward"
    return reward


def has_contrast(rewards: Iterable[float | None]) -> bool:
    """Whether a question's judged attempts differ in reward: a group the learner can compare."""
    return len(set(rewards)) > 1


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k attempts drawn from n (c correct) is correct."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def bootstrap_ci(values: list[float], seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float]:
    """95% percentile interval of the mean, resampling `values` with replacement."""
    if len(values) < 2:
        v = values[0] if values else 0.0
        return v, v
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(values[rng.randrange(n)] for _ in range(n)) for _ in range(samples))
    return means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def k_values(k: int) -> list[int]:
    """1, 2, 4, ... up to K, and K itself."""
    out, x = [], 1
    while x < k:
        out.append(x)
        x *= 2
    return [*out, k]


def mean_and_pass(groups: Iterable[list[ScoredAttempt]]) -> tuple[list[float], float]:
    """Per-question mean rewards and the share of questions with a correct attempt, over judged attempts."""
    judged = [[a for a in g if a.stage == "judged"] for g in groups]
    judged = [g for g in judged if g]
    means = [statistics.fmean(judged_reward(a) for a in g) for g in judged]
    return means, statistics.fmean(any(a.correct for a in g) for g in judged) if judged else 0.0


class ToolStats(BaseModel):
    """One tool's calls, and how the attempts that called it fared against those that did not."""

    calls: int
    errors: int  # calls whose result was an error (the tool's failure, a timeout, bad arguments)
    mean_seconds: float
    max_seconds: float
    attempts_using: int  # judged attempts that called it at least once
    reward_using: float | None  # their mean reward
    reward_not_using: float | None  # the mean reward of the other judged attempts

    def rewards_text(self) -> tuple[str, str]:
        """The two mean rewards for a table ("-" when no attempt is on that side)."""
        using, not_using = (f"{r:.3f}" if r is not None else "-" for r in (self.reward_using, self.reward_not_using))
        return using, not_using


def tool_stats(attempts: Iterable[ScoredAttempt]) -> dict[str, ToolStats]:
    """Per tool, over all attempts' tool logs; rewards over judged attempts."""
    attempts = list(attempts)
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in attempts:
        for call in a.tools:
            calls[call["tool"]].append(call)
    judged = [a for a in attempts if a.stage == "judged"]
    out = {}
    for tool, log in sorted(calls.items()):
        using = [judged_reward(a) for a in judged if any(c["tool"] == tool for c in a.tools)]
        others = [judged_reward(a) for a in judged if all(c["tool"] != tool for c in a.tools)]
        seconds = [c["seconds"] for c in log]
        out[tool] = ToolStats(
            calls=len(log),
            errors=sum(c["error"] is not None for c in log),
            mean_seconds=statistics.fmean(seconds),
            max_seconds=max(seconds),
            attempts_using=len(using),
            reward_using=statistics.fmean(using) if using else None,
            reward_not_using=statistics.fmean(others) if others else None,
        )
    return out


class RouteStats(BaseModel):
    """How the judged attempts the router sent one way fared."""

    attempts: int
    mean_reward: float


def route_stats(attempts: Iterable[ScoredAttempt]) -> dict[str, RouteStats]:
    rewards: dict[str, list[float]] = defaultdict(list)
    for a in attempts:
        if a.route is not None and a.stage == "judged":
            rewards[a.route].append(judged_reward(a))
    return {c: RouteStats(attempts=len(r), mean_reward=statistics.fmean(r)) for c, r in sorted(rewards.items())}


class LevelMetrics(BaseModel):
    questions: int
    mean_at_k: float


class EvalMetrics(BaseModel):
    """An evaluation's metrics over its judged attempts. K is a field, never part of a key."""

    k: int  # attempts per question
    questions: int
    questions_scored: int  # with at least one judged attempt
    attempts: int
    attempts_judged: int
    attempts_failed: int
    attempts_pending: int
    verifier_errors: int
    attempts_cut: int = 0  # judged attempts whose answer the token limit cut: raise max_tokens if there are many
    replies_empty: int = 0  # judged attempts whose final reply was empty (a verifier usually scores it wrong)
    mean_at_k: float  # Mean@K: mean over questions of the mean reward of their attempts
    mean_at_k_ci95: tuple[float, float]  # bootstrap over questions
    pass_at_k: float  # Pass@K: share of questions with a correct attempt
    # questions whose judged attempts' rewards differ (K >= 2): what practice, at G = K, has to learn from; None
    # with one attempt a question
    questions_with_contrast: int | None = None
    unbiased_pass_at: dict[int, float]  # pass@k for k = 1, 2, 4, ... K (Chen et al. 2021)
    by_level: dict[str, LevelMetrics]
    avg_tool_calls: float
    tools: dict[str, ToolStats] = {}  # by tool name
    routes: dict[str, RouteStats] = {}  # by the router's choice (agents with a tool_router)
    avg_tokens: float
    total_tokens: int
    total_cost: float
    avg_time_per_attempt: float
    # Filled in by the run that computed them.
    exp_id: str | None = None
    dataset: str | None = None
    model: str | None = None
    wall_time: float | None = None


def compute_metrics(attempts: Iterable[ScoredAttempt], pass_k: int, seed: int = 0) -> EvalMetrics:
    attempts = list(attempts)
    by_question: dict[tuple[str, int], list[ScoredAttempt]] = defaultdict(list)
    for a in attempts:
        by_question[a.question].append(a)
    judged = {q: [a for a in group if a.stage == "judged"] for q, group in by_question.items()}
    scored = {q: group for q, group in judged.items() if group}
    means, pass_share = mean_and_pass(scored.values())
    unbiased = {}
    for k in k_values(pass_k):
        eligible = [g for g in scored.values() if len(g) >= k]
        if eligible:
            unbiased[k] = statistics.fmean(pass_at_k(len(g), sum(bool(a.correct) for a in g), k) for g in eligible)
    levels: dict[str, list[float]] = defaultdict(list)
    for group in scored.values():
        if group[0].level is not None:
            levels[group[0].level].append(statistics.fmean(judged_reward(a) for a in group))
    done = [a for a in attempts if a.stage == "judged"]
    contrast = sum(has_contrast(judged_reward(a) for a in g) for g in scored.values()) if pass_k > 1 else None
    by_level = {
        level: LevelMetrics(questions=len(v), mean_at_k=statistics.fmean(v)) for level, v in sorted(levels.items())
    }
    return EvalMetrics(
        k=pass_k,
        questions=len(by_question),
        questions_scored=len(scored),
        attempts=len(attempts),
        attempts_judged=len(done),
        attempts_failed=sum(a.stage == "failed" for a in attempts),
        attempts_pending=sum(a.stage in ("init", "rollout") for a in attempts),
        verifier_errors=sum(a.verify_error for a in done),
        attempts_cut=sum(a.cut for a in done),
        replies_empty=sum(a.empty for a in done),
        mean_at_k=statistics.fmean(means) if means else 0.0,
        mean_at_k_ci95=bootstrap_ci(means, seed),
        pass_at_k=pass_share,
        questions_with_contrast=contrast,
        unbiased_pass_at=unbiased,
        by_level=by_level,
        avg_tool_calls=_avg(a.tool_calls for a in done),
        tools=tool_stats(attempts),
        routes=route_stats(attempts),
        avg_tokens=_avg(a.tokens for a in done),
        total_tokens=sum(a.tokens or 0 for a in attempts),
        total_cost=sum(a.cost or 0.0 for a in attempts),
        avg_time_per_attempt=_avg(a.time_cost for a in done),
    )


def _avg(values: Iterable[float | int | None]) -> float:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else 0.0


@dataclass
class Comparison:
    rows: list[tuple[tuple[str, int], float, float]]  # question, mean A, mean B
    only_a: int
    only_b: int
    mean_diff: float
    ci95: tuple[float, float]


def compare(a: Iterable[ScoredAttempt], b: Iterable[ScoredAttempt], seed: int = 0) -> Comparison:
    """Paired difference B - A of per-question mean reward over the questions both scored."""

    def per_question(attempts: Iterable[ScoredAttempt]) -> dict[tuple[str, int], float]:
        groups: dict[tuple[str, int], list[float]] = defaultdict(list)
        for x in attempts:
            if x.stage == "judged":
                groups[x.question].append(judged_reward(x))
        return {q: statistics.fmean(v) for q, v in groups.items()}

    mean_a, mean_b = per_question(a), per_question(b)
    shared = sorted(set(mean_a) & set(mean_b))
    diffs = [mean_b[q] - mean_a[q] for q in shared]
    return Comparison(
        rows=[(q, mean_a[q], mean_b[q]) for q in shared],
        only_a=len(set(mean_a) - set(mean_b)),
        only_b=len(set(mean_b) - set(mean_a)),
        mean_diff=statistics.fmean(diffs) if diffs else 0.0,
        ci95=bootstrap_ci(diffs, seed),
    )
