"""What one practice step carries from stage to stage, its statistics, and the screening of its proposals against
its own questions."""

import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from utu.config.models import ScreeningConfig
from utu.db.models import EvaluationSample
from utu.eval.metrics import ScoredAttempt, has_contrast, mean_and_pass, tool_stats
from utu.llm.usage import Usage
from utu.practice.library import Library, OpRecord, Screen, StoryCheck
from utu.practice.outcomes import Refused
from utu.practice.retries import refused_again
from utu.practice.screening import Question, Source, tells_its_story, verdict
from utu.practice.types import GroupOutcome, LearnerFailure, StageUsage, StepStats, StepValidation


@dataclass
class Step:
    step: int
    epoch: int
    batch: int
    usage_before: dict[str, Usage]
    alone_left: int = 0  # validations of single additions left (`validation.one_by_one`)
    rows: list[EvaluationSample] = field(default_factory=list)
    outcomes: list[GroupOutcome] = field(default_factory=list)
    questions_added: int = 0  # from the reserve (`top_up`)
    failures: list[LearnerFailure] = field(default_factory=list)
    records: list[OpRecord] = field(default_factory=list)  # every try's
    latest: list[OpRecord] = field(default_factory=list)  # the latest try's
    refused_before: list[str] = field(default_factory=list)  # texts refused for what they say, earlier tries
    validation: StepValidation | None = None  # the step's last gate decision
    tries: int = 1
    started: float = field(default_factory=time.perf_counter)

    def learner_failures(self) -> None:
        """Collect the failures the learner recorded on the groups."""
        self.failures += [f for o in self.outcomes for f in o.failures]

    def stats(self, library: Library, usage_after: dict[str, Usage], group_size: int) -> StepStats:
        return StepStats(
            step=self.step,
            epoch=self.epoch,
            batch=self.batch,
            group_size=group_size,
            **_rollout_stats(self.rows),
            questions_added=self.questions_added,
            groups_used=sum(o.used for o in self.outcomes),
            groups_skipped=sum(not o.used for o in self.outcomes),
            groups_all_lost=sum(o.all_lost for o in self.outcomes),
            library_size=len(library.experiences),
            operations=_applied(self.records),
            operations_refused=sum(r.status == "refused" for r in self.records),
            learner_errors=len(self.failures),
            learner_tries=self.tries,
            operations_junk=sum(r.refusal is not None and r.refusal.kind.by_screening for r in self.records),
            usage=_usage_delta(self.usage_before, usage_after),
            wall_time=time.perf_counter() - self.started,
            validation=self.validation,
        )


def step_questions(rows: list[EvaluationSample]) -> dict[int, Question]:
    return {r.dataset_index: Question(r.raw_question or "", r.correct_answer) for r in rows}


def screen_against(
    questions: dict[int, Question], config: ScreeningConfig, answers_shown: bool, refused_before: Sequence[str] = ()
) -> tuple[Screen, StoryCheck]:
    """None of the questions' particulars, and not the answer of the questions a proposal was learned from (all
    the step's when a consolidation lost that record), nor a text refused earlier in the step. `answers_shown`:
    whether the learner saw the answers; if not, no refusal it reads names one."""
    step = list(questions.values())
    unanswered = Source([Question(q.text) for q in step])

    def source(sources: list[int]) -> Source:
        return Source(step, [questions[i] for i in sources if i in questions] or None)

    def check(text: str, sources: list[int], others: list[str]) -> Refused | None:
        return verdict(text, source(sources), others, config) or refused_again(text, refused_before, config)

    def story_check(text: str, sources: list[int]) -> str | None:
        return tells_its_story(text, source(sources) if answers_shown else unanswered, config)

    return check, story_check


def groups_with_contrast(rows: list[EvaluationSample]) -> int:
    """Questions whose judged attempts did not all score the same: the groups a learner can compare."""
    rewards: dict[int, list[float | None]] = defaultdict(list)
    for r in rows:
        if r.stage == "judged":
            rewards[r.dataset_index].append(r.reward)
    return sum(map(has_contrast, rewards.values()))


def learner_failed_everywhere(outcomes: list[GroupOutcome]) -> bool:
    """Whether the learner failed on every group it studied, in every pass: a pass that answered with no proposal
    found nothing, which is not a failure."""
    studied = [o for o in outcomes if o.used]
    return bool(studied) and all(o.failures and not o.proposed and not o.answered for o in studied)


def _rollout_stats(rows: list[EvaluationSample]) -> dict[str, Any]:
    """Mean@G and Pass@G of a step's attempts (the same definition as evaluation's)."""
    attempts = [ScoredAttempt.from_row(r) for r in rows]
    by_question: dict[int, list[ScoredAttempt]] = defaultdict(list)
    for r, attempt in zip(rows, attempts, strict=True):
        by_question[r.dataset_index].append(attempt)
    means, pass_share = mean_and_pass(by_question.values())
    return {
        "questions": len(by_question),
        "attempts": len(rows),
        "attempts_failed": sum(r.stage == "failed" for r in rows),
        "verifier_errors": sum(a.verify_error for a in attempts),
        "replies_empty": sum(a.empty for a in attempts),
        "mean_at_g": statistics.fmean(means) if means else 0.0,
        "pass_at_g": pass_share,
        "tools": tool_stats(attempts),
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
