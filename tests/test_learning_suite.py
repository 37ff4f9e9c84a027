"""The pre-registered learning suite (benchmarks/learning/suite.py): its data and its report's statistics."""

import argparse
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "learning"))
import suite  # noqa: E402
import suite_report  # noqa: E402


@pytest.fixture(autouse=True)
def no_suite_state_of_this_checkout(monkeypatch, tmp_path):
    """A checkout that fills the suite has its database and GEPA runs: no test reads them."""
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "no_suite.db")
    monkeypatch.setattr(suite, "GEPA_RUNS", tmp_path / "no_gepa_runs")


@pytest.mark.parametrize("task", list(suite.TASKS))
def test_no_heldout_question_is_a_practice_or_validation_problem(task):
    spec = suite.TASKS[task]
    rows = suite.suite_rows(task)
    assert len(rows) == suite.HELDOUT_OFFSET + suite.HELDOUT_SIZE
    seen = {spec.problem(r) for r in rows[: suite.HELDOUT_OFFSET]}
    heldout = [spec.problem(r) for r in rows[suite.HELDOUT_OFFSET :]]
    assert not seen & set(heldout) and len(set(heldout)) == len(heldout)
    assert all(r["answer"] not in (None, "") for r in rows)


def test_problems_are_told_apart_up_to_names_and_story_only():
    averages = suite.TASKS["averages"].problem
    same = averages({"question": "Tom scored 3, 7 and 8 points in three games."})
    assert same == averages({"question": "A shop sold 8, 3 and 7 umbrellas on three rainy days."})
    assert same != averages({"question": "Tom scored 3, 7 and 9 points in three games."})


def test_the_suite_tasks_are_generated_as_bundled_and_no_problem_repeats():
    sys.path.insert(0, str(ROOT / "scripts" / "data"))
    import make_suite_tasks

    for name in make_suite_tasks.TASKS:
        rows = list(make_suite_tasks.rows(name))
        bundled = [json.loads(line) for line in (ROOT / "dataset" / f"{name}.jsonl").read_text().splitlines()]
        assert rows == bundled
        assert len({tuple(r["meta"]["problem"]) for r in rows}) == len(rows) == make_suite_tasks.ROWS


def test_each_task_has_its_own_reference_a_placebo_for_another_habit_and_a_hinted_objective():
    for spec in suite.TASKS.values():
        assert spec.reference and spec.placebo not in spec.reference
        assert spec.hinted_objective != suite.NEUTRAL_LEARNING_OBJECTIVE


def test_the_neutral_objective_is_practice_s_default():
    from utu.config.models import PracticeArguments

    assert PracticeArguments.model_fields["learning_objective"].default == suite.NEUTRAL_LEARNING_OBJECTIVE


def test_the_plan_runs_practice_before_its_gepa_and_every_method_with_its_seeds():
    runs = suite.plan()
    assert len(runs) == len(set(runs))
    for task in suite.TASKS:
        for method, seeds in suite.METHODS.items():
            assert {s for t, m, s in runs if t == task and m == method} == set(seeds)
        for seed in suite.SEEDS:
            assert runs.index((task, "practice", seed)) < runs.index((task, "gepa", seed))
    # the goal's comparison first: every seed of practice and GEPA before any candidate or one-seed ablation
    last_goal_run = max(runs.index((t, m, s)) for t in suite.TASKS for m in ("practice", "gepa") for s in suite.SEEDS)
    assert all(runs.index(r) > last_goal_run for r in runs if r[1] not in ("practice", "gepa") and r[2] is not None)


def test_practice_as_the_guide_says_and_the_paper_s_algorithm_differ_only_in_the_additions():
    ours, paper = suite.practice_args("averages", "practice", 1), suite.practice_args("averages", "paper", 1)
    assert ours[ours.index("--learning_objective") + 1] == suite.NEUTRAL_LEARNING_OBJECTIVE
    assert "--validation_dataset" in ours and "--validation_dataset" not in paper
    assert paper[paper.index("--screening_enabled") + 1] == "false"
    hinted = suite.practice_args("averages", "hinted", 0)
    assert hinted[hinted.index("--learning_objective") + 1] == suite.TASKS["averages"].hinted_objective


def test_the_practice_commands_give_the_configs_they_claim(monkeypatch):
    """Each method's flags make the practice config (a typo would only show hours into a fill)."""
    from utu.practice.arguments import parse_training_free_grpo_config

    def config(method: str):
        monkeypatch.setattr(sys, "argv", ["run_training_free_GRPO.py", *suite.practice_args("elapsed_time", method, 2)])
        return parse_training_free_grpo_config()

    ours, paper = config("practice"), config("paper")
    for c in (ours, paper):
        assert c.data.practice_dataset_name == "suite_elapsed_time" and c.practice.seed == 2
        assert (c.practice.batch_size, c.practice.grpo_n, c.data.rollout_data_truncate) == (8, 4, 24)
        assert c.practice.learning_objective == suite.NEUTRAL_LEARNING_OBJECTIVE
    assert ours.practice.validation.size == 16 and ours.practice.validation.offset == 100
    assert ours.practice.top_up and ours.practice.learner_retries == 1 and ours.practice.screening.enabled
    assert paper.practice.validation is None and paper.practice.top_up is None
    assert not paper.practice.screening.enabled and not paper.practice.restate_refused
    assert paper.practice.learner_retries == 0 and paper.practice.max_experiences is None
    fewer, bar, no_gate = config("fewer_refusals"), config("lower_bar"), config("no_gate")
    assert fewer.practice.screening.object_repeats == 0 and not fewer.practice.screening.require_directive
    assert bar.practice.validation.min_gain_to_grow == 0.05
    assert no_gate.practice.validation is None
    all_lost = config("all_lost")
    assert all_lost.practice.all_lost_groups_per_step == 3 and ours.practice.all_lost_groups_per_step is None
    assert all_lost.model_dump(exclude={"practice": {"all_lost_groups_per_step"}}) == ours.model_dump(
        exclude={"practice": {"all_lost_groups_per_step"}}
    )
    for candidate in (fewer, bar, no_gate):  # practice as the guide says but for the one change
        assert candidate.practice.top_up == ours.practice.top_up and candidate.data == ours.data
        assert candidate.practice.learner_retries == ours.practice.learner_retries
    assert fewer.practice.validation == ours.practice.validation
    assert bar.practice.screening == ours.practice.screening == no_gate.practice.screening
    assert ours.model_dump(exclude={"practice"}) == no_gate.model_dump(exclude={"practice"})


def test_the_hierarchical_bootstrap_covers_a_known_gain_and_tells_it_from_none():
    rng = random.Random(1)
    questions = [str(i) for i in range(40)]
    baseline = {q: float(rng.random() < 0.3) for q in questions}
    helped = [{q: min(1.0, baseline[q] + (0.5 if i % 2 else 0.0)) for i, q in enumerate(questions)} for _ in range(3)]
    gain, ci = suite_report.gain_ci(helped, baseline, random.Random(0))
    assert ci[0] > 0 and ci[0] <= gain <= ci[1]
    same = [dict(baseline) for _ in range(3)]
    gain, ci = suite_report.gain_ci(same, baseline, random.Random(0))
    assert gain == 0 and ci == [0, 0]
    diff, ci = suite_report.bootstrap_ci(list(zip(helped, same, strict=True)), random.Random(0))
    assert diff > 0 and ci[0] > 0


def test_a_run_that_kept_nothing_counts_as_the_baseline_agent():
    baseline = {"200": 0.5, "201": 0.0}
    assert suite_report.per_question({"heldout_rewards": None, "kept_nothing": True}, baseline) == baseline
    assert suite_report.per_question({"heldout_rewards": {"200": [1.0, 0.0]}}, baseline) == {"200": 0.5}
    # a run that kept something and has no held-out rewards is an error, never the baseline's scores
    with pytest.raises(SystemExit, match="averages practice seed 1: no held-out rewards"):
        suite_report.per_question({"task": "averages", "method": "practice", "seed": 1}, baseline)


def test_the_suite_mean_weighs_tasks_equally_and_its_interval_covers_it():
    questions = [str(i) for i in range(30)]
    zero = {q: 0.0 for q in questions}
    helped = {q: 1.0 for q in questions}  # +1 on one task, 0 on the other: the suite mean is 0.5
    tasks = {
        "a": {"_scores": {"baseline": zero, "practice": {0: helped, 1: helped}}},
        "b": {"_scores": {"baseline": zero, "practice": {0: zero, 1: zero}}},
    }
    result = suite_report.suite_mean(tasks, "practice")
    assert result["tasks"] == ["a", "b"] and result["mean"] == 0.5 and result["ci95"] == [0.5, 0.5]
    assert suite_report.suite_mean(tasks, "gepa") is None


def test_each_candidate_runs_on_practice_s_seeds_after_practice_and_is_compared_with_the_same_seed():
    runs = suite.plan()
    for task in suite.TASKS:
        for name in suite.CANDIDATES:
            assert name not in suite.METHODS
            assert {s for t, m, s in runs if t == task and m == name} == set(suite.SEEDS)
            for seed in suite.SEEDS:
                assert runs.index((task, "practice", seed)) < runs.index((task, name, seed))
    questions = [str(i) for i in range(20)]
    zero, one = dict.fromkeys(questions, 0.0), dict.fromkeys(questions, 1.0)
    # the candidate has seed 1 only: it is compared with practice's seed 1 (all right), not seed 0 (all wrong)
    seeded = {"practice": {0: zero, 1: one}, "fewer_refusals": {1: one}}
    assert suite_report.seed_pairs(seeded, "fewer_refusals", "practice") == [(one, one)]
    tasks = {"a": {"_scores": {"baseline": zero, **seeded}}}
    result = suite_report.suite_difference(tasks, "fewer_refusals", "practice")
    assert result == {"tasks": ["a"], "seeds": 1, "most_seeds": 1, "mean": 0.0, "ci95": [0.0, 0.0]}


def test_the_tables_show_each_task_s_gains_and_the_suite_mean_over_the_tasks_it_has():
    report = {
        "suite": {
            "practice": {
                "tasks": ["averages", "gsm8k"],
                "seeds": 2,
                "most_seeds": 3,
                "mean": 0.5,
                "ci95": [0.25, 0.75],
            },
            "gepa": None,
            "practice_minus_gepa": None,
            **{f"{c}_minus_{other}": None for c in suite.CANDIDATES for other in ("practice", "gepa")},
            "no_gate_minus_gepa": {"tasks": ["averages"], "seeds": 1, "mean": -0.25, "ci95": [-0.5, 0.0]},
        },
        "tasks": {
            "averages": {
                "baseline": 0.25,
                "methods": {
                    "reference": {"method": "reference", "gain": 0.125, "kept_nothing": False},
                    "practice_s0": {"method": "practice", "seed": 0, "kept_nothing": False, "agent_calls": 300},
                    "practice_s1": {"method": "practice", "seed": 1, "kept_nothing": True, "agent_calls": 100},
                    "paper_s0": {"method": "paper", "seed": 0, "gain": 0.0, "kept_nothing": True, "agent_calls": 96},
                    "no_gate_s0": {"method": "no_gate", "seed": 0, "kept_nothing": False, "agent_calls": 112},
                    # a run with no count of its calls is left out of the mean, not a crash
                    "gepa_s0": {"method": "gepa", "seed": 0, "kept_nothing": False, "agent_calls": None},
                },
                "practice_gain": {"seeds": 2, "mean": 0.5, "ci95": [0.25, 0.75]},
                "no_gate_minus_practice": {"seeds": 1, "mean": 0.0, "ci95": [-0.125, 0.125]},
            }
        },
    }
    lines = suite_report.markdown(report).splitlines()
    row = next(line for line in lines if line.startswith("| Averages | 0.250 |"))
    assert row == (
        "| Averages | 0.250 | +0.125 | – | +0.500 (+0.250 to +0.750), 2 seeds, kept nothing in 1 | – | – | 200 / – |"
    )
    # the fewest and the most seeds a task has, while the suite fills
    assert "| **suite mean** | | | | +0.500 (+0.250 to +0.750), 2–3 seeds, 2 tasks | – | – | |" in lines
    ablations = next(line for line in lines if line.startswith("| Averages | – | +0.000 (kept nothing) |"))
    cells = [cell.strip() for cell in ablations.strip("|").split("|")]
    # a candidate's calls beside practice's on the same seeds (seed 0: 300, not the mean of 300 and 100)
    assert cells[3 + list(suite.CANDIDATES).index("no_gate")] == "+0.000 (-0.125 to +0.125), 1 seed; 112 vs 300 calls"
    versus_gepa = next(
        line for line in lines if line.startswith("| **suite mean, candidate − GEPA at practice's budget** |")
    )
    cells = [cell.strip() for cell in versus_gepa.strip("|").split("|")]
    assert cells[1 + 2 + list(suite.CANDIDATES).index("no_gate")] == "-0.250 (-0.500 to +0.000), 1 seed, 1 task"


def test_a_gepa_run_s_agent_calls_are_the_larger_of_gepa_s_count_and_ours():
    # the suite's first GEPA runs: ours counted one sitting only; GEPA's missed a resume past its end
    assert suite_report.agent_calls({"metric_calls": 416, "agent_calls": 98}) == 416
    assert suite_report.agent_calls({"metric_calls": 389, "agent_calls": 406}) == 406
    assert suite_report.agent_calls({"agent_calls": 300}) == 300
    assert suite_report.agent_calls({}) is None


def test_gepa_that_kept_its_seed_prompt_counts_as_the_baseline_agent_as_practice_that_kept_nothing():
    baseline = {"200": 0.5, "201": 0.0}
    rewards = {"200": [1.0, 1.0], "201": [1.0, 0.0]}
    rerun = {"method": "gepa", "best_prompt": "Solve it.", "seed_prompt": "Solve it.", "heldout_rewards": rewards}
    assert suite_report.per_question(rerun, baseline) == baseline
    assert suite_report.per_question({**rerun, "seed_prompt": "Solve."}, baseline) == {"200": 1, "201": 0.5}
    # the first runs saved no seed prompt: theirs is pinned, whatever today's agent config says
    first = {"method": "gepa", "best_prompt": suite_report.FIRST_RUNS_SEED_PROMPT, "heldout_rewards": rewards}
    assert suite_report.per_question(first, baseline) == baseline
    assert suite_report.per_question({**first, "best_prompt": "Solve it."}, baseline) == {"200": 1, "201": 0.5}
    at_commit = subprocess.run(
        ["git", "-C", str(ROOT), "show", "d84f032:configs/agents/practice/local_math_agent.yaml"],
        capture_output=True,
        text=True,
    )
    if at_commit.returncode != 0:
        pytest.skip(f"no history to read the pinned prompt's commit from (a shallow clone?): {at_commit.stderr}")
    assert yaml.safe_load(at_commit.stdout)["instructions"] == suite_report.FIRST_RUNS_SEED_PROMPT


def test_a_gepa_run_past_its_budget_says_by_how_many_calls():
    assert suite_report.over_budget({"budget_agent_calls": 288, "metric_calls": 309, "agent_calls": 357}) == 69
    assert suite_report.over_budget({"agent_calls": 300}) is None  # practice: no budget


def test_the_seeds_spread_widens_the_interval_and_one_seed_gives_the_questions_alone():
    questions = [str(i) for i in range(40)]
    zero = dict.fromkeys(questions, 0.0)
    # three seeds that gained 0, 0.5 and 1 on every question: the spread is the seeds' alone
    runs = [dict.fromkeys(questions, g) for g in (0.0, 0.5, 1.0)]
    gain, ci = suite_report.gain_ci(runs, zero, random.Random(0))
    # a draw of three seeds all 0 (1 in 27, above the 2.5% tail) sets the ends: a task's seeds are widened by
    # sqrt(3/2) t(2)/z; a suite of one task is that task
    widest = 0.5 * math.sqrt(3 / 2) * 4.303 / 1.96
    assert gain == 0.5 and ci == pytest.approx([0.5 - widest, 0.5 + widest])
    suite_wide = suite_report.suite_mean(
        {"a": {"_scores": {"baseline": zero, "practice": dict(enumerate(runs))}}}, "practice"
    )
    assert suite_wide["ci95"] == pytest.approx(ci)
    assert suite_report.t_widened(3, 10) == pytest.approx(math.sqrt(3 / 2) * 2.228 / 1.96)
    assert suite_report.t975(12) == 2.228 and suite_report.t975(100) == 2.086  # the next degree below: wider
    gain, ci = suite_report.gain_ci(runs[1:2], zero, random.Random(0))
    assert gain == 0.5 and ci == [0.5, 0.5]  # one seed, no question spread: nothing to resample


def test_the_suite_s_seed_degrees_of_freedom_are_welch_satterthwaite_s_not_the_tasks_sum(monkeypatch):
    questions = [str(i) for i in range(10)]
    zero = dict.fromkeys(questions, 0.0)
    spread = [(dict.fromkeys(questions, g), zero) for g in (0.0, 0.5, 1.0)]
    alike = [(dict.fromkeys(questions, 0.2), zero) for _ in range(3)]
    both = {q: questions for q in "abcde"}
    # five tasks whose seeds vary alike: 2 df each, 10 together
    assert suite_report.seeds_df(dict.fromkeys("abcde", spread), both) == 10
    # one task carries all the seeds' spread (the others kept the same each time): its own 2 df, not 10
    assert suite_report.seeds_df({"a": spread, **dict.fromkeys("bcde", alike)}, both) == 2
    # no spread anywhere: the df widen nothing, any value does
    assert suite_report.seeds_df(dict.fromkeys("ab", alike), both) == 4
    # and the suite mean's interval is wider by t(2)/t(10) than the sum of the tasks' df would make it
    one_varies = {"a": spread, **dict.fromkeys("bcde", alike)}
    low, high = suite_report.across_tasks(one_varies, both, random.Random(0))["ci95"]
    monkeypatch.setattr(suite_report, "seeds_df", lambda tasks, questions: 10)
    pooled_low, pooled_high = suite_report.across_tasks(one_varies, both, random.Random(0))["ci95"]
    assert (high - low) / (pooled_high - pooled_low) == pytest.approx(4.303 / 2.228)


def test_the_goal_is_not_met_by_a_partial_suite_whatever_it_shows():
    questions = [str(i) for i in range(20)]
    zero, one = dict.fromkeys(questions, 0.0), dict.fromkeys(questions, 1.0)
    full = {"_scores": {"baseline": zero, "practice": dict.fromkeys(suite.SEEDS, one), "gepa": {}}}
    full["_scores"]["gepa"] = dict.fromkeys(suite.SEEDS, zero)
    tasks = {t: full for t in suite.TASKS}
    winning = {"practice_minus_gepa": {"mean": 1.0, "ci95": [1.0, 1.0]}, "tasks_below_baseline": []}
    assert suite_report.goal(winning, tasks)["met"]
    partial = {t: full for t in list(suite.TASKS)[:4]}
    assert not suite_report.goal(winning, partial)["met"]
    one_seed_short = {**tasks, "gsm8k": {"_scores": {**full["_scores"], "gepa": {0: zero}}}}
    assert not suite_report.goal(winning, one_seed_short)["met"]
    below = {**winning, "tasks_below_baseline": ["averages"]}
    assert not suite_report.goal(below, tasks)["met"]


def _saved(scores_by_run: dict):
    """A stand-in for suite_report.load: (task, method, seed) -> a saved run whose every question scored so."""

    def load(task, method, seed):
        score = scores_by_run.get((task, method, seed))
        return None if score is None else {"heldout_rewards": {str(q): [score, score] for q in range(4)}}

    return load


def test_a_candidate_s_later_seeds_run_only_if_its_first_beat_practice_s_on_the_suite_mean(monkeypatch, tmp_path):
    first = suite.SEEDS[0]
    runs = {(t, "baseline", None): 0.0 for t in suite.TASKS} | {(t, "practice", first): 0.5 for t in suite.TASKS}
    better = runs | {(t, "lower_bar", first): 1.0 for t in suite.TASKS}
    worse = runs | {(t, "lower_bar", first): 0.5 if t != "gsm8k" else 0.0 for t in suite.TASKS}
    monkeypatch.setattr(suite_report, "load", _saved(better))
    assert suite_report.first_seed_difference("lower_bar") == 0.5 and suite.promising("lower_bar")
    monkeypatch.setattr(suite_report, "load", _saved(worse))
    assert suite_report.first_seed_difference("lower_bar") < 0 and not suite.promising("lower_bar")
    monkeypatch.setattr(suite_report, "load", _saved({k: v for k, v in better.items() if k[0] != "gsm8k"}))
    assert suite_report.first_seed_difference("lower_bar") is None and not suite.promising("lower_bar")

    # fill: every run of the plan saved but lower_bar's later seeds; they run only when promising
    started = []
    monkeypatch.setattr(suite, "result_path", lambda t, m, s: tmp_path / ("missing" if m == "lower_bar" else "saved"))
    (tmp_path / "saved").write_text("{}")
    monkeypatch.setattr(suite, "run", lambda t, m, s: started.append((t, m, s)))
    monkeypatch.setattr(suite, "promising", lambda c: False)
    suite.fill(list(suite.TASKS), None)
    assert started == [(t, "lower_bar", first) for t in suite.TASKS]
    started.clear()
    monkeypatch.setattr(suite, "promising", lambda c: True)
    suite.fill(list(suite.TASKS), None)
    assert len(started) == len(suite.TASKS) * len(suite.SEEDS)


def test_the_candidates_are_as_registered():
    """A candidate is never changed after its first run: an edit of what it changes fails here (a new idea is a
    new name)."""
    assert {name: (c.adds, c.drop) for name, c in suite.CANDIDATES.items()} == {
        "fewer_refusals": (("--screening_object_repeats", "0", "--screening_require_directive", "false"), ()),
        "lower_bar": (("--validation_min_gain_to_grow", "0.05"), ()),
        "no_gate": (
            ("practice.validation=null",),
            ("--validation_dataset", "--validation_offset", "--validation_size", "--validation_pass_k"),
        ),
        "all_lost": (("--all_lost_groups_per_step", "3"), ()),
    }


def test_a_candidate_that_drops_a_flag_practice_does_not_give_is_refused():
    misspelt = suite.Candidate("why", ("practice.validation=null",), drop=("--validation_datasets",))
    _, flags = suite.practice_command("averages", "practice", 0)
    with pytest.raises(ValueError, match="--validation_datasets"):
        misspelt.applied_to(flags)


def test_a_candidate_s_later_seed_is_refused_by_run_unless_promising(monkeypatch):
    monkeypatch.setattr(suite, "registered_in", lambda name=None: "abc")
    monkeypatch.setattr(suite, "committed_as_is", lambda: True)
    monkeypatch.setattr(suite, "promising", lambda c: False)
    suite.check_candidate("lower_bar", suite.SEEDS[0])  # the first seed always runs
    with pytest.raises(SystemExit, match="other seeds do not run"):
        suite.check_candidate("lower_bar", suite.SEEDS[1])
    monkeypatch.setattr(suite, "registered_in", lambda name=None: None)
    with pytest.raises(SystemExit, match="commit benchmarks/learning/suite.py first"):
        suite.check_candidate("lower_bar", suite.SEEDS[0])
    monkeypatch.setattr(suite, "registered_in", lambda name=None: "abc")
    monkeypatch.setattr(suite, "committed_as_is", lambda: False)  # registered, but edited since
    with pytest.raises(SystemExit, match="commit benchmarks/learning/suite.py first"):
        suite.check_candidate("lower_bar", suite.SEEDS[0])


def test_fill_goes_on_past_a_failed_run_and_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(suite, "result_path", lambda t, m, s: tmp_path / f"{t}_{m}_{s}")
    started = []

    def run(task, method, seed):
        started.append((task, method, seed))
        if len(started) == 1:
            raise SystemExit("evaluation failed (exit 1)")
        (tmp_path / f"{task}_{method}_{seed}").write_text("{}")

    monkeypatch.setattr(suite, "run", run)
    monkeypatch.setattr(suite, "promising", lambda c: False)
    assert suite.fill(["averages"], None) == 1
    assert len(started) > 2 and "failed: averages baseline" in capsys.readouterr().out


async def test_fill_resumes_the_runs_begun_in_an_earlier_sitting_first(monkeypatch, tmp_path, sqlite_db):
    from utu.db.models import Experiment

    async with sqlite_db.transaction() as s:  # GSM8K's no_gate seed 0 was stopped in its held-out evaluation
        s.add(Experiment(exp_id="suite_gsm8k_no_gate_s0_heldout", kind="evaluation", fingerprint="f", config={}))
        s.add(Experiment(exp_id="suite_gsm8k_paper_s0x", kind="practice", fingerprint="f", config={}))  # not a run
    gepa_runs = tmp_path / "gepa"
    (gepa_runs / "averages_gepa_s2").mkdir(parents=True)  # and Averages' GEPA seed 2
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "test.db")
    monkeypatch.setattr(suite, "GEPA_RUNS", gepa_runs)
    monkeypatch.setattr(suite, "result_path", lambda t, m, s: tmp_path / f"{t}_{m}_{s}")
    for task in suite.TASKS:  # practice's seed 2 is saved everywhere, so its GEPA may run
        (tmp_path / f"{task}_practice_2").write_text("{}")
    started = []
    monkeypatch.setattr(suite, "run", lambda t, m, s: started.append((t, m, s)))
    monkeypatch.setattr(suite, "promising", lambda c: False)
    suite.fill(list(suite.TASKS), None)
    assert started[:3] == [("averages", "gepa", 2), ("gsm8k", "no_gate", 0), ("elapsed_time", "baseline", None)]
    assert len(started) == len(set(started))


def test_a_suite_database_that_cannot_be_read_leaves_the_plan_s_order(monkeypatch, tmp_path, capsys):
    (tmp_path / "empty.db").write_bytes(b"")  # a database without tables
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "empty.db")
    assert suite.begun_runs() == set()
    assert "no such table" in capsys.readouterr().out


def test_a_candidate_s_verdict_waits_for_every_task_and_seed():
    full = {"seeds": len(suite.SEEDS), "tasks": list(suite.TASKS), "mean": 0.1, "ci95": [0.02, 0.2]}
    assert suite_report.candidate_verdict(None, full) == "first seed not yet run on every task"
    assert suite_report.candidate_verdict(-0.01, full).startswith("stopped")
    assert suite_report.candidate_verdict(0.0, full).startswith("stopped")  # a tie does not go on
    assert suite_report.candidate_verdict(0.05, {**full, "seeds": 1}) == "later seeds running"
    assert suite_report.candidate_verdict(0.05, full).startswith("kept")
    assert suite_report.candidate_verdict(0.05, {**full, "ci95": [-0.01, 0.2]}).startswith("dropped")


def test_stop_at_is_the_next_coming_of_its_time_and_a_bad_one_is_refused():
    from datetime import datetime, timedelta

    soon = datetime.now() + timedelta(minutes=2)
    stop = suite.next_time(f"{soon:%H:%M}")
    assert timedelta(0) < stop - datetime.now() <= timedelta(minutes=2)  # today's (or just past midnight's)
    past = datetime.now() - timedelta(minutes=2)
    assert timedelta(hours=23) < suite.next_time(f"{past:%H:%M}") - datetime.now() <= timedelta(days=1)
    for bad in ("25:99", "noon", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="HH:MM"):
            suite.next_time(bad)


async def test_a_practice_s_agent_calls_are_its_rollouts_and_validations_not_its_evaluation_nor_another_s(
    sqlite_db,
):
    from utu.db import EvaluationSample

    exp = "suite_x_practice_s0"
    stored = {
        f"{exp}_epoch_0": 5,  # rollouts, counted even when a sitting stopped before the step's tally was saved
        f"{exp}_epoch_2": 3,
        f"{exp}_val_1": 4,  # a validation of a library
        f"{exp}_heldout": 7,  # its held-out evaluation: not practice's spending
        "suite_x_practice_s1_epoch_0": 6,  # another seed
        "suite_x_practice_s0x_epoch_0": 2,  # a name that only starts like it
        "suite%x_practice_s0_epoch_0": 1,  # a LIKE wildcard in the name does not match
    }
    async with sqlite_db.transaction() as s:
        for exp_id, n in stored.items():
            s.add_all(
                EvaluationSample(exp_id=exp_id, owner=exp, dataset="d", dataset_index=i, raw_question="q")
                for i in range(n)
            )
    assert await suite.agent_attempts(sqlite_db, exp) == 5 + 3 + 4


def test_the_time_left_is_each_missing_run_at_its_family_s_median_time(monkeypatch, tmp_path):
    took = {"baseline": {"evaluation": 600}, "placebo": {"evaluation": 1200}, "reference": {"evaluation": 900}}
    took |= {"practice": {"practice": 3000, "evaluation": 600}, "gepa": {"gepa": 2400, "evaluation": 600}}
    took |= {"hinted": {"practice": 12}}  # resumed: its last sitting's seconds alone
    monkeypatch.setattr(suite, "result_path", lambda t, m, s: tmp_path / f"{m}.json")
    for method, seconds in took.items():
        (tmp_path / f"{method}.json").write_text(json.dumps({"task": "averages", "method": method, "seconds": seconds}))
    done = [("averages", m, suite.METHODS[m][0]) for m in took]  # as the plan has them: evaluations unseeded
    left = [("gsm8k", "baseline", None), ("gsm8k", "no_gate", 0), ("gsm8k", "gepa", 0)]
    # evaluations' median 900; practice-like runs' median of 3600 and 12; GEPA 3000
    assert suite.seconds_left(done, left) == 900 + (3600 + 12) / 2 + 3000


async def test_park_carries_only_the_unsaved_runs_state_and_unpark_restores_it_where_no_database_is(
    sqlite_db, tmp_path
):
    import sqlite3
    from datetime import UTC, datetime

    import suite_park

    from utu.db import EvaluationSample
    from utu.db.models import DatasetSample, Experiment, ExperimentLease, PracticeStep

    stopped, saved, gepa = "suite_x_practice_s0", "suite_x_baseline", "suite_x_gepa_s0"
    async with sqlite_db.transaction() as s:
        for exp in (stopped, saved, stopped + "x"):  # the last only starts like the stopped run
            s.add(Experiment(exp_id=exp, kind="practice", fingerprint="f", config={}))
            s.add(PracticeStep(exp_id=exp, step=0, epoch=0, batch=0, stats={}))
        for exp_id in (f"{stopped}_epoch_0", f"{stopped}_val_1", f"{saved}_heldout"):
            owner = saved if exp_id.startswith(saved) else stopped
            s.add(EvaluationSample(exp_id=exp_id, owner=owner, dataset="d", dataset_index=0, raw_question="q"))
        s.add(DatasetSample(dataset="d", index=0, question="q", answer="1"))
        now = datetime.now(UTC)
        s.add(ExperimentLease(exp_id=stopped, holder="h", host="the stopped machine", pid=1, expires_at=now))
    folder = tmp_path / "gepa_runs" / "x_gepa_s0"
    folder.mkdir(parents=True)
    (folder / "spend.json").write_text('{"agent_calls": 12}')
    archive = tmp_path / "parked.tar.gz"
    runs = {stopped: tmp_path / "gepa_runs" / "x_practice_s0", gepa: folder, "suite_x_placebo": tmp_path / "none"}
    assert suite_park.park(tmp_path / "test.db", runs, archive) == [gepa, stopped]

    elsewhere = tmp_path / "new_machine"
    db, gepa_root = elsewhere / "runs" / "learning_suite.db", elsewhere / "runs" / "gepa"
    assert suite_park.unpark(archive, db, gepa_root) == [gepa, stopped]
    assert (gepa_root / "x_gepa_s0" / "spend.json").read_text() == '{"agent_calls": 12}'
    with sqlite3.connect(db) as restored:
        rows = lambda sql: sorted(r[0] for r in restored.execute(sql))  # noqa: E731
        assert rows("SELECT exp_id FROM experiments") == [stopped]
        assert rows("SELECT exp_id FROM practice_steps") == [stopped]
        assert rows("SELECT exp_id FROM evaluation_data") == [f"{stopped}_epoch_0", f"{stopped}_val_1"]
        assert rows("SELECT dataset FROM data") == rows("SELECT exp_id FROM experiment_leases") == []
    with pytest.raises(FileExistsError):  # a machine that has a database keeps it
        suite_park.unpark(archive, db, gepa_root)


def test_fill_and_run_unpark_on_a_machine_with_no_database_only_and_park_waits_for_them(monkeypatch, tmp_path, capsys):
    import suite_park

    unparked, ran = [], []
    for name, path in (("PARKED", "parked.tar.gz"), ("DB_PATH", "learning_suite.db"), ("RUNNING", "running.pid")):
        monkeypatch.setattr(suite, name, tmp_path / path)
    monkeypatch.setattr(suite_park, "unpark", lambda *a: unparked.append(a) or ["suite_x_practice_s0"])
    monkeypatch.setattr(suite, "fill", lambda tasks, stop_at: ran.append(suite.running_pid()) or 0)
    monkeypatch.setattr(sys, "argv", ["suite.py", "fill"])
    suite.PARKED.write_bytes(b"")
    assert suite.main() == 0 and len(unparked) == 1
    assert "unparked suite_x_practice_s0" in capsys.readouterr().out
    assert ran == [os.getpid()] and suite.running_pid() is None  # park is refused while it fills, not after
    suite.DB_PATH.write_bytes(b"")
    assert suite.main() == 0 and len(unparked) == 1

    suite.RUNNING.write_text(str(os.getpid()))
    with pytest.raises(SystemExit, match="is going on here"):
        suite.park(tmp_path / "out.tar.gz")
    suite.RUNNING.unlink()
    suite.DB_PATH.unlink()
    with pytest.raises(SystemExit, match="no suite database here"):
        suite.park(tmp_path / "out.tar.gz")
    assert not suite.DB_PATH.exists() and not (tmp_path / "out.tar.gz").exists()


@pytest.mark.parametrize(
    "to",
    [
        "",
        "a_folder",
        "no_such_folder_is_made/under/a_file/out.tar.gz",
        "gepa_s0.json",  # a saved result: never replaced by a parked file
        "earlier.tar.gz",  # a file that exists and is not a parked file
    ],
)
def test_park_to_a_place_it_cannot_or_must_not_write_says_so_in_one_line_and_writes_nothing(monkeypatch, tmp_path, to):
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "learning_suite.db")
    monkeypatch.setattr(suite, "RUNNING", tmp_path / "running.pid")
    monkeypatch.setattr(suite, "unsaved_runs", lambda: {})
    sqlite3.connect(suite.DB_PATH).close()
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "no_such_folder_is_made").write_text("a file, not a folder")
    (tmp_path / "gepa_s0.json").write_text('{"task": "averages"}')
    (tmp_path / "earlier.tar.gz").write_text("kept")
    monkeypatch.chdir(tmp_path)
    before = {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}
    with pytest.raises(SystemExit) as refused:
        suite.park(Path(to))
    assert "\n" not in str(refused.value) and str(Path(to)).split("/")[0] in str(refused.value)
    assert {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")} == before


@pytest.mark.parametrize("broken", ["empty", "truncated", "not_sqlite", "a_link", "a_way_out"])
def test_a_broken_parked_file_is_refused_whole_and_writes_nothing(tmp_path, broken):
    import io
    import tarfile

    import suite_park

    def member(tar, name, data=b"", kind=tarfile.REGTYPE):
        info = tarfile.TarInfo(name)
        info.type, info.size, info.linkname = kind, len(data), "/etc/passwd" if kind != tarfile.REGTYPE else ""
        tar.addfile(info, io.BytesIO(data))

    archive = tmp_path / "parked.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member(tar, "parked.json", b'{"version": 1, "runs": ["suite_x_gepa_s0"]}')
        member(tar, "learning_suite.db", b"garbage" if broken == "not_sqlite" else suite_park.SQLITE_HEADER)
        member(tar, "gepa/x_gepa_s0/spend.json", b"{}")
        if broken == "a_link":
            member(tar, "gepa/x_gepa_s0/state.bin", kind=tarfile.SYMTYPE)
        if broken == "a_way_out":
            member(tar, "gepa/../../escaped", b"x")
    if broken == "empty":
        archive.write_bytes(b"")
    elif broken == "truncated":
        archive.write_bytes(archive.read_bytes()[:60])
    db, gepa_root = tmp_path / "runs" / "learning_suite.db", tmp_path / "runs" / "gepa"
    with pytest.raises(suite_park.ParkedFileError):
        suite_park.unpark(archive, db, gepa_root)
    assert not db.exists() and not gepa_root.exists() and not (tmp_path.parent / "escaped").exists()


def test_a_result_is_saved_whole_or_not_at_all_and_never_over_another(tmp_path):
    path = tmp_path / "averages" / "practice_s0.json"
    with pytest.raises(UnicodeEncodeError):  # fails mid-write
        suite.save_once(path, '{"heldout_mean": 0.5, "note": "\ud800"}')
    assert list(path.parent.iterdir()) == []  # nothing that `fill` would take for a saved run
    suite.save_once(path, '{"heldout_mean": 0.5}')
    with pytest.raises(FileExistsError):  # a fill beside this one saved it first: its result stays
        suite.save_once(path, '{"heldout_mean": 0.0}')
    assert path.read_text() == '{"heldout_mean": 0.5}'
    assert [p.name for p in path.parent.iterdir()] == ["practice_s0.json"]


def test_a_result_is_saved_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(suite.os, "link", no_links)
    path = tmp_path / "practice_s0.json"
    suite.save_once(path, '{"heldout_mean": 0.5}')
    with pytest.raises(FileExistsError):
        suite.save_once(path, '{"heldout_mean": 0.0}')
    assert path.read_text() == '{"heldout_mean": 0.5}' and [p.name for p in tmp_path.iterdir()] == [path.name]


async def test_a_practice_record_keeps_the_config_its_run_resolved(sqlite_db, tmp_path, monkeypatch):
    from utu.db.models import Experiment

    config = {"practice": {"seed": 1, "validation": {"min_gain_to_grow": 0.15}}, "data": {"content": {"sha256": "ab"}}}
    async with sqlite_db.transaction() as s:
        s.add(Experiment(exp_id="suite_x_practice_s1", kind="practice", fingerprint="f", config=config))
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "test.db")
    record = await suite.practice_record("suite_x_practice_s1")
    assert record["shaping_config"] == config and record["library"] == {} and record["agent_calls"] == 0
    assert record["steps"] == []
    from utu.practice.library import Library
    from utu.practice.store import PracticeStore
    from utu.practice.types import StepStats

    counts = {"groups_used": 3, "groups_skipped": 5, "groups_all_lost": 2, "questions_added": 8, "learner_tries": 2}
    stats = StepStats(
        step=0, epoch=0, batch=0, group_size=4, questions=16, attempts=64, attempts_failed=0, mean_at_g=0.1,
        pass_at_g=0.2, library_size=0, operations={}, operations_refused=1, learner_errors=0, usage={}, wall_time=1.0,
        **counts,
    )  # fmt: skip
    await PracticeStore(sqlite_db, "suite_x_practice_s1").save_step(0, 0, 0, Library(), [], [], stats)
    assert (await suite.practice_record("suite_x_practice_s1"))["steps"] == [{"step": 0, **counts}]
    assert (await suite.practice_record("suite_x_practice_s2"))["shaping_config"] is None  # no such run


def test_gepa_s_grading_is_the_verifier_s_with_its_timeout_so_a_hanging_reply_cannot_stall_it():
    import asyncio

    from gepa_baseline import grade_all

    golds = ["4", "4", "1"]
    replies = ["so \\boxed{4}", "\\boxed{5}", "\\boxed{9^{9^{9^{9}}}}"]  # sympy hangs on the last
    graded = asyncio.run(grade_all(golds, replies, timeout=10.0))  # a cold worker on a busy machine is in time
    assert [ok for ok, _ in graded] == [True, False, False]
    assert "gold 4" in graded[1][1] and graded[2][1] == "verification timed out after 10s"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"task": "averages", "method": "gepa", "heldout', "unreadable result (JSONDecodeError"),
        ("[]", "not a suite result"),
        ("{}", "not a suite result"),
        ('{"task": "averages", "method": "gepa", "heldout_rewards": {"200": []}}', "heldout_rewards must map"),
        (None, "unreadable result (IsADirectoryError"),  # a folder where the result should be
    ],
)
def test_a_broken_result_file_ends_report_and_status_in_one_line_that_names_it(monkeypatch, tmp_path, content, says):
    path = tmp_path / "averages" / "gepa_s0.json"
    path.parent.mkdir()
    path.mkdir() if content is None else path.write_text(content)

    def result_path(task, method, seed):
        return path if (task, method, seed) == ("averages", "gepa", 0) else tmp_path / "none"

    monkeypatch.setattr(suite, "result_path", result_path)
    monkeypatch.setattr(suite_report, "result_path", result_path)
    for reads in (
        lambda: suite_report.load("averages", "gepa", 0),
        lambda: suite.seconds_left([("averages", "gepa", 0)], []),
    ):
        with pytest.raises(SystemExit) as refused:
            reads()
        message = str(refused.value)
        assert message.startswith(f"{path}: {says}") and "\n" not in message and "delete it" in message
    assert path.is_dir() if content is None else path.read_text() == content  # nothing touched


def test_park_replaces_an_earlier_parked_file_wherever_it_is(sqlite_db, monkeypatch, tmp_path):
    # the suite fills in a worktree and parks into the main checkout's parked file: not its own PARKED
    monkeypatch.setattr(suite, "DB_PATH", tmp_path / "test.db")  # sqlite_db's, with the tables
    monkeypatch.setattr(suite, "RUNNING", tmp_path / "running.pid")
    monkeypatch.setattr(suite, "unsaved_runs", lambda: {})
    elsewhere = tmp_path / "main_checkout" / "parked.tar.gz"
    elsewhere.parent.mkdir()
    assert suite.park(elsewhere) == 0
    first = elsewhere.read_bytes()
    elsewhere.write_bytes(first[: len(first) // 2])  # a parked file cut short is not one: refused, not replaced
    with pytest.raises(SystemExit, match="is not a parked file"):
        suite.park(elsewhere)
    elsewhere.write_bytes(first)
    assert suite.park(elsewhere) == 0 and elsewhere.stat().st_size > 0


def test_the_tables_go_between_the_marker_lines_and_only_from_a_full_suite(monkeypatch, tmp_path, capsys):
    start, end = suite_report.START, suite_report.END
    page = tmp_path / "README.md"
    page.write_text(f"# utu\n\nbefore\n{start}\nold tables\n{end}\nafter\n")
    suite_report.write_into([page], "| new | tables |\n")
    assert page.read_text() == f"# utu\n\nbefore\n{start}\n| new | tables |\n{end}\nafter\n"
    windows = tmp_path / "windows.md"
    windows.write_bytes(f"a\r\n{start}\r\n{end}\r\nb\r\n".encode())
    suite_report.write_into([windows], "| t |\n| u |\n")
    assert windows.read_bytes() == f"a\r\n{start}\r\n| t |\r\n| u |\r\n{end}\r\nb\r\n".encode()
    link = tmp_path / "link.md"
    link.symlink_to(page)
    suite_report.write_into([link], "| linked |\n")  # a symlinked page stays a link; the file it names is written
    assert link.is_symlink() and page.read_text() == f"# utu\n\nbefore\n{start}\n| linked |\n{end}\nafter\n"
    suite_report.write_into([page], "| new | tables |\n")
    other = tmp_path / "other.md"
    for broken in (f"{start}\n", f"{end}\n{start}\n", f"{start}\n{start}\n{end}\n", f"{start} x\n{end}\n"):
        other.write_text(broken)
        before = page.read_text()
        with pytest.raises(SystemExit, match="once each and outside a code block, where the suite's tables go"):
            suite_report.write_into([page, other], "x\n")  # all or nothing: the good file is not written either
        assert other.read_text() == broken and page.read_text() == before
    with pytest.raises(SystemExit, match="outside a code block"):  # shown as an example only: not the place
        other.write_text(f"```\n{start}\n{end}\n```\n")
        suite_report.write_into([other], "x\n")
    shown = f"How:\n\n~~~md\n{start}\n{end}\n~~~\n\n    {start}\n\nHere:\n{start}\n{end}\n"
    other.write_text(shown)  # the example, fenced or indented, stays as it is; the real markers get the tables
    suite_report.write_into([other], "| t |\n")
    assert other.read_text() == shown.replace(f"Here:\n{start}\n", f"Here:\n{start}\n| t |\n")
    for unreadable in (tmp_path / "missing.md", tmp_path / "latin1.md"):
        if unreadable.name == "latin1.md":
            unreadable.write_bytes(b"caf\xe9\n")
        with pytest.raises(SystemExit, match=f"--into {unreadable}: cannot read it"):
            suite_report.write_into([unreadable], "x\n")

    def report_of(saved: int, stopped: int) -> Path:
        report = {"runs_saved": saved, "runs_stopped_for_futility": stopped, "runs_planned": 10, "tasks": {}}
        report["suite"] = {"practice": None, "gepa": None, "candidates": {}}
        path = tmp_path / "report.json"
        path.write_text(json.dumps(report))
        return path

    monkeypatch.setattr(suite_report, "markdown", lambda report: "| new | tables |\n")
    page.write_text(f"{start}\n{end}\n")
    for saved, stopped, written in ((9, 0, False), (8, 2, True)):  # a partial suite is reported nowhere
        monkeypatch.setattr(suite_report, "write_report", lambda s=saved, t=stopped: report_of(s, t))
        monkeypatch.setattr(sys, "argv", ["suite.py", "report", "--into", str(page)])
        if written:
            assert suite.main() == 0
        else:
            with pytest.raises(SystemExit, match=r"not full \(9 of 10 runs saved\): nothing written"):
                suite.main()
        assert ("| new | tables |" in page.read_text()) == written
