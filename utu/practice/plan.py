"""What a practice will spend on its agent, said before it spends it (and alone with `--plan`): attempts by purpose
for a run from its start, the rollouts exactly and the rest as bounds (what the gate tries depends on what the
learner proposes), and how many of its steps are saved (a rerun does not spend them again). A failed or timed-out
attempt is run again, up to `max_attempt_retries` times: those reruns are not in the counts. `max_cost` caps the
dollars either way."""

from dataclasses import dataclass

from utu.config.models import TrainingFreeGRPOConfig
from utu.practice.data_manager import PracticeData


@dataclass(frozen=True)
class PracticePlan:
    steps: int
    rollouts: int  # exactly: every practice question of every epoch, G times
    top_up: int  # at most: the reserve's questions, G times, on steps with too little contrast
    validation: int  # at most: every library the gate may try, each on the validation questions K times
    in_step_eval: int  # at most (a run stopped early makes fewer): each evaluation of the eval set (`do_eval`)
    reruns: int  # how many times a failed attempt is run again (`max_attempt_retries`), not counted above
    saved: int = 0  # steps already recorded, which a rerun reuses: not spent again

    @property
    def most(self) -> int:
        return self.rollouts + self.top_up + self.validation + self.in_step_eval

    def describe(self) -> str:
        parts = [f"{self.rollouts:,} rollouts"]
        parts += [f"up to {self.top_up:,} top-up rollouts"] if self.top_up else []
        parts += [f"up to {self.validation:,} validation attempts"] if self.validation else []
        parts += [f"up to {self.in_step_eval:,} in-step evaluation attempts"] if self.in_step_eval else []
        steps = f"{self.steps} step{'s' * (self.steps != 1)}"
        reruns = f", each run again up to {self.reruns} times if it fails" if self.reruns else ""
        saved = f"; {self.saved} of the steps are saved, not spent again" if self.saved else ""
        return (
            f"plan: {steps}, at most {self.most:,} agent attempts ({', '.join(parts)}){reruns}; an attempt with "
            f"tools makes a model call a turn{saved}"
        )


def planned_steps(config: TrainingFreeGRPOConfig, questions: int) -> int:
    """The steps a practice of `questions` practice questions runs, over all its epochs."""
    return config.practice.epochs * PracticeData.batch_count(questions, config.practice.batch_size)


def practice_plan(
    config: TrainingFreeGRPOConfig,
    questions: int,
    reserve: int = 0,
    validation_questions: int = 0,
    eval_questions: int = 0,
    saved: int = 0,
) -> PracticePlan:
    """The plan of a practice of `questions` practice questions, `reserve` top-up questions, and validation and
    in-step evaluation sets of those sizes (as selected: a set smaller than its size is counted as it is), from its
    start; `saved`: its steps already recorded."""
    p = config.practice
    steps = planned_steps(config, questions)
    top_up = min(reserve, steps * p.top_up.questions) * p.grpo_n if p.top_up else 0
    validation = 0
    if p.validation:
        # Per step: the current library (its judged attempts are kept by content and reused, so at most once),
        # each learner try's whole update (a try after the first only when every proposal was refused), up to
        # `one_by_one` additions alone over all the tries, and once those that passed alone together (two at
        # least; then something is kept, so no try follows).
        alone = p.validation.one_by_one or 0
        libraries = 1 + (1 + p.learner_retries) + alone + (alone >= 2)
        validation = steps * libraries * validation_questions * p.validation.pass_k
    evaluations = 0
    if p.do_eval:
        evaluations = p.epochs if p.eval_strategy == "epoch" else steps // p.eval_steps
    in_step_eval = evaluations * eval_questions * config.evaluation.pass_k
    reruns = config.evaluation.max_attempt_retries
    return PracticePlan(steps, p.epochs * questions * p.grpo_n, top_up, validation, in_step_eval, reruns, saved)
