"""The first stages of a step, per question's group: rollouts, each judged; then, as soon as the group is judged,
the learner summarises its attempts, compares them (the group advantage) and proposes operations, overlapping the
other groups' rollouts (`pipeline`)."""

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING

from utu.agents.agent import Agent
from utu.config.models import TrainingFreeGRPOConfig
from utu.db.attempts import AttemptWriter
from utu.db.models import EvaluationSample
from utu.eval.attempt import needs_rollout, run_attempt
from utu.llm.usage import UsageTracker
from utu.practice.experience_updater import ExperienceUpdater
from utu.practice.library import Library
from utu.practice.types import GroupAttempt, GroupOutcome
from utu.tasks import gather_or_cancel
from utu.verify import Verifier

if TYPE_CHECKING:  # the router needs torch, which practice without one does not
    from utu.router.routing import AgentRouter


async def teach_recorded(router: "AgentRouter", rows: list[EvaluationSample]) -> None:
    """Attempts judged before a stop: their rewards still teach the router (as live, a failed verdict does not)."""
    for row in rows:
        route = (row.meta or {}).get("route")
        if row.stage == "judged" and route and not row.error and row.reward is not None:
            await router.observe_recorded(row.raw_question, route, row.reward)


class Rollouts:
    def __init__(
        self,
        config: TrainingFreeGRPOConfig,
        agent: Agent,
        verifier: Verifier,
        writer: AttemptWriter,
        updater: ExperienceUpdater,
        usage: UsageTracker,
        pipeline: bool = True,
    ):
        self.config, self.agent, self.verifier, self.writer = config, agent, verifier, writer
        self.updater, self.usage, self.pipeline = updater, usage, pipeline

    async def groups(self, rows: list[EvaluationSample], library: Library) -> list[GroupOutcome]:
        """Rolls out and judges the G attempts of each question `rows` hold, not done yet, with `library`; each
        question's group goes to the learner as soon as it is judged (unless `pipeline` is off)."""
        groups = by_question(rows)
        issued = _IssueCount(sum(map(needs_rollout, rows)), asyncio.Semaphore(self.config.rollout_concurrency))
        attempt = partial(  # one attempt with the library at the rollout temperature, judged by the verify function
            run_attempt,
            agent=self.agent,
            verifier=self.verifier,
            writer=self.writer,
            timeout=self.config.task_timeout,
            retries=self.config.evaluation.max_attempt_retries,
            experiences=library.experiences,
            temperature=self.config.practice.rollout_temperature,
            explore=True,  # a router (if the agent has one) tries distinct choices across a question's attempts
        )

        async def group(group_rows: list[EvaluationSample]) -> GroupOutcome | None:
            await gather_or_cancel(*(attempt(row, slots=issued.counting()) for row in group_rows))  # rollouts, judged
            if not self.pipeline or any(r.stage == "init" for r in group_rows):  # (init: max_cost was spent)
                return None
            if self.updater.llm is self.agent.llm:  # one client: the step's rollouts take its slots first
                await issued.all.wait()
            return await self.updater.learn(attempts_of(group_rows), library)  # summarise, advantage, proposals

        if self.agent.router is not None:
            await teach_recorded(self.agent.router, rows)
        outcomes = await gather_or_cancel(*(group(g) for g in groups.values()))
        if any(row.stage == "init" for row in rows):  # attempts not started: the finished ones are saved
            self.usage.check_budget()
        if not self.pipeline:
            outcomes = await gather_or_cancel(*(self.updater.learn(attempts_of(g), library) for g in groups.values()))
        return outcomes


def by_question(rows: list[EvaluationSample]) -> dict[int, list[EvaluationSample]]:
    """Each question's attempt rows (its group), in the order the questions first come in `rows`."""
    groups: dict[int, list[EvaluationSample]] = defaultdict(list)
    for row in rows:
        groups[row.dataset_index].append(row)
    return groups


def attempts_of(rows: list[EvaluationSample]) -> list[GroupAttempt]:
    return [as_attempt(r) for r in rows]


def as_attempt(row: EvaluationSample) -> GroupAttempt:
    return GroupAttempt(
        dataset_index=row.dataset_index,
        question=row.raw_question,
        answer=row.correct_answer,
        response=row.response,
        trajectory=row.trajectories or [],
        reward=row.reward if row.stage == "judged" else None,
        critique=row.reasoning,
        tools=(row.meta or {}).get("tools") or [],
        cut=(row.meta or {}).get("stop_reason") == "max_tokens",
        verifier_failed=row.stage == "judged" and (row.error or "").startswith("verify:"),
    )


class _IssueCount:
    """Counts a step's rollouts as they take a rollout slot; `all` is set when every one has."""

    def __init__(self, total: int, slots: asyncio.Semaphore):
        self.left, self.slots = total, slots
        self.all = asyncio.Event()
        if not total:
            self.all.set()

    @contextlib.asynccontextmanager
    async def counting(self) -> AsyncIterator[None]:
        async with self.slots:
            self.left -= 1
            if self.left <= 0:
                self.all.set()
            yield
