"""The plan a practice says at its start: rollouts exactly, the rest as bounds (the runs that check the bounds held
are in test_validation.py and test_practice.py)."""

from utu.config import load_config
from utu.config.models import TrainingFreeGRPOConfig
from utu.practice.plan import practice_plan


def config(*overrides: str) -> TrainingFreeGRPOConfig:
    return load_config("practice", "local_mawps", TrainingFreeGRPOConfig, list(overrides))  # batch 4, G=3


def test_rollouts_are_every_question_of_every_epoch_g_times_and_a_last_short_batch_is_a_step():
    plan = practice_plan(config("practice.epochs=2"), questions=10)
    assert (plan.steps, plan.rollouts, plan.most) == (2 * 3, 2 * 10 * 3, 2 * 10 * 3)
    said = plan.describe()
    assert said.startswith("plan: 6 steps, at most 60 agent attempts (60 rollouts), each run again up to 2 times if")
    assert (
        practice_plan(config("evaluation.max_attempt_retries=0"), 4)
        .describe()
        .startswith("plan: 1 step, at most 12 agent attempts (12 rollouts); an attempt with tools")
    )
    assert practice_plan(config(), 8, saved=1).describe().endswith("a turn; 1 of the steps are saved, not spent again")


def test_top_up_is_bounded_by_the_reserve_and_by_what_the_steps_may_take():
    top_up = ("+practice.top_up.min_groups=2", "+practice.top_up.questions=2")
    assert practice_plan(config(*top_up), questions=8, reserve=100).top_up == 2 * 2 * 3  # 2 steps x 2 questions x G
    assert practice_plan(config(*top_up), questions=8, reserve=3).top_up == 3 * 3  # the reserve holds 3


def test_validation_bounds_every_library_the_gate_may_try():
    gate = ("+practice.validation.dataset=MAWPS_addsub", "+practice.validation.pass_k=2", "practice.learner_retries=0")
    plain = practice_plan(config(*gate), questions=8, validation_questions=16)
    assert plain.validation == 2 * (1 + 1) * 16 * 2  # 2 steps x (the current library, the update) x 16 x K
    retried = practice_plan(config(*gate[:2], "practice.learner_retries=2"), 8, validation_questions=16)
    assert retried.validation == 2 * (1 + 3) * 16 * 2  # an update a try
    one = practice_plan(config(*gate, "+practice.validation.one_by_one=1"), 8, validation_questions=16)
    assert one.validation == 2 * (1 + 1 + 1) * 16 * 2  # one addition alone: nothing to put together
    tried = practice_plan(
        config(*gate[:2], "+practice.validation.one_by_one=3", "practice.learner_retries=1"), 8, validation_questions=16
    )
    assert tried.validation == 2 * (1 + 2 + 3 + 1) * 16 * 2  # two tries, three additions alone, those together
    assert "up to 448 validation attempts" in tried.describe()


def test_in_step_evaluations_are_counted_by_their_strategy():
    on = ("practice.do_eval=true", "evaluation.pass_k=2")
    by_epoch = practice_plan(config(*on, "practice.epochs=3"), questions=8, eval_questions=10)
    assert by_epoch.in_step_eval == 3 * 10 * 2
    every_3 = practice_plan(config(*on, "practice.eval_strategy=steps", "practice.eval_steps=3"), 28, eval_questions=10)
    assert every_3.in_step_eval == (7 // 3) * 10 * 2  # after steps 2 and 5 of 0-6
    assert "up to 40 in-step evaluation attempts" in every_3.describe()
