"""Run an evaluation: K attempts per question, each a row in `evaluation_data`, resumable at any point.

Rows are created up front (stage `init`); each attempt then moves to `rollout` (or `failed`, with its
error) and to `judged`. Every update is one atomic statement, so a crash or Ctrl-C loses at most the
attempts in flight, and re-running the same exp_id does only what is missing.
"""

import asyncio
import statistics
from collections.abc import Sequence
from typing import Literal

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import delete, select, update

from utu.agents.agent import Agent
from utu.config.models import EvalConfig
from utu.db.engine import Database
from utu.db.models import DatasetSample, EvaluationSample
from utu.eval.attempt import rollout
from utu.practice.verify import Verdict, Verifier

Step = Literal["all", "rollout", "judge"]


class EvalRunner:
    def __init__(
        self,
        config: EvalConfig,
        db: Database,
        agent: Agent,
        verifier: Verifier,
        show_progress: bool = True,
        experiences: dict[str, str] | None = None,
    ):
        """`experiences`: a library to place in the agent's messages instead of its own (practice's evals)."""
        self.config = config
        self.experiences = experiences
        self.db = db
        self.agent = agent
        self.verifier = verifier
        self.show_progress = show_progress
        self._rewards: list[float] = []

    async def prepare(self, fresh: bool = False) -> int:
        """Create the missing (question, attempt) rows; with `fresh`, delete the experiment's rows first."""
        c = self.config
        async with self.db.transaction() as s:
            if fresh:
                await s.execute(delete(EvaluationSample).where(EvaluationSample.exp_id == c.exp_id))
            query = select(DatasetSample).where(DatasetSample.dataset == c.data.dataset).order_by(DatasetSample.index)
            if c.data.limit:
                query = query.limit(c.data.limit)
            questions = list(await s.scalars(query))
            have = set(
                await s.execute(
                    select(EvaluationSample.dataset_index, EvaluationSample.attempt).where(
                        EvaluationSample.exp_id == c.exp_id
                    )
                )
            )
            s.add_all(
                EvaluationSample(
                    exp_id=c.exp_id, dataset=q.dataset, dataset_index=q.index, attempt=k, source=q.source,
                    level=q.level, raw_question=q.question, correct_answer=q.answer, stage="init",
                )
                for q in questions
                for k in range(c.pass_k)
                if (q.index, k) not in have
            )  # fmt: skip
        return len(questions) * c.pass_k

    async def rows(self, stages: Sequence[str] | None = None) -> list[EvaluationSample]:
        query = select(EvaluationSample).where(EvaluationSample.exp_id == self.config.exp_id)
        if stages is not None:
            query = query.where(EvaluationSample.stage.in_(stages))
        async with self.db.sessions() as s:
            return list(await s.scalars(query.order_by(EvaluationSample.dataset_index, EvaluationSample.attempt)))

    async def run(self, step: Step = "all") -> None:
        """Roll out what has no rollout (or failed before), then judge what is not judged."""
        self._rewards = [r.reward for r in await self.rows(["judged"])]
        todo = []
        if step in ("all", "rollout"):
            todo += await self.rows(["init", "failed"])
        if step in ("all", "judge"):
            todo += await self.rows(["rollout"])
        if not todo:
            return
        slots = asyncio.Semaphore(self.config.concurrency)
        with self._progress() as progress:
            task = progress.add_task(self._describe(), total=len(todo))

            async def one(row: EvaluationSample) -> None:
                async with slots:
                    await self._attempt(row, judge=step != "rollout", rollout_only=step == "rollout")
                progress.update(task, advance=1, description=self._describe())

            await asyncio.gather(*(one(row) for row in todo))

    async def _attempt(self, row: EvaluationSample, judge: bool, rollout_only: bool) -> None:
        if row.stage in ("init", "failed"):
            outcome = await rollout(
                self.agent,
                row.raw_question,
                timeout=self.config.task_timeout,
                retries=self.config.max_attempt_retries,
                experiences=self.experiences,
            )
            values = outcome.row_values()
            await self._save(row.id, values)
            if values["stage"] == "failed" or rollout_only:
                return
            row.response = values["response"]
        if judge:
            verdict = await self.verifier(row)
            await self._save(row.id, judged_values(verdict))
            self._rewards.append(verdict.reward)

    async def _save(self, row_id: int, values: dict) -> None:
        async with self.db.transaction() as s:
            await s.execute(update(EvaluationSample).where(EvaluationSample.id == row_id).values(**values))

    def _describe(self) -> str:
        k = self.config.pass_k
        mean = statistics.fmean(self._rewards) if self._rewards else 0.0
        return f"{self.config.exp_id}: Mean@{k} {mean:.3f} ({len(self._rewards)} judged)"

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            disable=not self.show_progress,
        )  # fmt: skip


def judged_values(verdict: Verdict) -> dict:
    return {
        "stage": "judged",
        "reward": verdict.reward,
        "correct": verdict.correct,
        "reasoning": verdict.reasoning,
        "error": f"verify: {verdict.error}" if verdict.error else None,
    }
