"""What practice keeps in SQL besides attempts: library snapshots, operations, step statistics, learner errors.

A step's results are saved in one transaction, so a step is either complete (with its snapshot) or
absent, never half-written.
"""

from sqlalchemy import delete, func, select

from utu.db.engine import Database
from utu.db.models import EvaluationSample, ExperienceOperation, ExperienceSnapshot, LearnerError, PracticeStep
from utu.practice.library import Library, OpRecord
from utu.practice.types import LearnerFailure, StepStats
from utu.tracing.redact import Redactor

INITIAL_STEP = -1  # the snapshot "before step 0": the library practice started from
EVAL_PREFIX = "{}_eval_step"  # + the step number: the exp_id of a practice's in-step evaluation
VALIDATION_INFIX = "_val_"  # exp_id + this + a library's digest: that library's validation attempts


class PracticeStore:
    def __init__(self, db: Database, exp_id: str):
        self.db = db
        self.exp_id = exp_id

    async def snapshot(self, step: int) -> Library | None:
        async with self.db.sessions() as s:
            row = await s.scalar(
                select(ExperienceSnapshot).where(
                    ExperienceSnapshot.exp_id == self.exp_id, ExperienceSnapshot.step == step
                )
            )
        return Library(dict(row.experiences), row.next_id) if row else None

    async def save_initial(self, library: Library) -> None:
        """Record the library practice starts from as the snapshot of step -1 (none for an empty start)."""
        redact = Redactor()
        async with self.db.transaction() as s:
            await s.execute(
                delete(ExperienceSnapshot).where(
                    ExperienceSnapshot.exp_id == self.exp_id, ExperienceSnapshot.step == INITIAL_STEP
                )
            )
            if not library.experiences:
                return
            s.add(
                ExperienceSnapshot(
                    exp_id=self.exp_id,
                    step=INITIAL_STEP,
                    epoch=0,
                    batch=INITIAL_STEP,
                    experiences=redact.value(dict(library.experiences)),
                    next_id=library.next_id,
                )
            )

    async def steps(self) -> list[StepStats]:
        """The statistics of every recorded step, in step order."""
        async with self.db.sessions() as s:
            rows = await s.scalars(
                select(PracticeStep).where(PracticeStep.exp_id == self.exp_id).order_by(PracticeStep.step)
            )
            return [StepStats.model_validate(row.stats) for row in rows]

    async def saved_steps(self, before: int | None = None) -> int:
        """How many steps are recorded (those before step `before` only, if given): a rerun reuses them."""
        async with self.db.sessions() as s:
            query = select(func.count()).select_from(PracticeStep).where(PracticeStep.exp_id == self.exp_id)
            if before is not None:
                query = query.where(PracticeStep.step < before)
            return (await s.execute(query)).scalar_one()

    async def step_stats(self, step: int) -> StepStats:
        """The statistics of a recorded step (`save_step` writes them with the step's snapshot)."""
        async with self.db.sessions() as s:
            this_step = select(PracticeStep).where(PracticeStep.exp_id == self.exp_id, PracticeStep.step == step)
            row = (await s.execute(this_step)).scalar_one()
        return StepStats.model_validate(row.stats)

    async def save_step(
        self,
        step: int,
        epoch: int,
        batch: int,
        library: Library,
        records: list[OpRecord],
        failures: list[LearnerFailure],
        stats: StepStats,
    ) -> None:
        redact = Redactor()  # stored text is masked like attempt rows (utu/tracing/redact.py)
        async with self.db.transaction() as s:
            s.add(
                ExperienceSnapshot(
                    exp_id=self.exp_id,
                    step=step,
                    epoch=epoch,
                    batch=batch,
                    experiences=redact.value(dict(library.experiences)),
                    next_id=library.next_id,
                )
            )
            s.add_all(
                ExperienceOperation(
                    exp_id=self.exp_id,
                    step=step,
                    kind=r.kind,
                    experience_id=r.experience_id,
                    old_text=redact.value(r.old_text),
                    new_text=redact.value(r.new_text),
                    source_questions=r.source_questions,
                    rationale=redact.value(r.rationale),
                    status=r.status,
                    refusal=r.refusal.kind if r.refusal else None,
                    reason=r.reason,
                    learner_try=r.learner_try,
                )
                for r in records
            )
            s.add_all(self._errors(step, failures))
            s.add(
                PracticeStep(
                    exp_id=self.exp_id, step=step, epoch=epoch, batch=batch, stats=stats.model_dump(mode="json")
                )
            )

    async def record_failures(self, step: int, failures: list[LearnerFailure]) -> None:
        """Learner failures of a step that is not recorded as done (kept for diagnosis)."""
        async with self.db.transaction() as s:
            s.add_all(self._errors(step, failures))

    def _errors(self, step: int, failures: list[LearnerFailure]) -> list[LearnerError]:
        redact = Redactor()
        return [
            LearnerError(
                exp_id=self.exp_id,
                step=step,
                stage=f.stage,
                dataset_index=f.dataset_index,
                error=redact(f.error),
                raw_reply=redact.value(f.raw_reply),
            )
            for f in failures
        ]

    async def update_stats(self, step: int, stats: StepStats) -> None:
        async with self.db.transaction() as s:
            this_step = select(PracticeStep).where(PracticeStep.exp_id == self.exp_id, PracticeStep.step == step)
            row = (await s.execute(this_step)).scalar_one()  # the step was stored before its stats
            row.stats = stats.model_dump(mode="json")

    async def reset_from(self, step: int) -> None:
        """Forget everything learned at steps >= `step` (for --restart_step), evaluations included."""
        async with self.db.transaction() as s:
            for model in (ExperienceSnapshot, ExperienceOperation, PracticeStep, LearnerError):
                await s.execute(delete(model).where(model.exp_id == self.exp_id, model.step >= step))
            eval_ids = await s.scalars(
                select(EvaluationSample.exp_id)
                .where(EvaluationSample.owner == self.exp_id, EvaluationSample.step.is_(None))
                .distinct()
            )
            stale = [
                e
                for e in eval_ids
                if e.startswith(EVAL_PREFIX.format(self.exp_id))
                and int(e.removeprefix(EVAL_PREFIX.format(self.exp_id))) >= step
            ]
            if stale:
                await s.execute(
                    delete(EvaluationSample).where(
                        EvaluationSample.owner == self.exp_id, EvaluationSample.exp_id.in_(stale)
                    )
                )
