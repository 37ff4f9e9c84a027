"""One attempt at one question: a rollout with timeout and retries. Shared by evaluation and practice."""

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from utu.agents.agent import Agent, AgentResult
from utu.db.attempts import AttemptWriter
from utu.db.engine import storable
from utu.errors import BudgetExhausted, EndpointError, LLMError
from utu.tracing.redact import Redactor
from utu.tracing.setup import trace_url
from utu.tracing.spans import AGENT, EVALUATOR, set_attributes, set_io, span, trace_id_of
from utu.verify import Verdict, Verifier


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
            "meta": {"stop_reason": r.stop_reason, "turns": r.turns, "tries": self.tries, "tools": r.tool_log}
            | ({"route": r.route.summary()} if r.route is not None else {}),
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
        except EndpointError:
            raise  # the endpoint refuses everything: stop the run, do not fail every attempt the same way
        except Exception as e:  # a tool or model-output bug must fail this attempt, not the whole run
            error = f"{type(e).__name__}: {e}"
    return RolloutOutcome(None, f"{error} (after {retries + 1} tries)", retries + 1, time.perf_counter() - start)


def judged_values(verdict: Verdict) -> dict[str, Any]:
    return {
        "stage": "judged",
        "reward": verdict.reward,
        "correct": verdict.correct,
        "judged_response": "Correct" if verdict.correct else "Incorrect",
        "reasoning": verdict.reasoning,
        "extracted_final_answer": verdict.extracted_final_answer,
        "confidence": verdict.confidence,
        "error": f"verify: {verdict.error}" if verdict.error else None,
    }


def needs_judging(row: Any) -> bool:
    """Rolled out and not judged yet, or judged by a verifier that failed: `run_attempt` judges it (again)."""
    return row.stage == "rollout" or (row.stage == "judged" and (row.error or "").startswith("verify:"))


def needs_rollout(row: Any) -> bool:
    """Not rolled out yet, or its rollout failed: `run_attempt` rolls it out (holding a rollout slot)."""
    return row.stage in ("init", "failed")


async def run_attempt(
    row: Any,
    *,
    agent: Agent,
    verifier: Verifier,
    writer: AttemptWriter,
    timeout: float,
    retries: int,
    experiences: dict[str, str] | None = None,
    judge: bool = True,
    slots: contextlib.AbstractAsyncContextManager[Any] | None = None,  # held to roll out: a Semaphore, a counting slot
    **settings: Any,
) -> None:
    """Roll out (unless done before) and judge one `evaluation_data` row, in one AGENT span, and save it.

    Rollout and judgement are saved together: judging is cheap to redo after a crash.
    """
    where = {"exp_id": row.exp_id, "question.index": row.dataset_index, "attempt": row.attempt, "step": row.step}
    with span("attempt", AGENT, input=row.raw_question, **where) as current:
        values: dict[str, Any] = {}
        route = None  # the router's decision for a rollout made now: its reward teaches the router
        if needs_rollout(row):
            async with slots or contextlib.nullcontext():
                if agent.llm.usage.over_budget:  # max_cost spent: this attempt is not started (the row stays)
                    return
                try:
                    outcome = await rollout(
                        agent, row.raw_question, timeout=timeout, retries=retries, experiences=experiences, **settings
                    )
                except BudgetExhausted:  # its next request could pass max_cost: the row stays to be redone
                    return
            values = outcome.row_values()
            route = outcome.result.route if outcome.result is not None else None
            if values.get("response"):  # judged as it will be stored, so a judgement redone from the row agrees
                values["response"] = storable(Redactor().secrets_only(values["response"]))
            for key, value in values.items():
                setattr(row, key, value)
        if judge and needs_judging(row):
            with span("judge", EVALUATOR, input=row.response, **{"verifier": verifier.name}) as judging:
                verdict = await verifier(row)
                set_attributes(
                    judging, {"reward": verdict.reward, "reasoning": verdict.reasoning, "error": verdict.error}
                )
            values |= judged_values(verdict)
            if route is not None and agent.router is not None and not verdict.error:
                agent.router.observe(route, verdict.reward)
        set_io(current, "output", row.response or "")
        final = {key: values.get(key, getattr(row, key)) for key in ("reward", "tokens", "error", "stage")}
        set_attributes(current, final)
        if values:
            values["trace_id"] = trace_id_of(current)
            values["trace_url"] = trace_url(values["trace_id"])
            await writer.save(row, values)
