"""One attempt at one question: a rollout with timeout and retries. Shared by evaluation and practice."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from utu.agents.agent import Agent, AgentResult
from utu.errors import LLMError


@dataclass
class RolloutOutcome:
    result: AgentResult | None
    error: str | None
    tries: int
    time_cost: float

    def row_values(self) -> dict[str, Any]:
        """The `evaluation_data` columns this outcome sets."""
        if self.result is None:
            return {"stage": "failed", "error": self.error, "time_cost": self.time_cost}
        r = self.result
        return {
            "stage": "rollout",
            "error": None,
            "response": r.response,
            "trajectories": r.trajectory,
            "tokens": r.usage.total_tokens,
            "cost": r.usage.cost,
            "tool_calls": r.tool_calls,
            "time_cost": self.time_cost,
            "augmented_question": r.trajectory[1]["content"] if len(r.trajectory) > 1 else None,
            "meta": {"stop_reason": r.stop_reason, "turns": r.turns, "tries": self.tries},
        }


async def rollout(
    agent: Agent,
    question: str,
    *,
    timeout: float,
    retries: int,
    experiences: dict[str, str] | None = None,
    tag: str = "rollout",
    **settings: Any,
) -> RolloutOutcome:
    """Run the agent, retrying a failed or timed-out attempt up to `retries` times. Never raises for them."""

    start = time.perf_counter()
    error = None
    for tries in range(1, retries + 2):
        try:
            result = await asyncio.wait_for(agent.run(question, experiences=experiences, tag=tag, **settings), timeout)
            return RolloutOutcome(result, None, tries, time.perf_counter() - start)
        except TimeoutError:
            error = f"attempt timed out after {timeout:g}s"
        except LLMError as e:
            error = str(e)
        except Exception as e:  # a tool or model-output bug must fail this attempt, not the whole run
            error = f"{type(e).__name__}: {e}"
    return RolloutOutcome(None, f"{error} (after {retries + 1} tries)", retries + 1, time.perf_counter() - start)
