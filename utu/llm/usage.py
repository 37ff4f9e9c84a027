"""Token and cost accounting: per call (returned with each response) and per run (totals by tag)."""

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from utu.config.models import Pricing
from utu.errors import BudgetExhausted

RESERVE_POLL_SECONDS = 0.02  # how often a request waiting for the budget's room looks again
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
    _refusal: str | None = None  # why a request was not sent: the run stops, with this said

    @contextlib.asynccontextmanager
    async def reserve(self, worst_cost: float) -> AsyncIterator[None]:
        """Hold `worst_cost` for one request while it is in flight (record its usage inside the block). A request
        that could pass `max_cost` beside those in flight waits for them; one that could pass it alone is not sent:
        `BudgetExhausted`, and no new attempt starts."""
        while not self._try_reserve(worst_cost):
            await asyncio.sleep(RESERVE_POLL_SECONDS)
        try:
            yield
        finally:
            with self._lock:
                self._reserved -= worst_cost

    def _try_reserve(self, worst_cost: float) -> bool:
        with self._lock:
            if self.max_cost is None:
                return True
            spent = sum(u.cost for u in self.by_tag.values())
            if spent + worst_cost > self.max_cost:
                alone = "; one request can cost more than max_cost: raise it or lower max_tokens" if not spent else ""
                self._refusal = (
                    f"spent ${spent:.4f} of max_cost ${self.max_cost:.4f}: stopped before a request that could cost"
                    f" up to ${worst_cost:.4f} (its prompt at a token per byte, max_tokens of reply){alone}; {RESUME}"
                )
                raise BudgetExhausted(self._refusal)
            if spent + self._reserved + worst_cost > self.max_cost:
                return False  # it fits once a request in flight has been paid for
            self._reserved += worst_cost
            return True

    @property
    def over_budget(self) -> bool:
        """Whether the run has spent its `max_cost`: no new attempt (or practice step) starts; those under way
        finish and are saved."""
        return self.max_cost is not None and (self._refusal is not None or self.total().cost >= self.max_cost)

    def check_budget(self) -> None:
        """`BudgetExhausted` if the run has spent its `max_cost`."""
        if self._refusal is not None:
            raise BudgetExhausted(self._refusal)
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
