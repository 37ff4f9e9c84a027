"""What the practice modules hand each other: the learner's view of an attempt and of a group's outcome, and
the statistics of a step."""

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from utu.eval.metrics import ToolStats
from utu.practice.library import Operation, ProposedOp


class GroupAttempt(BaseModel):
    """One judged attempt, as the learner sees it."""

    dataset_index: int
    question: str
    answer: str | None
    response: str | None
    trajectory: list[dict[str, Any]]
    reward: float | None  # None: the attempt failed (no response)
    critique: str | None = None
    tools: list[dict[str, Any]] = []  # the agent's tool log: {"tool", "arguments_chars", "seconds", "error"}
    cut: bool = False  # its final reply was cut by the agent's token limit (stop reason max_tokens)
    verifier_failed: bool = False  # its reward is the verifier's timeout score, not a verdict


class LearnerFailure(BaseModel):
    """A learner call that stayed invalid after its retry: recorded, and the step goes on without it."""

    stage: str
    dataset_index: int | None
    error: str
    raw_reply: str | None = None


class GroupOutcome(BaseModel):
    """What the learner made of one question's group: skipped (and why), or studied, with its proposals."""

    dataset_index: int
    used: bool
    skip_reason: str | None = None
    all_lost: bool = False  # studied though every attempt lost (`practice.all_lost_groups_per_step`)
    proposed: list[ProposedOp] = []
    failures: list[LearnerFailure] = []
    # The summarised attempts (stage 1) the proposals came from, so the learner can compare them again.
    studied: list[tuple[GroupAttempt, str]] = Field(default=[], exclude=True)
    answered: bool = Field(default=False, exclude=True)  # a pass of stages 2-3 got valid replies (maybe no proposal)

    def add_pass(self, operations: list[Operation], failed_before: int) -> None:
        """One pass of stages 2-3 (`failed_before`: the failures recorded before it): its proposals, and whether
        it got valid replies."""
        self.proposed += [ProposedOp(op, [self.dataset_index]) for op in operations]
        self.answered |= len(self.failures) == failed_before


class StageUsage(BaseModel):
    """LLM use of one stage (rollout, learner.summary, ...) within a step."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float


class StepEval(BaseModel):
    """The current library evaluated on the eval set during practice (`do_eval`)."""

    exp_id: str
    k: int
    mean_at_k: float
    mean_at_k_ci95: tuple[float, float]


class StepValidation(BaseModel):
    """A step's proposed library against the current one on the validation questions (`practice.validation`)."""

    k: int
    questions: int
    current: float  # Mean@K of the current library
    proposed: float
    difference: float  # paired by question: proposed - current
    difference_ci95: tuple[float, float]
    accepted: bool
    reason: str


class StepStats(BaseModel):
    """What one practice step did. The group size is a field, never part of a key."""

    step: int
    epoch: int
    batch: int
    group_size: int  # G
    questions: int
    questions_added: int = 0  # of `questions`, from the reserve (`practice.top_up`)
    attempts: int
    attempts_failed: int
    verifier_errors: int = 0  # judged attempts whose verifier failed (each scored timeout_score)
    replies_empty: int = 0  # judged attempts whose final reply was empty (a verifier usually scores it wrong)
    mean_at_g: float  # Mean@G of the step's rollouts
    pass_at_g: float  # Pass@G: share of questions with a correct attempt
    tools: dict[str, ToolStats] = {}  # per tool: calls, errors, latency, reward with and without it
    groups_used: int
    groups_skipped: int
    groups_all_lost: int = 0  # of groups_used, studied though every attempt lost (`all_lost_groups_per_step`)
    library_size: int
    operations: dict[str, int]  # applied, by kind: ADD, UPDATE, DELETE
    operations_refused: int
    # of the refused: proposals the screening found to be junk (utu.practice.screening), a second look's repeat of
    # a text refused earlier in the step among them
    operations_junk: int = 0
    learner_errors: int
    learner_tries: int = 1  # 1 + the retries after every proposal was refused (`practice.learner_retries`)
    usage: dict[str, StageUsage]  # by stage tag
    wall_time: float
    eval: StepEval | None = None
    validation: StepValidation | None = None  # None: no validation, or the step proposed no change

    @property
    def score(self) -> float | None:
        """How good the library after this step is: its validation Mean@K, else its in-step eval's, else None."""
        if self.validation:
            return self.validation.proposed if self.validation.accepted else self.validation.current
        return self.eval.mean_at_k if self.eval else None

    @property
    def tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.usage.values())

    @property
    def cost(self) -> float:
        return sum(u.cost for u in self.usage.values())

    @property
    def groups(self) -> str:
        """Groups used/skipped, the questions the top-up added, and the all-lost groups studied, as the step
        tables show them."""
        return (
            f"{self.groups_used}/{self.groups_skipped}"
            + (f" (+{self.questions_added})" if self.questions_added else "")
            + (f", {self.groups_all_lost} all lost" if self.groups_all_lost else "")
        )


@dataclass
class TaskRecorder:
    """Youtu-Agent's record of a practice run (its utility of this name): the experiment, its library and
    statistics. utu keeps these in the database; a script of one's own may still collect them here."""

    experiment_name: str | None = None
    experiences: dict[str, str] | None = None
    stats: dict[str, Any] | None = None

    def experiences_update(self, experiences: dict[str, str]) -> None:
        self.experiences = experiences

    def stat_update(self, stat: dict[str, Any]) -> None:
        self.stats = (self.stats or {}) | stat
