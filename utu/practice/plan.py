"""What a practice will spend on its agent, said before it spends it: attempts by purpose, the rollouts exactly and
the rest as bounds (what the gate tries depends on what the learner proposes). A user of a paid endpoint reads it
at the start and stops there if it is more than they meant; `max_cost` caps the dollars either way."""

from dataclasses import dataclass

from utu.config.models import TrainingFreeGRPOConfig
from utu.practice.data_manager import PracticeData


@dataclass(frozen=True)
class PracticePlan:
    steps: int
    rollouts: int  # exactly: every practice question of every epoch, G times
    top_up: int  # at most: the reserve's questions, G times, on steps with too little contrast
    validation: int  # at most: every library the gate may try, each on the validation questions K times
    in_step_eval: int  # exactly: each in-step evaluation of the eval set (`do_eval`)

    @property
    def most(self) -> int:
        return self.rollouts + self.top_up + self.validation + self.in_step_eval

    def describe(self) -> str:
        parts = [f"{self.rollouts:,} rollouts"]
        parts += [f"up to {self.top_up:,} top-up rollouts"] if self.top_up else []
        parts += [f"up to {self.validation:,} validation attempts"] if self.validation else []
        parts += [f"{self.in_step_eval:,} in-step evaluation attempts"] if self.in_step_eval else []
        steps = f"{self.steps} step{'s' * (self.steps != 1)}"
        return (
            f"plan: {steps}, at most {self.most:,} agent attempts ({', '.join(parts)}; an attempt with tools makes a "
            "model call a turn); steps already saved are reused"
        )


def practice_plan(
    config: TrainingFreeGRPOConfig,
    questions: int,
    reserve: int = 0,
    validation_questions: int = 0,
    eval_questions: int = 0,
) -> PracticePlan:
    """The plan of a practice of `questions` practice questions, `reserve` top-up questions, and validation and
    in-step evaluation sets of those sizes (as selected: a set smaller than its size is counted as it is)."""
    p = config.practice
    per_epoch = PracticeData.batch_count(questions, p.batch_size)
    steps = p.epochs * per_epoch
    top_up = min(reserve, steps * p.top_up.questions) * p.grpo_n if p.top_up else 0
    validation = 0
    if p.validation:
        # Per step: the current library (once: its attempts are kept and reused by content), and in each of the
        # learner's tries the whole update and, when several additions passed alone, them together; the additions
        # tried alone are `one_by_one` per step, over all its tries.
        tries = 1 + p.learner_retries
        libraries = 1 + 2 * tries + (p.validation.one_by_one or 0)
        validation = steps * libraries * validation_questions * p.validation.pass_k
    evaluations = 0
    if p.do_eval:
        evaluations = p.epochs if p.eval_strategy == "epoch" else steps // p.eval_steps
    in_step_eval = evaluations * eval_questions * config.evaluation.pass_k
    return PracticePlan(steps, p.epochs * questions * p.grpo_n, top_up, validation, in_step_eval)
