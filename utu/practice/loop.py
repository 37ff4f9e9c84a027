"""Training-Free GRPO: epochs -> batches -> steps, learning an experience library instead of weights.

Per step: G attempts per question with the current library (rollouts at `rollout_temperature`, bounded by
`rollout_concurrency` and `task_timeout`), each judged by the verify function; as soon as a question's
group is judged its learner stages 1–3 start (overlapping the rest of the batch); then the batch's
operations are consolidated, a proposal told as its question's story is restated (stage 5), the operations are
applied, and the new library is saved with the step's statistics in
one transaction. Resume (`restart_step`): steps before it are reused from the database, steps from it
on are recomputed; an unfinished step resumes with the attempts it already has.
"""

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from utu.agents.agent import Agent
from utu.config.models import DataConfig, ScreeningConfig, TrainingFreeGRPOConfig, ValidationConfig
from utu.db.attempts import AttemptWriter
from utu.db.engine import Database
from utu.db.models import EvaluationSample
from utu.errors import BudgetExhausted, RunFailed
from utu.eval.attempt import needs_rollout, run_attempt
from utu.eval.metrics import ScoredAttempt, compare, compute_metrics, mean_and_pass, tool_stats
from utu.eval.outcome import RERUN, check_attempts
from utu.eval.runner import EvalRunner
from utu.llm.usage import Usage, UsageTracker
from utu.practice.data_manager import PracticeData
from utu.practice.experience_updater import ExperienceUpdater
from utu.practice.library import JUNK, Library, OpRecord, Screen, StoryCheck, apply_operations, with_additions
from utu.practice.screening import ANSWER_REFUSED, EXISTING, Question, Source, screen, similarity, tells_its_story
from utu.practice.store import EVAL_PREFIX, VALIDATION_INFIX, PracticeStore
from utu.practice.types import (
    GroupAttempt,
    GroupOutcome,
    LearnerFailure,
    StageUsage,
    StepEval,
    StepStats,
    StepValidation,
)
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
        self.pipeline = pipeline
        self.initial = initial or Library()  # the library before step 0 (multi-stage practice)
        self.alone_left = 0  # the step's validations of single changes left (`validation.one_by_one`)
        self.store = PracticeStore(db, config.exp_id)
        self.writer = AttemptWriter(db)
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
        """One step; returns its statistics and the new library (both already saved)."""
        self.usage.check_budget()  # max_cost spent: stop between steps
        start = time.perf_counter()
        self.alone_left = (self.p.validation.one_by_one or 0) if self.p.validation else 0
        usage_before = self.usage.snapshot()
        rows = await self.data.step_rows(epoch, step, batch)
        log.info("step %d (epoch %d, batch %d): %d questions x G=%d", step, epoch, b, len(batch), self.p.grpo_n)
        outcomes = await self.groups(rows, library)
        top_up, added, contrast = self.p.top_up, 0, groups_with_contrast(rows)
        if top_up and contrast < top_up.min_groups and not self.usage.over_budget:
            reserve = await self.data.reserve(step, top_up.questions)
            log.info(
                "step %d: %d of %d groups with contrast (top_up.min_groups %d): %d more questions",
                *(step, contrast, len(outcomes), top_up.min_groups, len(reserve)),
            )
            extra, added = await self.data.step_rows(epoch, step, reserve), len(reserve)
            rows, outcomes = rows + extra, outcomes + await self.groups(extra, library)
        failures: list[LearnerFailure] = [f for o in outcomes for f in o.failures]
        await self._check_step(step, rows, outcomes, failures)
        new_library, records, validation = await self.update(library, rows, outcomes, failures)
        tries, latest, refused_before = 1, records, []
        while self._retry(tries, latest):
            log.info("step %d: all %d proposals refused; the learner compares the groups again", step, len(latest))
            shown = self.p.learner_retry_shows_refusals
            refusals_shown = refusals_for_learner(records, self.p.given_ground_truth) if shown else []
            outcomes = await gather_or_cancel(*(self.updater.learn_again(o, library, refusals_shown) for o in outcomes))
            failures += [f for o in outcomes for f in o.failures]
            refused_before += refused_for_what_they_say(latest)
            try:
                new_library, latest, again = await self.update(library, rows, outcomes, failures, refused_before)
            except BudgetExhausted:  # spent during its validation: the step is saved as the earlier tries left it
                log.warning("step %d: max_cost reached during the learner's second look; it is not used", step)
                break
            validation = again or validation  # the step's last gate decision
            for r in latest:
                r.rationale = f"{LEARNER_RETRY} {tries}" + (f": {r.rationale}" if r.rationale else "")
            records += latest
            tries += 1
        stats = StepStats(
            step=step,
            epoch=epoch,
            batch=b,
            group_size=self.p.grpo_n,
            **_rollout_stats(rows),
            questions_added=added,
            groups_used=sum(o.used for o in outcomes),
            groups_skipped=sum(not o.used for o in outcomes),
            library_size=len(new_library.experiences),
            operations=_applied(records),
            operations_refused=sum(r.status == "refused" for r in records),
            learner_errors=len(failures),
            learner_tries=tries,
            operations_junk=sum(r.status == "refused" and (r.reason or "").startswith(JUNK) for r in records),
            usage=_usage_delta(usage_before, self.usage.snapshot()),
            wall_time=time.perf_counter() - start,
            validation=validation,
        )
        await self.store.save_step(step, epoch, b, new_library, records, failures, stats)
        log.info(
            "step %d: Mean@%d %.3f, library %d (+%d ops), %d learner errors",
            step,
            self.p.grpo_n,
            stats.mean_at_g,
            len(new_library.experiences),
            sum(stats.operations.values()),
            len(failures),
        )
        return stats, new_library

    async def groups(self, rows: list[EvaluationSample], library: Library) -> list[GroupOutcome]:
        """Rolls out and judges the G attempts of each question `rows` hold, not done yet, with `library`; each
        question's group goes to the learner as soon as it is judged (unless `pipeline` is off)."""
        groups: dict[int, list[EvaluationSample]] = defaultdict(list)
        for row in rows:
            groups[row.dataset_index].append(row)
        slots = asyncio.Semaphore(self.config.rollout_concurrency)
        issued = _IssueCount(sum(map(needs_rollout, rows)))

        async def attempt(row: EvaluationSample) -> None:
            await run_attempt(
                row,
                agent=self.agent,
                verifier=self.verifier,
                writer=self.writer,
                timeout=self.config.task_timeout,
                retries=self.config.evaluation.max_attempt_retries,
                experiences=library.experiences,
                slots=issued.counting(slots),
                temperature=self.p.rollout_temperature,
            )

        async def group_task(group_rows: list[EvaluationSample]) -> GroupOutcome | None:
            await gather_or_cancel(*(attempt(row) for row in group_rows))
            if not self.pipeline or any(r.stage == "init" for r in group_rows):  # (init: max_cost was spent)
                return None
            if self.updater.llm is self.agent.llm:  # one client: the step's rollouts take its slots first
                await issued.all.wait()
            return await self.updater.learn_from_group([_as_attempt(r) for r in group_rows], library)

        outcomes = await gather_or_cancel(*(group_task(g) for g in groups.values()))
        if any(row.stage == "init" for row in rows):  # attempts not started: the finished ones are saved
            self.usage.check_budget()
        if not self.pipeline:
            outcomes = await gather_or_cancel(
                *(self.updater.learn_from_group([_as_attempt(r) for r in g], library) for g in groups.values())
            )
        return outcomes

    def _retry(self, tries: int, latest: list[OpRecord]) -> bool:
        """Whether the learner compares the step's groups again: in its latest try it proposed changes and every
        one was refused, and retries and budget are left."""
        refused = bool(latest) and all(r.status == "refused" for r in latest)
        return refused and tries <= self.p.learner_retries and not self.usage.over_budget

    async def update(
        self,
        library: Library,
        rows: list[EvaluationSample],
        outcomes: list[GroupOutcome],
        failures: list[LearnerFailure],
        refused_before: Sequence[str] = (),
    ) -> tuple[Library, list[OpRecord], StepValidation | None]:
        """The step's update from the groups' outcomes: proposed, screened and, if the library changed, validated;
        a refused update leaves `library` as it was, or the part of it that passed alone (`one_by_one`). Its records
        say what became of each proposal. `refused_before`: texts refused in an earlier try of the step, refused
        again before validation."""
        new_library, records = await self.propose(library, rows, outcomes, failures, refused_before)
        validation = None
        if self.p.validation and new_library.experiences != library.experiences:
            validation = await self.validate(library, new_library)
            if not validation.accepted:
                new_library, validation = await self.one_by_one(library, new_library, records, validation)
        return new_library, records, validation

    async def one_by_one(
        self, current: Library, proposed: Library, records: list[OpRecord], refused: StepValidation
    ) -> tuple[Library, StepValidation]:
        """After the gate refused `proposed` whole: the experiences it adds validated alone against `current`, as
        many as the step has left of `validation.one_by_one` and the library has room for; those that pass are kept
        together if together they pass, else the one that gained most. Its UPDATEs and DELETEs stay refused with
        the whole (alone, a rewrite or a deletion passes on a tie). A right rule refused beside trivial ones was
        lost that way (docs/results.md). Returns the library kept and the validation that decided; marks each
        record with what became of it."""
        changes = [r for r in records if r.status == "applied"]
        cap = self.p.max_experiences
        # no room when an initial library is already over the cap
        room = len(changes) if cap is None else max(0, cap - len(current.experiences))
        adds = [r for r in changes if r.kind == "ADD"][: min(self.alone_left, room)] if len(changes) > 1 else []
        self.alone_left -= len(adds)
        for r in changes:
            if not any(r is a for a in adds):
                r.status, r.reason = "refused", GATE_REFUSED + refused.reason
        passed: list[tuple[OpRecord, StepValidation]] = []
        for r in adds:
            alone = await self.validate(current, with_additions(current, [r], proposed.next_id))
            if alone.accepted:
                passed.append((r, alone))
            else:
                r.status, r.reason = "refused", GATE_ALONE + alone.reason
        if not passed:
            return current, refused
        kept, decided = [passed[0][0]], passed[0][1]
        if len(passed) > 1:
            together = await self.validate(current, with_additions(current, [r for r, _ in passed], proposed.next_id))
            if together.accepted:
                kept, decided = [r for r, _ in passed], together
            else:
                best, decided = max(passed, key=lambda p: p[1].difference)
                kept = [best]
                for r, _ in passed:
                    if r is not best:
                        r.status, r.reason = (
                            "refused",
                            f"{GATE_REFUSED}passed alone, not with the others: {together.reason}",
                        )
        how = f"kept {len(kept)} of {len(adds)} additions tried alone; the whole update: {refused.difference:+.3f}"
        decided = decided.model_copy(update={"reason": f"{decided.reason}; {how}"})
        return with_additions(current, kept, proposed.next_id), decided

    async def propose(
        self,
        library: Library,
        rows: list[EvaluationSample],
        outcomes: list[GroupOutcome],
        failures: list[LearnerFailure],
        refused_before: Sequence[str] = (),
    ) -> tuple[Library, list[OpRecord]]:
        """Stages 4 and 5 on the groups' outcomes, then the screening: the step's operations applied to a copy of
        `library` (before validation). Learner failures are appended to `failures`."""
        proposed = await self.updater.consolidate(library, outcomes, failures)
        questions = _step_questions(rows)
        screen_step, story_check = _screen_against(
            questions, self.p.screening, self.p.given_ground_truth, refused_before
        )
        proposed = await self.updater.restate(proposed, story_check, questions, failures)
        return apply_operations(library, proposed, self.p.max_experiences, screen_step)

    async def _check_step(self, step: int, rows, outcomes: list[GroupOutcome], failures: list[LearnerFailure]) -> None:
        """Refuse to record a step whose rollouts failed (beyond the allowed share) or whose learner failed on
        every group it studied (every pass of it; a pass that answered with no proposal is not a failure): the step
        stays undone, and rerunning retries it."""
        check_attempts(rows, self.config.evaluation.max_failed_share, f"step {step}")
        if learner_failed_everywhere(outcomes):
            await self.store.record_failures(step, failures)
            raise RunFailed(
                f"step {step}: the learner failed on all {sum(o.used for o in outcomes)} groups it studied; "
                f"first error: {failures[0].error}; {RERUN}"
            )

    async def validate(self, current: Library, proposed: Library) -> StepValidation:
        """Both libraries on the same validation questions; the rule of `practice.validation` decides."""
        v = self.p.validation
        with span("validation", CHAIN, **{"questions": v.size, "pass_k": v.pass_k}):
            before = await self._validation_rows(current)
            after = await self._validation_rows(proposed)
        result = compare(before, after)
        current_mean = statistics.fmean(a for _, a, _ in result.rows) if result.rows else 0.0
        accepted, rule = gate(result.mean_diff, len(current.experiences), len(proposed.experiences), v)
        difference = round(result.mean_diff, 9)
        reason = (
            f"Mean@{v.pass_k} {current_mean:.3f} -> {current_mean + difference:.3f} on {len(result.rows)} "
            f"validation questions (paired difference {difference:+.3f}, {rule})"
        )
        log.info("validation: %s: update %s", reason, "applied" if accepted else "rejected")
        return StepValidation(
            k=v.pass_k,
            questions=len(result.rows),
            current=current_mean,
            proposed=current_mean + difference,
            difference=difference,
            difference_ci95=result.ci95,
            accepted=accepted,
            reason=reason,
        )

    async def _validation_rows(self, library: Library) -> list[ScoredAttempt]:
        """A library's attempts at the validation questions, kept under an exp_id named by its content, so the
        current library (usually the last step's proposal) is never evaluated twice."""
        v = self.p.validation
        digest = hashlib.sha256(json.dumps(sorted(library.experiences.items())).encode()).hexdigest()[:12]
        config = self.config.evaluation.model_copy(
            update={
                "exp_id": f"{self.config.exp_id}{VALIDATION_INFIX}{digest}",
                "pass_k": v.pass_k,
                "data": DataConfig(dataset=v.dataset, offset=v.offset, limit=v.size),
            }
        )
        runner = EvalRunner(
            config,
            self.db,
            self.agent,
            self.verifier,
            show_progress=False,
            experiences=library.experiences,
            owner=self.config.exp_id,
            tag="validation",
        )
        await runner.prepare()
        await runner.run()
        rows = await runner.rows()
        check_attempts(rows, self.config.evaluation.max_failed_share, "validation")
        return [ScoredAttempt.from_row(r) for r in rows]

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
        runner = EvalRunner(
            config,
            self.db,
            self.agent,
            self.verifier,
            show_progress=False,
            experiences=library.experiences,
            owner=self.config.exp_id,
        )
        await runner.prepare()
        await runner.run()
        metrics = compute_metrics((ScoredAttempt.from_row(r) for r in await runner.rows()), config.pass_k)
        return StepEval(
            exp_id=config.exp_id, k=metrics.k, mean_at_k=metrics.mean_at_k, mean_at_k_ci95=metrics.mean_at_k_ci95
        )


# The operation log's marks: the rationale of a second look's proposals, the reason of an update the gate refused.
LEARNER_RETRY = "learner retry"
GATE_REFUSED = "validation: "
GATE_ALONE = GATE_REFUSED + "alone, "  # a change validated on its own (`validation.one_by_one`)


def refusals_for_learner(records: list[OpRecord], answers_shown: bool) -> list[str]:
    """The step's refused proposals, each with why, for the learner's second look. A text proposed twice is shown
    once, with its first reason (later copies were refused as its repeats). A learner practising without the
    ground truth is not shown a text refused for giving its question's answer: that would tell it the answer."""
    why: dict[str, str] = {}
    for r in records:
        if r.status != "refused" or not r.new_text or r.new_text in why:
            continue
        why[r.new_text] = _for_learner(r.reason or "")
    return [f"{text} (refused: {reason})" for text, reason in why.items() if answers_shown or reason != ANSWER_REFUSED]


# The config knob or word list a screening reason names: for the user, not the learner.
_KNOB_NOTE = re.compile(r"\s*\([^()]*(?:practice\.|\.yaml)[^()]*\)")


def _for_learner(reason: str) -> str:
    if reason.startswith(GATE_ALONE):
        return "it did not raise the agent's score on the validation questions enough"
    if reason.startswith(GATE_REFUSED):  # the gate judges a step's update as a whole
        return "the update it was part of did not raise the agent's score on the validation questions enough"
    reason = reason.removeprefix(JUNK)
    if reason.startswith(ANSWER_REFUSED):
        return ANSWER_REFUSED  # not the answer itself: a learner practising without the ground truth never sees it
    if reason.startswith(REFUSED_AGAIN):
        return REFUSED_AGAIN  # not the earlier text it quotes, which may be one not shown (its answer)
    return _KNOB_NOTE.sub("", reason) or "refused"


REFUSED_AGAIN = "proposed again after its refusal earlier in this step"


def refused_for_what_they_say(records: list[OpRecord]) -> list[str]:
    """The texts of one try's update refused for what they say: by the screening (not for repeating what the
    library or the update already held), or by the gate as the update's only text or alone. Not a text the gate
    refused with others (it may be the good one of them), nor one refused for the library's state or another
    operation (library full; a DELETE of the same id), which may pass alone or as an UPDATE."""
    gated = [r for r in records if (r.reason or "").startswith(GATE_REFUSED)]  # the update's operations
    said = []
    for r in records:
        reason = r.reason or ""
        for_the_text = (reason.startswith(JUNK) and EXISTING not in reason) or reason.startswith(GATE_ALONE)
        if r.status == "refused" and r.new_text and (for_the_text or gated == [r]):
            said.append(r.new_text)
    return said


def refused_again(text: str, refused_before: Sequence[str], config: ScreeningConfig) -> str | None:
    """Why a second look's proposal is refused without validation: it repeats a text refused earlier in its step
    for what it says (`refused_for_what_they_say`), word for word or, with the screening on, nearly. The small
    learner, shown its refusals, has proposed one again word for word; a fresh sample, too, can repeat itself."""
    for earlier in refused_before:
        if text == earlier or (config.enabled and similarity(text, earlier) >= config.near_duplicate):
            return f"{REFUSED_AGAIN} ({earlier[:60]!r})"
    return None


def learner_failed_everywhere(outcomes: list[GroupOutcome]) -> bool:
    """Whether the learner failed on every group it studied, in every pass: a pass that answered with no proposal
    found nothing, which is not a failure."""
    studied = [o for o in outcomes if o.used]
    return bool(studied) and all(o.failures and not o.proposed and not o.answered for o in studied)


def gate(mean_diff: float, size_before: int, size_after: int, v: ValidationConfig) -> tuple[bool, str]:
    """Whether a proposed library replaces the current one, and the rule that decided. The difference is
    rounded first: a mean of per-question differences at K=3 leaves a tie as +-5e-17."""
    difference = round(mean_diff, 9)
    if size_after > size_before and v.min_gain_to_grow is not None:
        rule = f"{size_before} -> {size_after} experiences must gain more than {v.min_gain_to_grow:g}"
        return difference >= -v.max_drop and difference > v.min_gain_to_grow, rule
    return difference >= -v.max_drop, f"allowed drop {v.max_drop:g}"


def groups_with_contrast(rows: list[EvaluationSample]) -> int:
    """Questions whose judged attempts did not all score the same: the groups a learner can compare."""
    rewards: dict[int, set] = defaultdict(set)
    for r in rows:
        if r.stage == "judged":
            rewards[r.dataset_index].add(r.reward)
    return sum(len(seen) > 1 for seen in rewards.values())


def _step_questions(rows: list[EvaluationSample]) -> dict[int, Question]:
    return {r.dataset_index: Question(r.raw_question or "", r.correct_answer) for r in rows}


def _screen_against(
    questions: dict[int, Question], config: ScreeningConfig, answers_shown: bool, refused_before: Sequence[str] = ()
) -> tuple[Screen, StoryCheck]:
    """The library's screening of a proposal against its step's questions: none of their particulars, and not
    the answer of the questions it was learned from (all the step's when a consolidation lost that record), nor
    a text refused earlier in the step; and whether a refusal is only for its question's story, which the learner
    may restate. `answers_shown`: whether the learner saw the answers; if not, no refusal it reads names one."""
    step = list(questions.values())
    unanswered = Source([Question(q.text) for q in step])

    def source(sources: list[int]) -> Source:
        return Source(step, [questions[i] for i in sources if i in questions] or None)

    def check(text: str, sources: list[int], others: list[str]) -> str | None:
        return screen(text, source(sources), others, config) or refused_again(text, refused_before, config)

    def story_check(text: str, sources: list[int]) -> str | None:
        return tells_its_story(text, source(sources) if answers_shown else unanswered, config)

    return check, story_check


def _as_attempt(row: EvaluationSample) -> GroupAttempt:
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
    )


def _rollout_stats(rows: list[EvaluationSample]) -> dict[str, Any]:
    """Mean@G and Pass@G of a step's attempts (the same definition as evaluation's)."""
    by_question: dict[int, list[ScoredAttempt]] = defaultdict(list)
    for r in rows:
        by_question[r.dataset_index].append(ScoredAttempt.from_row(r))
    means, pass_share = mean_and_pass(by_question.values())
    return {
        "questions": len(by_question),
        "attempts": len(rows),
        "attempts_failed": sum(r.stage == "failed" for r in rows),
        "mean_at_g": statistics.fmean(means) if means else 0.0,
        "pass_at_g": pass_share,
        "tools": tool_stats(a for group in by_question.values() for a in group),
    }


def _applied(records: list[OpRecord]) -> dict[str, int]:
    """Applied operations by kind."""
    return {
        kind: sum(r.status == "applied" and r.kind == kind for r in records) for kind in ("ADD", "UPDATE", "DELETE")
    }


def _usage_delta(before: dict[str, Usage], after: dict[str, Usage]) -> dict[str, StageUsage]:
    out = {}
    for tag, u in after.items():
        b = before.get(tag, Usage())
        if u.calls != b.calls:
            out[tag] = StageUsage(
                calls=u.calls - b.calls,
                prompt_tokens=u.prompt_tokens - b.prompt_tokens,
                completion_tokens=u.completion_tokens - b.completion_tokens,
                cost=u.cost - b.cost,
            )
    return out


class _IssueCount:
    """Counts a step's rollouts as they take a rollout slot; `all` is set when every one has."""

    def __init__(self, total: int):
        self.left = total
        self.all = asyncio.Event()
        if not total:
            self.all.set()

    @contextlib.asynccontextmanager
    async def counting(self, slots: asyncio.Semaphore):
        async with slots:
            self.left -= 1
            if self.left <= 0:
                self.all.set()
            yield
