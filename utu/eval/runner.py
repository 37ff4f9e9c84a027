"""Run an evaluation: K attempts per question, each a row in `evaluation_data`, resumable at any point.

Rows are created up front (stage `init`); each attempt then moves to `rollout` (or `failed`, with its
error) and to `judged`. Every update is one atomic statement, so a crash or Ctrl-C loses at most the
attempts in flight, and re-running the same exp_id does only what is missing.
"""

import asyncio
import statistics
from collections.abc import Sequence
from typing import Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import delete, select

from utu.agents.agent import Agent
from utu.config.models import EvalConfig, check_run_size
from utu.db.attempts import AttemptWriter
from utu.db.dataset_io import select_questions
from utu.db.engine import Database
from utu.db.experiments import check_row_owner
from utu.db.models import DatasetSample, EvaluationSample
from utu.errors import ConfigError
from utu.eval.attempt import needs_judging, needs_rollout, run_attempt
from utu.eval.metrics import judged_reward
from utu.tasks import gather_or_cancel
from utu.tracing.spans import CHAIN, session, span
from utu.verify import Verifier

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
        owner: str | None = None,
        tag: str = "rollout",
    ):
        """`experiences`: a library to place in the agent's messages instead of its own (practice's evals);
        `owner`: the experiment the rows belong to (default: this eval's exp_id); `tag`: the usage tag of its
        LLM calls."""
        self.tag = tag
        self.config = config
        self.owner = owner or config.exp_id
        self.questions: list[DatasetSample] | None = None
        self.experiences = experiences
        self.writer = AttemptWriter(db)
        self.db = db
        self.agent = agent
        self.verifier = verifier
        self.show_progress = show_progress
        self._rewards: list[float] = []

    async def prepare(self, fresh: bool = False) -> int:
        """Create the missing (question, attempt) rows; with `fresh`, delete the experiment's rows first."""
        c = self.config
        await check_row_owner(self.db, [c.exp_id], self.owner)
        self.questions = await select_questions(self.db, c.data.dataset, c.data.limit, c.data.offset)
        try:
            check_run_size(len(self.questions), c.pass_k, remedy="lower its pass_k or data.limit")
        except ValueError as e:
            raise ConfigError(f"{c.exp_id}: data set {c.data.dataset!r}: {e}") from None
        async with self.db.transaction() as s:
            mine = (EvaluationSample.exp_id == c.exp_id) & (EvaluationSample.owner == self.owner)
            if fresh:
                await s.execute(delete(EvaluationSample).where(mine))
            have = set(await s.execute(select(EvaluationSample.dataset_index, EvaluationSample.attempt).where(mine)))
            s.add_all(
                EvaluationSample(
                    exp_id=c.exp_id,
                    owner=self.owner,
                    dataset=q.dataset,
                    dataset_index=q.index,
                    attempt=k,
                    source=q.source,
                    level=q.level,
                    raw_question=q.question,
                    correct_answer=q.answer,
                    stage="init",
                )
                for q in self.questions
                for k in range(c.pass_k)
                if (q.index, k) not in have
            )
        return len(self.questions) * c.pass_k

    async def rows(self, stages: Sequence[str] | None = None) -> list[EvaluationSample]:
        """This experiment's attempts at the current selection of questions (not rows of an earlier one)."""
        query = select(EvaluationSample).where(
            EvaluationSample.exp_id == self.config.exp_id, EvaluationSample.owner == self.owner
        )
        if stages is not None:
            query = query.where(EvaluationSample.stage.in_(stages))
        async with self.db.sessions() as s:
            rows = list(await s.scalars(query.order_by(EvaluationSample.dataset_index, EvaluationSample.attempt)))
        if self.questions is not None:
            selected = {q.index for q in self.questions}
            rows = [r for r in rows if r.dataset_index in selected and r.attempt < self.config.pass_k]
        return rows

    async def run(self, step: Step = "all") -> None:
        """Roll out what has no rollout (or failed before), then judge what is not judged."""
        self._rewards = [judged_reward(r) for r in await self.rows(["judged"]) if not needs_judging(r)]
        todo = []
        if step in ("all", "rollout"):
            todo += await self.rows(["init", "failed"])
        if step in ("all", "judge"):
            todo += [row for row in await self.rows(["rollout", "judged"]) if needs_judging(row)]
        if not todo:
            return
        slots = asyncio.Semaphore(self.config.concurrency)
        c = self.config
        with (
            session(c.exp_id),
            span("eval run", CHAIN, input=c.data.dataset, **{"exp_id": c.exp_id, "pass_k": c.pass_k}),
        ):
            with self._progress() as progress:
                describe = (lambda: f"{c.exp_id}: rollouts, not judged") if step == "rollout" else self._describe
                task = progress.add_task(describe(), total=len(todo))

                async def one(row: EvaluationSample) -> None:
                    async with slots:
                        await run_attempt(
                            row,
                            agent=self.agent,
                            verifier=self.verifier,
                            writer=self.writer,
                            timeout=c.task_timeout,
                            retries=c.max_attempt_retries,
                            experiences=self.experiences,
                            judge=step != "rollout",
                            tag=self.tag,
                        )
                    if row.stage == "judged":
                        self._rewards.append(judged_reward(row))
                    progress.update(task, advance=1, description=describe())

                await gather_or_cancel(*(one(row) for row in todo))
            if any(needs_rollout(row) for row in todo):  # attempts not rolled out: max_cost was spent?
                self.agent.llm.usage.check_budget()

    def _describe(self) -> str:
        k = self.config.pass_k
        mean = statistics.fmean(self._rewards) if self._rewards else 0.0
        return f"{self.config.exp_id}: Mean@{k} {mean:.3f} ({len(self._rewards)} judged)"

    def _progress(self) -> Progress:
        """On standard error, beside the log: standard output holds the result alone (`run_eval ... > result.txt`),
        and a reader that closes it early (`| head`) no longer stops the run before its result is kept."""
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not self.show_progress,
        )


async def evaluate_inside(
    config: EvalConfig,
    db: Database,
    agent: Agent,
    verifier: Verifier,
    experiences: dict[str, str],
    owner: str,
    tag: str = "rollout",
) -> list[EvaluationSample]:
    """An evaluation run quietly inside another experiment (`owner`: practice's validations and in-step evals), with
    `experiences` in place of the agent's own library; its rows."""
    runner = EvalRunner(config, db, agent, verifier, show_progress=False, experiences=experiences, owner=owner, tag=tag)
    await runner.prepare()
    await runner.run()
    return await runner.rows()
