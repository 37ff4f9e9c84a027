"""Training-Free GRPO: epochs -> batches -> steps, learning an experience library instead of weights.

One step (`PracticeLoop.practice_step`), in the paper's order:
  rollouts -> judge -> summarise -> group advantage -> proposals -> consolidate -> restate -> screen -> gate -> save
the first five per question's group, as soon as its attempts are judged (rollouts.py, experience_updater.py; a
group whose attempts all lost, if studied, once the step's rollouts are done); the rest once for the batch
(`update`, gate.py), the library saved with its operations and statistics in one transaction (store.py). When
every proposal was refused, the learner takes a second look (`second_look`; when, and what it is shown:
retries.py).
What one step carries from stage to stage is a `Step` (step.py). Resume (`restart_step`): steps before it are
reused from the database, steps from it on are recomputed; an unfinished step resumes with the attempts it has.
"""

import logging
from dataclasses import dataclass, field

from utu.agents.agent import Agent
from utu.config.models import TrainingFreeGRPOConfig
from utu.db.attempts import AttemptWriter
from utu.db.engine import Database
from utu.errors import BudgetExhausted, RunFailed
from utu.eval.metrics import ScoredAttempt, compute_metrics
from utu.eval.outcome import RERUN, check_attempts
from utu.eval.runner import evaluate_inside
from utu.llm.usage import UsageTracker
from utu.practice.data_manager import PracticeData
from utu.practice.experience_updater import ExperienceUpdater, every_attempt_lost
from utu.practice.gate import ValidationGate
from utu.practice.library import Library, OpRecord, apply_operations
from utu.practice.retries import look_again, mark_second_look, refusals_for_learner, refused_for_what_they_say
from utu.practice.rollouts import Rollouts, attempts_of, by_question
from utu.practice.step import Step, groups_with_contrast, learner_failed_everywhere, screen_against, step_questions
from utu.practice.store import EVAL_PREFIX, PracticeStore
from utu.practice.types import StepEval, StepStats
from utu.tasks import gather_or_cancel
from utu.tracing.spans import CHAIN, annotate, session, span
from utu.verify import Verifier

log = logging.getLogger(__name__)


@dataclass
class PracticeResult:
    library: Library
    steps: list[StepStats] = field(default_factory=list)


class PracticeLoop:
    """The steps of one practice run: rollouts, judging, the learner, validation, snapshots."""

    def __init__(
        self,
        config: TrainingFreeGRPOConfig,
        db: Database,
        agent: Agent,
        updater: ExperienceUpdater,
        verifier: Verifier,
        usage: UsageTracker,
        initial: Library | None = None,
        pipeline: bool = True,
    ):
        self.config = config
        self.p = config.practice
        self.db = db
        self.agent = agent
        self.updater = updater
        self.verifier = verifier
        self.usage = usage
        self.initial = initial or Library()  # the library before step 0 (multi-stage practice)
        self.store = PracticeStore(db, config.exp_id)
        self.writer = AttemptWriter(db)
        self.rollouts = Rollouts(config, agent, verifier, self.writer, updater, usage, pipeline)
        self.gate = ValidationGate(config, db, agent, verifier) if self.p.validation else None
        self.data = PracticeData(
            db,
            config.exp_id,
            config.data.practice_dataset_name,
            self.p.grpo_n,
            self.p.batch_size,
            config.data.rollout_data_truncate,
            self.p.shuffle_data,
            self.p.seed,
        )

    def use_cache(self, step: int) -> bool:
        return self.p.restart_step is None or step < self.p.restart_step

    async def run(self) -> PracticeResult:
        with session(self.config.exp_id), span("practice run", CHAIN, **{"exp_id": self.config.exp_id}):
            result = await self._run()
            annotate(**{"output.value": result.library.experiences, "library_size": len(result.library.experiences)})
            return result

    async def _run(self) -> PracticeResult:
        if self.p.restart_step is not None:
            await self.store.reset_from(self.p.restart_step)
            await self.data.reset_from(self.p.restart_step)
        per_epoch = await self.data.batches_per_epoch()
        await self.store.save_initial(self.initial)
        result = PracticeResult(self.initial.copy())
        for epoch in range(self.p.epochs):
            for b, batch in enumerate(await self.data.epoch_batches(epoch)):
                step = epoch * per_epoch + b
                cached = await self.store.snapshot(step) if self.use_cache(step) else None
                if cached is not None:
                    log.info("step %d: reusing the saved library (%d experiences)", step, len(cached.experiences))
                    result.library = cached
                    result.steps.append(await self.store.step_stats(step))
                    continue
                with span(f"step {step}", CHAIN, **{"epoch": epoch, "batch": b, "step": step}):
                    stats, result.library = await self.practice_step(epoch, b, step, batch, result.library)
                    annotate(stats=stats.model_dump(), **{"output.value": result.library.experiences})
                if self.p.do_eval and self.should_evaluate(step, b, per_epoch):
                    stats.eval = await self.evaluate(step, result.library)
                    await self.store.update_stats(step, stats)
                result.steps.append(stats)
        return result

    def should_evaluate(self, step: int, batch: int, per_epoch: int) -> bool:
        if self.p.eval_strategy == "epoch":
            return batch == per_epoch - 1
        return (step + 1) % self.p.eval_steps == 0

    async def practice_step(self, epoch: int, b: int, step: int, batch, library: Library) -> tuple[StepStats, Library]:
        """One step of Training-Free GRPO; returns its statistics and the new library (both already saved)."""
        self.usage.check_budget()  # max_cost spent: stop between steps
        s = Step(step, epoch, b, self.usage.snapshot(), self.p.validation.one_by_one or 0 if self.p.validation else 0)
        s.rows = await self.data.step_rows(epoch, step, batch)
        log.info("step %d (epoch %d, batch %d): %d questions x G=%d", step, epoch, b, len(batch), self.p.grpo_n)
        # rollouts -> judge -> summarise -> group advantage -> proposals, per group (rollouts.py)
        s.outcomes = await self.rollouts.groups(s.rows, library)
        await self.top_up(s, library)  # more questions when too few groups showed contrast
        await self.study_all_lost(s, library)  # and groups that all lost, compared with the ground truth
        if self.agent.router is not None:  # a tool router learns from the step's rewards (utu/router)
            self.agent.router.update(step)
        s.learner_failures()
        await self.check_step(s)
        # consolidate -> restate -> screen -> gate
        new_library = await self.update(s, library)
        while look_again(s.tries, s.latest, self.p, self.usage.over_budget):  # every proposal refused
            try:
                new_library = await self.second_look(s, library)
            except BudgetExhausted:  # spent during its validation: the step is saved as the earlier tries left it
                log.warning("step %d: max_cost reached during the learner's second look; it is not used", step)
                break
        stats = s.stats(new_library, self.usage.snapshot(), self.p.grpo_n)
        await self.store.save_step(step, epoch, b, new_library, s.records, s.failures, stats)  # save
        log.info(
            "step %d: Mean@%d %.3f, library %d (+%d ops), %d learner errors",
            *(step, self.p.grpo_n, stats.mean_at_g, len(new_library.experiences)),
            *(sum(stats.operations.values()), len(s.failures)),
        )
        scored_zero = [
            f"{n} of {stats.attempts} attempts {what}"
            for n, what in (
                (stats.verifier_errors, "had a verifier that failed (scored timeout_score)"),
                (stats.replies_empty, "got an empty reply"),
            )
            if n
        ]
        if scored_zero:  # the step learned from rewards that say nothing of these attempts' answers
            log.warning("step %d: %s", step, "; ".join(scored_zero))
        return stats, new_library

    async def update(self, s: Step, library: Library) -> Library:
        """The step's update from its groups' proposals: proposed (consolidated, restated, screened) and, if the
        library changed, validated; a refused update leaves `library` as it was, or the part of it that passed alone
        (`one_by_one`). The records say what became of each proposal."""
        new_library, s.latest = await self.propose(s, library)
        if self.gate and new_library.experiences != library.experiences:
            new_library, s.validation, s.alone_left = await self.gate.decide(
                library, new_library, s.latest, s.alone_left
            )
        s.records += s.latest
        return new_library

    async def propose(self, s: Step, library: Library) -> tuple[Library, list[OpRecord]]:
        """Consolidate -> restate -> screen: the step's operations applied to a copy of `library`, each screened
        against the step's questions as it is applied."""
        questions = step_questions(s.rows)
        screen, story_check = screen_against(questions, self.p.screening, self.p.given_ground_truth, s.refused_before)
        proposed = await self.updater.consolidate(library, s.outcomes, s.failures)
        proposed = await self.updater.restate(proposed, story_check, questions, s.failures)
        return apply_operations(library, proposed, self.p.max_experiences, screen)

    async def second_look(self, s: Step, library: Library) -> Library:
        """Every proposal of the latest try was refused: the learner compares the step's groups again (group
        advantage and proposals; the summaries are kept), and the new proposals go through `update`."""
        log.info("step %d: all %d proposals refused; the learner compares the groups again", s.step, len(s.latest))
        shown = (
            refusals_for_learner(s.records, self.p.given_ground_truth) if self.p.learner_retry_shows_refusals else []
        )
        s.outcomes = await gather_or_cancel(*(self.updater.learn_again(o, library, shown) for o in s.outcomes))
        s.learner_failures()
        s.refused_before += refused_for_what_they_say(s.latest)
        records_before = len(s.records)
        new_library = await self.update(s, library)
        mark_second_look(s.records[records_before:], s.tries)
        s.tries += 1
        return new_library

    async def top_up(self, s: Step, library: Library) -> None:
        """With fewer groups showing contrast than `top_up.min_groups`, the reserve's questions rolled out too."""
        top_up, contrast = self.p.top_up, groups_with_contrast(s.rows)
        if not top_up or contrast >= top_up.min_groups or self.usage.over_budget:
            return
        reserve = await self.data.reserve(s.step, top_up.questions)
        log.info(
            "step %d: %d of %d groups with contrast (top_up.min_groups %d): %d more questions",
            *(s.step, contrast, len(s.outcomes), top_up.min_groups, len(reserve)),
        )
        extra = await self.data.step_rows(s.epoch, s.step, reserve)
        s.rows, s.outcomes = s.rows + extra, s.outcomes + await self.rollouts.groups(extra, library)
        s.questions_added = len(reserve)

    async def study_all_lost(self, s: Step, library: Library) -> None:
        """The first `all_lost_groups_per_step` of the step's skipped groups whose attempts all lost, in the step's
        question order (its batch, then its top-up), studied by the learner against the ground truth: chosen once
        every rollout is judged, so a rerun or a resumed step chooses the same."""
        if not self.p.all_lost_groups_per_step:
            return
        check_attempts(s.rows, self.config.evaluation.max_failed_share, f"step {s.step}")  # before paying the learner
        groups = by_question(s.rows)
        chosen = [
            i
            for i, o in enumerate(s.outcomes)
            if not o.used and every_attempt_lost(attempts_of(groups[o.dataset_index]))
        ][: self.p.all_lost_groups_per_step]
        studied = await gather_or_cancel(
            *(self.updater.learn(attempts_of(groups[s.outcomes[i].dataset_index]), library, True) for i in chosen)
        )
        for i, outcome in zip(chosen, studied, strict=True):
            s.outcomes[i] = outcome

    async def check_step(self, s: Step) -> None:
        """Refuse to record a step whose rollouts failed (beyond the allowed share) or whose learner failed on
        every group it studied (every pass of it; a pass that answered with no proposal is not a failure): the step
        stays undone, and rerunning retries it."""
        check_attempts(s.rows, self.config.evaluation.max_failed_share, f"step {s.step}")
        if learner_failed_everywhere(s.outcomes):
            await self.store.record_failures(s.step, s.failures)
            raise RunFailed(
                f"step {s.step}: the learner failed on all {sum(o.used for o in s.outcomes)} groups it studied; "
                f"first error: {s.failures[0].error}; {RERUN}"
            )

    async def evaluate(self, step: int, library: Library) -> StepEval:
        """Evaluate the current library on the eval set at the agent's own settings (not the rollout temperature)."""
        ev = self.config.evaluation
        limit = self.config.data.eval_data_truncate or ev.data.limit
        config = ev.model_copy(
            update={
                "exp_id": EVAL_PREFIX.format(self.config.exp_id) + str(step),
                "data": ev.data.model_copy(update={"limit": limit}),
            }
        )
        rows = await evaluate_inside(
            config, self.db, self.agent, self.verifier, library.experiences, self.config.exp_id
        )
        metrics = compute_metrics((ScoredAttempt.from_row(r) for r in rows), config.pass_k)
        return StepEval(
            exp_id=config.exp_id, k=metrics.k, mean_at_k=metrics.mean_at_k, mean_at_k_ci95=metrics.mean_at_k_ci95
        )
