"""Token and cost accounting: per call (returned with each response) and per run (totals by tag)."""

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from utu.config.models import Pricing
from utu.errors import BudgetExhausted

RESUME = (
    "every finished attempt is saved, and the same command goes on from there (with a budget of its own: --max_cost"
    " is per command)"
)


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: "Usage") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost += other.cost


def priced(prompt_tokens: int, completion_tokens: int, pricing: Pricing) -> Usage:
    cost = (prompt_tokens * pricing.input_per_million + completion_tokens * pricing.output_per_million) / 1e6
    return Usage(calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost=cost)


@dataclass
class UsageTracker:
    """Run totals by tag (e.g. "rollout", "learner.summary"). Shared by several clients; thread-safe.

    `on_call(tag, usage)` is called after each call, e.g. to write a row or a span attribute.
    """

    by_tag: dict[str, Usage] = field(default_factory=dict)
    on_call: Callable[[str, Usage], None] | None = None
    max_cost: float | None = None  # dollars this run may spend (priced by each model's `pricing`)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _reserved: float = 0.0  # the worst-case cost of the requests in flight
    _refused: bool = False  # a request was refused for the budget

    @contextlib.contextmanager
    def reserve(self, worst_cost: float) -> Iterator[None]:
        """Hold `worst_cost` for one request while it is in flight; `BudgetExhausted` before it is sent if what
        was spent plus what is in flight could pass `max_cost` with it. Record its usage inside the block."""
        with self._lock:
            spent = sum(u.cost for u in self.by_tag.values())
            if self.max_cost is not None and spent + self._reserved + worst_cost > self.max_cost:
                self._refused = True  # no new attempt starts either
                raise BudgetExhausted(
                    f"spent ${spent:.4f} of max_cost ${self.max_cost:.4f}: stopped before a request that could pass"
                    f" it (${worst_cost:.4f} at most, with ${self._reserved:.4f} in flight); {RESUME}"
                )
            self._reserved += worst_cost
        try:
            yield
        finally:
            with self._lock:
                self._reserved -= worst_cost

    @property
    def over_budget(self) -> bool:
        """Whether the run has spent its `max_cost`: no new attempt (or practice step) starts; those under way
        finish and are saved."""
        return self.max_cost is not None and (self._refused or self.total().cost >= self.max_cost)

    def check_budget(self) -> None:
        """`BudgetExhausted` if the run has spent its `max_cost`."""
        if self.over_budget:
            raise BudgetExhausted(
                f"spent ${self.total().cost:.4f} of max_cost ${self.max_cost:.4f}: stopped before the next attempt;"
                f" {RESUME}"
            )

    def record(self, tag: str, usage: Usage) -> None:
        with self._lock:
            self.by_tag.setdefault(tag, Usage()).add(usage)
        if self.on_call is not None:
            self.on_call(tag, usage)

    def total(self) -> Usage:
        out = Usage()
        with self._lock:
            for u in self.by_tag.values():
                out.add(u)
        return out

    def snapshot(self) -> dict[str, Usage]:
        """A copy of the totals by tag (to compute what one step used)."""
        with self._lock:
            return {tag: Usage(u.calls, u.prompt_tokens, u.completion_tokens, u.cost) for tag, u in self.by_tag.items()}
