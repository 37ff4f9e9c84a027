"""Training-Free GRPO end to end against stub LLMs: library, operations, restart semantics, robustness."""

import json
import os
import re
import shutil
import socket
import sqlite3

import pytest
import yaml

from tests.conftest import run_script
from tests.practice.helpers import (
    PRACTICE,
    QUESTIONS,
    agent_script,
    evolving_learner,
    is_probe,
    query,
    run_eval,
    run_practice,
    schema_of,
    setup_workspace,
    work_requests,
)
from utu.llm.stub import StubScript
from utu.practice.types import StepStats

# Per step: 4 attempts; learner: 4 summaries, 2 advantages, 2 group updates, 1 consolidation.
AGENT_PER_STEP, LEARNER_PER_STEP = 4, 9
LEARNER_ALL = LEARNER_PER_STEP * 4 - 2  # step 0 (empty library) makes no group-update calls


@pytest.fixture
def workspace(tmp_path):
    return setup_workspace(tmp_path)


def test_two_epochs_give_the_expected_library_and_operation_rows(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent, learner = stub(agent_script()), stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, agent, learner)
    assert result.returncode == 0, result.stderr
    (snapshot,) = query(db_url, "SELECT experiences FROM experience_snapshots WHERE exp_id='t' AND step=3")
    # Ids are stable: G1 and G2 keep their numbers after G0 is deleted.
    assert json.loads(snapshot[0]) == {"G1": "When unsure, recompute.", "G2": "When done, box it."}
    ops = query(
        db_url, "SELECT step, kind, experience_id, status, reason, old_text FROM experience_operations ORDER BY id"
    )
    assert ops == [
        (0, "ADD", "G0", "applied", None, None),
        (1, "UPDATE", "G0", "applied", None, "When adding, line up the digits."),
        (2, "DELETE", "G0", "applied", None, "When adding, line up digits and carry."),
        (2, "ADD", "G1", "applied", None, None),
        (3, "ADD", None, "refused", "junk: not 15-500 characters long (5)", None),  # UPDATE of unknown G9
        (3, "ADD", "G2", "applied", None, None),
    ]
    sources = query(db_url, "SELECT source_questions FROM experience_operations WHERE step=0")
    assert len(json.loads(sources[0][0])) == 2  # merged from both groups of the batch
    assert agent.request_count == 4 * AGENT_PER_STEP and len(work_requests(learner)) == LEARNER_ALL
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert [s["library_size"] for s in stats] == [1, 1, 1, 2]
    assert all(s["group_size"] == 2 and s["mean_at_g"] == 0.5 and s["groups_used"] == 2 for s in stats)
    assert stats[0]["usage"]["rollout"]["calls"] == 4 and stats[0]["usage"]["learner.summary"]["calls"] == 4
    assert "When done, box it." in result.stdout
    # Rollouts ran at the rollout temperature, with the library in the system prompt (the agent's placement).
    last = agent.requests[-1]
    assert last["temperature"] == 0.7 and "[G1]. When unsure, recompute." in last["messages"][0]["content"]


def test_shuffling_changes_the_batches_between_epochs(tmp_path, workspace, stub):
    configs, db_url = workspace
    assert run_practice(tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner())).returncode == 0
    batches = query(
        db_url,
        "SELECT step, group_concat(DISTINCT dataset_index) FROM evaluation_data "
        "WHERE exp_id LIKE 't_epoch_%' GROUP BY step ORDER BY step",
    )
    epoch0 = {frozenset(b.split(",")) for s, b in batches if s < 2}
    epoch1 = {frozenset(b.split(",")) for s, b in batches if s >= 2}
    assert epoch0 != epoch1  # seed 42 gives different pairs in epoch 1 than in epoch 0


@pytest.mark.parametrize(
    ("restart", "agent_calls", "learner_calls"),
    [(None, 0, 0), ("3", AGENT_PER_STEP, LEARNER_PER_STEP), ("0", 4 * AGENT_PER_STEP, LEARNER_ALL)],
)
def test_restart_step_does_exactly_the_documented_work(tmp_path, workspace, stub, restart, agent_calls, learner_calls):
    configs, db_url = workspace
    assert run_practice(tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner())).returncode == 0
    agent, learner = stub(agent_script()), stub(evolving_learner())
    args = [] if restart is None else ["--restart_step", restart]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *args)
    assert result.returncode == 0, result.stderr
    assert (agent.request_count, len(work_requests(learner))) == (agent_calls, learner_calls)
    assert query(db_url, "SELECT count(*) FROM experience_snapshots WHERE exp_id='t'") == [(4,)]
    assert query(db_url, "SELECT count(*) FROM evaluation_data WHERE exp_id LIKE 't_epoch_%'") == [(16,)]


def test_resuming_under_a_changed_config_is_refused(tmp_path, workspace, stub):
    configs, db_url = workspace
    assert run_practice(tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner())).returncode == 0
    agent = stub(agent_script())
    changed = run_practice(
        tmp_path,
        configs,
        db_url,
        agent,
        stub(evolving_learner()),
        "--grpo_n",
        "3",
        "++practice.learning_objective=other",
    )
    assert changed.returncode == 2
    assert "changed: practice.grpo_n, practice.learning_objective" in changed.stderr
    assert agent.request_count == 0
    # More epochs is not a change of what a step computes: it extends the run.
    more = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "3")
    assert more.returncode == 0, more.stderr
    assert agent.request_count == 2 * AGENT_PER_STEP


MALFORMED = {
    "invalid JSON": "this is {not json",
    "object instead of a list": json.dumps({"operations": {"operation": "ADD", "content": "x"}}),
    "empty content": "",
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_learner_replies_are_recorded_and_the_step_goes_on(tmp_path, workspace, stub, kind):
    configs, db_url = workspace
    good = evolving_learner().reply_fn
    broken = next(iter(QUESTIONS))  # every summary of this question's attempts is malformed

    def reply(body):
        bad = schema_of(body) == "AttemptSummary" and broken in body["messages"][1]["content"]
        return MALFORMED[kind] if bad else good(body)

    learner = stub(StubScript(reply_fn=reply))
    result = run_practice(tmp_path, configs, db_url, stub(agent_script()), learner, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    errors = query(db_url, "SELECT step, stage, error, raw_reply FROM learner_errors ORDER BY id")
    assert len(errors) == 2 and {e[1] for e in errors} == {"summary"}  # the group's 2 attempts
    assert errors[0][3] == MALFORMED[kind]
    assert query(db_url, "SELECT count(*) FROM experience_snapshots") == [(2,)]
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert sum(s["learner_errors"] for s in stats) == 2


def test_a_learner_that_fails_on_every_group_fails_the_step(tmp_path, workspace, stub):
    configs, db_url = workspace
    good = evolving_learner().reply_fn
    learner = stub(StubScript(reply_fn=lambda body: "{not json" if schema_of(body) == "GroupAdvantage" else good(body)))
    agent = stub(agent_script())
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1")
    assert result.returncode == 2
    assert "step 0: the learner failed on all 2 groups it studied" in result.stderr
    assert len(query(db_url, "SELECT * FROM learner_errors WHERE step=0")) == 2  # kept for diagnosis
    assert query(db_url, "SELECT count(*) FROM experience_snapshots") == [(0,)]  # the step is not done
    fixed = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1")
    assert fixed.returncode == 0, fixed.stderr
    assert query(db_url, "SELECT count(*) FROM experience_snapshots") == [(2,)]
    assert agent.request_count == 2 * AGENT_PER_STEP  # step 0's judged rollouts reused, then step 1


def test_failed_attempts_fail_the_step_unless_allowed(tmp_path, workspace, stub):
    configs, db_url = workspace
    broken = next(iter(QUESTIONS))
    agent_stub = agent_script()
    agent_stub.fault_fn = lambda body: "http500" if broken in body["messages"][1]["content"] else None
    agent, learner = stub(agent_stub), stub(evolving_learner())
    refused = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1")
    failing = re.search(r"step (\d): 2 of 4 attempts failed", refused.stderr)
    assert refused.returncode == 2 and failing, refused.stderr
    assert (int(failing.group(1)),) not in query(db_url, "SELECT step FROM practice_steps")  # not recorded as done
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1", "--max_failed_share", "0.5")
    assert result.returncode == 0, result.stderr
    failed = query(db_url, "SELECT error FROM evaluation_data WHERE stage='failed'")
    assert len(failed) == 2 and all("HTTP 500" in e for (e,) in failed)
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert sum(s["attempts_failed"] for s in stats) == 2
    assert sum(s["groups_skipped"] for s in stats) == 1


def test_task_timeout_applies_to_rollouts(tmp_path, workspace, stub):
    configs, db_url = workspace
    slow = agent_script()
    slow.latency = 1.0
    result = run_practice(
        tmp_path, configs, db_url, stub(slow), stub(evolving_learner()), "--epochs", "1", "--task_timeout", "0.3"
    )
    assert result.returncode == 2 and "4 of 4 attempts failed" in result.stderr
    errors = query(db_url, "SELECT stage, error FROM evaluation_data")
    assert {stage for stage, _ in errors} == {"failed"} and all("timed out after 0.3s" in e for _, e in errors)


def test_rollout_concurrency_bounds_rollouts(tmp_path, workspace, stub):
    configs, db_url = workspace
    slow = agent_script()
    slow.latency = 0.3
    agent = stub(slow)
    result = run_practice(
        tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1", "--rollout_concurrency", "2"
    )
    assert result.returncode == 0, result.stderr
    assert agent.max_in_flight == 2


def test_group_size_one_with_ground_truth_still_learns(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, stub(agent_script()), learner, "--grpo_n", "1", "--epochs", "1")
    assert result.returncode == 0, result.stderr
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert [s["groups_used"] for s in stats] == [2, 2]
    assert query(db_url, "SELECT count(*) FROM experience_operations WHERE status='applied'")[0][0] >= 1
    # The learner saw each single attempt's absolute reward.
    summaries = [r for r in learner.requests if schema_of(r) == "AttemptSummary"]
    assert all("<outcome>reward " in r["messages"][1]["content"] for r in summaries)


def test_without_ground_truth_answers_and_rewards_are_hidden(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(evolving_learner())
    agent = stub(agent_script(pattern=("right",)))  # all right: with ground truth every group would be skipped
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--given_ground_truth", "false", "--epochs", "1")
    assert result.returncode == 0, result.stderr
    texts = [r["messages"][1]["content"] for r in work_requests(learner)]
    assert not any(answer in t for t in texts for answer in ("<ground_truth>3<", "<ground_truth>7<"))
    assert all("reward" not in t for t in texts if "<attempts>" in t)
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert all(s["groups_used"] == 2 for s in stats)


def test_all_equal_groups_are_skipped_with_ground_truth(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, stub(agent_script(pattern=("right",))), learner, "--epochs", "1")
    assert result.returncode == 2  # nothing learned: said, with why, and nothing exported
    assert "practice learned nothing" in result.stderr and "none of 4 groups carried contrast" in result.stderr
    assert not (tmp_path / "runs/t/enhanced_agent.yaml").exists()
    assert len(work_requests(learner)) == 0
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert all(s["groups_skipped"] == 2 for s in stats)


def test_eval_during_practice_uses_the_agents_temperature_and_the_library(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent = stub(agent_script())
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        agent,
        stub(evolving_learner()),
        "--epochs",
        "1",
        "--do_eval",
        "true",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "1",
        "--export_step",
        "best",
    )
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())  # best by the eval set's scores: judged on them again, it looks better
    assert "--export_step best: chosen by the in-step evaluation, on the eval set's questions" in said
    evals = [r for r in agent.requests if r["temperature"] == 0.3]
    rollouts = [r for r in agent.requests if r["temperature"] == 0.7]
    assert len(evals) == 2 * 4 and len(rollouts) == 2 * 4  # 4 eval questions after each of 2 steps
    assert "plan: 2 steps, at most 16 agent attempts (8 rollouts, up to 8 in-step evaluation attempts)," in said
    assert "[G0]" in evals[-1]["messages"][0]["content"]
    stats = json.loads(query(db_url, "SELECT stats FROM practice_steps WHERE step=1")[0][0])
    assert (
        stats["eval"]["exp_id"] == "t_eval_step1" and stats["eval"]["k"] == 1 and 0 <= stats["eval"]["mean_at_k"] <= 1
    )
    assert "Mean@1" in result.stdout  # the in-step evaluation's column of the step table (G=2 elsewhere)


def test_the_exported_agent_keeps_the_baseline_settings_and_placement(tmp_path, workspace, stub):
    configs, db_url = workspace
    result = run_practice(
        tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--export_to", "my_enhanced"
    )
    assert result.returncode == 0, result.stderr
    exported = yaml.safe_load((tmp_path / "runs/t/enhanced_agent.yaml").read_text())
    baseline = yaml.safe_load((configs / "agents/practice/local_math_agent.yaml").read_text())
    assert exported["max_turns"] == baseline["max_turns"]
    assert exported["model"]["model_settings"]["temperature"] == 0.3  # not the rollout temperature
    assert exported["experience_placement"] == "system"
    assert exported["experiences"] == {"G1": "When unsure, recompute.", "G2": "When done, box it."}
    assert exported["model"]["model_provider"] == {  # the endpoint of whoever uses it, like the baseline
        "type": "${oc.env:UTU_LLM_TYPE,chat.completions}",
        "model": "${oc.env:UTU_LLM_MODEL,null}",
        "base_url": "${oc.env:UTU_LLM_BASE_URL,null}",
        "api_key": "${oc.env:UTU_LLM_API_KEY,null}",
        "api_version": "${oc.env:UTU_LLM_API_VERSION,null}",
        "local_model": "${oc.env:UTU_LOCAL_MODEL,null}",
    }
    assert (configs / "agents/practice/my_enhanced.yaml").exists() and (
        configs / "eval/practice/my_enhanced.yaml"
    ).exists()
    # Never over an existing file, and refused before any work.
    agent = stub(agent_script())
    again = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_to", "my_enhanced")
    assert again.returncode == 2 and "my_enhanced.yaml already exist;" in again.stderr and agent.request_count == 0
    shipped = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_to", "math_agent")
    assert shipped.returncode == 2 and agent.request_count == 0


def test_the_enhanced_agent_is_where_youtu_agents_guide_looks_next(tmp_path, workspace, stub):
    configs, db_url = workspace
    result = run_practice(tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--epochs", "1")
    assert result.returncode == 0, result.stderr
    written = configs / "agents/practice/t_agent.yaml"  # configs/agents/practice/<exp_id>_agent.yaml
    assert yaml.safe_load(written.read_text())["experiences"] == {"G0": "When adding, line up digits and carry."}
    mine = configs / "agents/practice/u_agent.yaml"
    mine.write_text("# my own agent\n")
    other = run_practice(
        tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--epochs", "1", "--exp_id", "u"
    )
    assert other.returncode == 0 and "was not written by practice" in other.stderr, other.stderr
    assert mine.read_text() == "# my own agent\n"  # never replaced; the run's own copy is in runs/u/
    said = " ".join(other.stderr.split())
    assert "not written into configs/" in said and "evaluate it, not this run's" in said  # at the end too


@pytest.mark.parametrize("name", ["../../../evil", "sub/name", "/tmp/abs", "", "x" * 65])
def test_export_names_are_plain_and_checked_before_any_work(tmp_path, workspace, stub, name):
    configs, db_url = workspace
    agent = stub(agent_script())
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_to", name)
    assert result.returncode == 2 and "--export_to" in result.stderr and "not a plain name" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and agent.request_count == 0


def test_an_eval_cannot_read_or_delete_a_practices_attempts(tmp_path, workspace, stub):
    configs, db_url = workspace
    assert (
        run_practice(
            tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--epochs", "1"
        ).returncode
        == 0
    )
    before = query(db_url, "SELECT count(*) FROM evaluation_data WHERE exp_id='t_epoch_0'")
    agent = stub(agent_script())
    for extra in ([], ["--fresh"]):
        result = run_eval(tmp_path, configs, db_url, agent, "Arith", "t_epoch_0", *extra)
        assert result.returncode == 2 and "are a practice's own" in result.stderr
    assert query(db_url, "SELECT count(*) FROM evaluation_data WHERE exp_id='t_epoch_0'") == before
    assert agent.request_count == 0


def test_fresh_never_deletes_another_kind_of_experiment(tmp_path, workspace, stub):
    configs, db_url = workspace
    assert (
        run_practice(
            tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--epochs", "1"
        ).returncode
        == 0
    )
    counts = "SELECT (SELECT count(*) FROM evaluation_data), (SELECT count(*) FROM practice_steps)"
    before = query(db_url, counts)
    agent = stub(agent_script())
    evaluation = run_eval(tmp_path, configs, db_url, agent, "Arith", "t", "--fresh")
    assert evaluation.returncode == 2 and "'t' is a practice experiment" in evaluation.stderr, evaluation.stderr
    assert query(db_url, counts) == before and agent.request_count == 0
    assert query(db_url, "SELECT kind FROM experiments WHERE exp_id='t'") == [("practice",)]
    # the reverse: a practice --fresh on an eval's id
    assert run_eval(tmp_path, configs, db_url, agent, "Arith", "e").returncode == 0
    before = query(db_url, counts)
    practice = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--exp_id", "e", "--fresh")
    assert practice.returncode == 2 and "'e' is a eval experiment" not in practice.stderr
    assert "'e' is an eval experiment" in practice.stderr, practice.stderr
    assert query(db_url, counts) == before


def test_an_eval_cannot_take_a_practices_row_names(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent = stub(agent_script())
    for name in ("t_eval_step0", "t_epoch_3"):
        clash = run_eval(tmp_path, configs, db_url, agent, "Arith", name)
        assert clash.returncode == 2 and "are a practice's own" in clash.stderr, clash.stderr
    assert agent.request_count == 0
    assert run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1").returncode == 0


def test_an_export_step_past_the_last_is_refused_before_any_work(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent = stub(agent_script())
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_step", "99")
    assert result.returncode == 2 and "--export_step 99: this practice has steps 0 to 3" in result.stderr
    best = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_step", "best")
    assert best.returncode == 2 and "--export_step best: no step of this practice is scored" in best.stderr
    for odd in ("+1", "1_0", "\u0663"):  # read by int() as 1, 10 and 3
        result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--export_step", odd)
        assert result.returncode == 2 and "expected a step number, best or last" in result.stderr, odd
    assert agent.request_count == 0


@pytest.mark.parametrize(
    ("flags", "blocked", "said"),
    [
        (["--export_to", "t_agent"], None, "configs/agents/practice/t_agent.yaml already (export_agent)"),
        (["--export_to", "ship"], "eval/practice", "is a file, not a folder; move it or leave out --export_to"),
    ],
)
def test_an_export_that_could_not_be_written_is_refused_before_any_work(
    tmp_path, workspace, stub, flags, blocked, said
):
    configs, db_url = workspace
    if blocked:
        shutil.rmtree(configs / blocked, ignore_errors=True)
        (configs / blocked).write_text("a file where the folder goes")
    agent = stub(agent_script())
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), *flags)
    assert result.returncode == 2 and said in " ".join(result.stderr.split()), result.stderr
    assert agent.request_count == 0 and not (tmp_path / "runs/t/enhanced_agent.yaml").exists()


def test_plan_says_what_a_run_would_spend_and_calls_no_model(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent, learner = stub(agent_script()), stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--plan", "--epochs", "2")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert said.startswith("plan: 4 steps, at most 16 agent attempts (16 rollouts), each run again up to")
    assert agent.request_count == learner.request_count == 0
    for table in ("experiments", "evaluation_data"):  # nothing of the experiment written
        assert query(db_url, f"SELECT count(*) FROM {table}") == [(0,)]
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--plan", "--export_step", "99")
    assert result.returncode == 2 and "--export_step 99: this practice has steps 0 to 3" in result.stderr
    assert run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "2").returncode == 0
    saved_by_flags = {(): "; 4 of the steps are saved", ("--restart_step", "1"): "; 1 of the steps", ("--fresh",): ""}
    for flags, saved in saved_by_flags.items():
        result = run_practice(tmp_path, configs, db_url, agent, learner, "--plan", "--epochs", "2", *flags)
        said = " ".join(result.stdout.split())
        assert result.returncode == 0 and (saved in said if saved else "saved" not in said), said
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--plan", "--epochs", "1")
    assert "plan: 2 steps," in result.stdout and "; 2 of the steps are saved" in " ".join(result.stdout.split())
    assert query(db_url, "SELECT count(*) FROM practice_steps") == [(4,)]  # --plan --fresh forgot nothing


def test_plan_refuses_what_the_run_would_refuse_and_takes_nothing(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent, learner = stub(agent_script()), stub(evolving_learner())
    assert run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1").returncode == 0
    assert run_eval(tmp_path, configs, db_url, agent, "Arith", "an_eval").returncode == 0
    calls = agent.request_count
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:  # a live run holds t2 (this test's own pid)
        conn.execute(
            "INSERT INTO experiment_leases (exp_id, holder, host, pid, since, expires_at) VALUES "
            "('t2', 'h', ?, ?, '2026-01-01 00:00:00', '2999-01-01 00:00:00')",
            (socket.gethostname(), os.getpid()),
        )
    for flags, said in (
        (["--rollout_temperature", "0.9"], "was run with a different config (changed: practice.rollout_temperature)"),
        (["--exp_id", "an_eval"], "exp_id 'an_eval' is an eval experiment, not a practice"),
        (["--exp_id", "t2"], "exp_id 't2' is being run by pid"),
    ):
        before = [query(db_url, f"SELECT count(*) FROM {table}") for table in ("experiments", "evaluation_data")]
        result = run_practice(tmp_path, configs, db_url, agent, learner, "--plan", "--epochs", "1", *flags)
        assert result.returncode == 2 and said in " ".join(result.stderr.split()), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout.strip()
        after = [query(db_url, f"SELECT count(*) FROM {table}") for table in ("experiments", "evaluation_data")]
        assert after == before and agent.request_count == calls
    assert query(db_url, "SELECT exp_id FROM experiment_leases") == [("t2",)]  # --plan took no lease
    fresh = ["--plan", "--epochs", "1", "--fresh", "--rollout_temperature", "0.9"]
    fresh = run_practice(tmp_path, configs, db_url, agent, learner, *fresh)
    assert fresh.returncode == 0 and fresh.stdout.startswith("plan: 2 steps")  # --fresh: a changed config is no matter


@pytest.mark.parametrize(
    "override, said",
    [
        ("evaluation.data.offset=9999", "has no question at offset 9999"),
        ("evaluation.pass_k=900000", "the in-step evaluation's 4 questions × K=900000 = 3,600,000 attempts"),
        ("evaluation.pass_k=600000 data.eval_data_truncate=2", "evaluation's 2 questions × K=600000 = 1,200,000"),
    ],
)
def test_an_in_step_evaluation_that_cannot_run_is_refused_before_any_work(tmp_path, workspace, stub, override, said):
    configs, db_url = workspace
    agent = stub(agent_script())
    flags = ("--do_eval", "true", *override.split())
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), *flags)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert agent.request_count == 0  # not after the first step's rollouts


def test_max_cost_stops_practice_with_exit_3_and_the_rerun_resumes(tmp_path, workspace, stub):
    configs, db_url = workspace
    agent, learner = stub(agent_script()), stub(evolving_learner())
    priced = ["evaluation.agent.model.pricing.input_per_million=1000", "--epochs", "1"]  # $0.001 per prompt token
    first = run_practice(tmp_path, configs, db_url, agent, learner, *priced, "--max_cost", "0.3")
    assert first.returncode == 3 and "of max_cost $0.3000: stopped" in first.stderr, first.stderr
    assert not (tmp_path / "runs/t/enhanced_agent.yaml").exists()
    paid = [r for r in work_requests(agent) if "response_format" not in r]
    judged = query(db_url, "SELECT count(*) FROM evaluation_data WHERE stage = 'judged'")[0][0]
    assert 0 < len(paid) < 8 and judged == len(paid)  # part-way through step 0, and no paid attempt lost
    rest = run_practice(tmp_path, configs, db_url, agent, learner, *priced)
    assert rest.returncode == 0, rest.stderr
    assert query(db_url, "SELECT count(*) FROM evaluation_data WHERE stage != 'judged'") == [(0,)]


def test_a_wrong_key_stops_practice_at_once_and_records_no_step(tmp_path, workspace, stub):
    configs, db_url = workspace
    script = agent_script()
    script.fault_fn = lambda body: "http401"
    agent = stub(script)
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "401 unauthorized: set a valid UTU_LLM_API_KEY" in errors[0]
    assert agent.request_count <= 4  # the requests in flight, no retries, no further attempts
    assert query(db_url, "SELECT count(*) FROM practice_steps") == [(0,)]
    assert not (tmp_path / "runs/t/enhanced_agent.yaml").exists()


def test_a_client_that_fails_at_once_gives_one_line_and_no_traceback(tmp_path):
    """No llama-server: the client fails before the database is ready. aiosqlite's cancelled connect once
    printed a thread's traceback ("Event loop is closed") after the error line."""
    env = {
        "UTU_LLM_BASE_URL": "",
        "UTU_LLM_MODEL": "",
        "UTU_LLM_API_KEY": "",
        "UTU_LLAMA_SERVER": "/nonexistent",
        "UTU_STATE_DIR": str(tmp_path / "state"),
    }  # not the suite's running embedded model: none to reuse
    result = run_script(PRACTICE, "--config_name", "math_reasoning", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "error: UTU_LLAMA_SERVER=/nonexistent is not an executable file; the embedded model needs llama.cpp's "
        "llama-server: run `make install-local` in a clone of utu (it builds it once) or point UTU_LLAMA_SERVER at "
        "one, or set UTU_LLM_BASE_URL, UTU_LLM_MODEL and UTU_LLM_API_KEY to use an API"
    ]


@pytest.mark.parametrize("dead", ["ftp://x/v1", "http://127.0.0.1:9/v1"])
def test_a_practice_whose_endpoint_fails_at_start_writes_nothing(tmp_path, dead):
    """The database was created, the data sets loaded and the experiment registered before the clients' first
    call; and runs/<exp_id>/ was made, empty."""
    env = {"UTU_LLM_BASE_URL": dead, "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    result = run_script(PRACTICE, "--config_name", "math_reasoning", env=env, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("error:") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_a_practice_of_a_data_set_that_is_nowhere_writes_nothing(tmp_path, stub):
    agent = stub(agent_script())
    env = {"UTU_LLM_BASE_URL": agent.base_url, "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    argv = [PRACTICE, "--config_name", "math_reasoning", "data.practice_dataset_name=NoSuchSet"]
    result = run_script(*argv, env=env, cwd=tmp_path)
    assert result.returncode == 2 and "'NoSuchSet' is not in" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_two_practices_of_one_experiment_at_once_one_is_refused(tmp_path, workspace, stub):
    import subprocess
    import sys
    import time

    from tests.practice.helpers import PRACTICE

    configs, db_url = workspace
    slow = agent_script()
    slow.latency = 30
    agent, learner = stub(slow), stub(evolving_learner())
    env = {
        **os.environ,
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "a",
        "UTU_LLM_API_KEY": "k",
        "LEARNER_URL": learner.base_url,
    }
    command = [sys.executable, PRACTICE, "--config_name", "test", "--db_url", db_url]
    first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while agent.request_count == 0 and time.monotonic() < deadline:  # it holds the lease once it rolls out
            time.sleep(0.1)
        second = run_practice(tmp_path, configs, db_url, stub(agent_script()), learner)
        assert second.returncode == 2, second.stderr
        assert f"exp_id 't' is being run by pid {first.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.kill()
        first.wait()


def test_a_truncation_set_for_one_practice_set_is_not_applied_to_another_silently(tmp_path, workspace, stub):
    configs, db_url = workspace
    config = (configs / "practice" / "test.yaml").read_text()
    (configs / "practice" / "cut.yaml").write_text(
        config.replace("practice_dataset_name: Arith", "practice_dataset_name: Arith\n  rollout_data_truncate: 2")
    )
    upload = run_script(
        "scripts/data/upload_dataset.py",
        "--file_path",
        str(tmp_path / "arith.jsonl"),
        "--dataset_name",
        "Arith2",
        "--db_url",
        db_url,
    )
    assert upload.returncode == 0, upload.stderr
    env = {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": stub(agent_script()).base_url,
        "UTU_LLM_MODEL": "a",
        "UTU_LLM_API_KEY": "k",
        "LEARNER_URL": stub(evolving_learner()).base_url,
    }
    result = run_script(
        PRACTICE,
        "--config_name",
        "cut",
        "--db_url",
        db_url,
        "--practice_dataset_name",
        "Arith2",
        "--epochs",
        "1",
        "--batch_size",
        "4",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "rollout_data_truncate (2) was set for Arith: not applied to Arith2" in " ".join(result.stderr.split())
    assert query(db_url, "SELECT count(DISTINCT dataset_index) FROM evaluation_data") == [(4,)]  # all of Arith2


def test_an_attempt_shorter_than_its_summary_goes_on_as_it_is(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(evolving_learner())
    short = stub(agent_script(working="2 and 1 make 3. "))  # far shorter than a summary may be
    result = run_practice(tmp_path, configs, db_url, short, learner, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    assert not [r for r in learner.requests if schema_of(r) == "AttemptSummary"]  # no call spent on it
    advantage = next(r for r in learner.requests if schema_of(r) == "GroupAdvantage")
    assert "[assistant] 2 and 1 make 3. The answer is" in advantage["messages"][1]["content"]
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert all("learner.summary" not in s["usage"] for s in stats) and all(s["groups_used"] == 2 for s in stats)


def test_the_learner_is_told_which_attempts_the_token_limit_cut(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(evolving_learner())
    agent = stub(agent_script(pattern=("right", "cut"), working="2 and 1 make 3. "))
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    stops = {json.loads(m)["stop_reason"] for (m,) in query(db_url, "SELECT meta FROM evaluation_data")}
    assert stops == {"final", "max_tokens"}
    advantage = next(r for r in learner.requests if schema_of(r) == "GroupAdvantage")["messages"][1]["content"]
    assert "Attempt 1 (reward 1)\nVerifier: extracted " in advantage
    assert "Attempt 2 (reward 0; cut off at the agent's token limit before it finished)\nVerifier: " in advantage


@pytest.mark.parametrize("shared", [True, False], ids=["learner-on-the-agent-client", "learner-on-its-own-client"])
def test_group_learning_waits_for_the_step_rollouts_only_on_a_shared_client(tmp_path, workspace, stub, shared):
    """Pipelining: a group's learner calls start when the group is judged. On the agent's own client they
    first let every rollout of the step take its slot (else they delay the last rollouts by one round:
    benchmarks/speed/practice_step.py at a fixed latency); on a learner client of their own they start at once. The
    order in which requests reach the stubs is asserted, not their times."""
    configs, db_url = workspace
    kinds: list[str] = []
    agent_replies, learner_replies = agent_script().reply_fn, evolving_learner().reply_fn

    def rollout(body):
        kinds.append("rollout")
        return agent_replies(body)

    def learn(body):
        if not is_probe(body):
            kinds.append("learner")
        return learner_replies(body)

    if shared:
        both = stub(StubScript(reply_fn=lambda b: learn(b) if schema_of(b) or is_probe(b) else rollout(b), latency=0.3))
        agent = learner = both
        extra = ["~practice.learner_model"]
    else:
        agent, learner = stub(StubScript(reply_fn=rollout, latency=0.3)), stub(StubScript(reply_fn=learn))
        extra = []
    # one step: 4 questions x G=2, one rollout at a time, so groups are judged while others still wait
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        agent,
        learner,
        "--epochs",
        "1",
        "--batch_size",
        "4",
        "--rollout_concurrency",
        "1",
        *extra,
    )
    assert result.returncode == 0, result.stderr
    assert kinds.count("rollout") == 8
    rollouts_after_the_first_learner_call = kinds[kinds.index("learner") :].count("rollout")
    if shared:
        assert rollouts_after_the_first_learner_call <= 1  # sent with the last rollout at the earliest
    else:
        assert rollouts_after_the_first_learner_call >= 2  # while rollouts were still to come


STORY = "When adding {} plus {}, line up the digits."  # the strategy is general; the numbers are its question's
RESTATED = "Adding two numbers: line up the digits."


def restating_learner(restated: str = RESTATED) -> StubScript:
    """evolving_learner, whose advantage tells its question's story, and which restates it when asked."""
    evolving = evolving_learner().reply_fn

    def reply(body):
        if is_probe(body) or schema_of(body) not in ("GroupAdvantage", "Restated"):
            return evolving(body)
        numbers = re.search(r"What is (\d+) plus (\d+)\?", body["messages"][1]["content"]).groups()
        if schema_of(body) == "GroupAdvantage":
            return json.dumps({"analysis": "one was right", "experiences": [STORY.format(*numbers)]})
        kind, strategy = restated.format(*numbers).removesuffix(".").split(": ")
        return json.dumps({"problem_kind": kind.lower(), "strategy": strategy})

    return StubScript(reply_fn=reply)


def test_a_proposal_told_as_its_questions_story_is_restated_and_screened_again(tmp_path, workspace, stub):
    configs, db_url = workspace
    learner = stub(restating_learner())
    result = run_practice(tmp_path, configs, db_url, stub(agent_script()), learner, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    # The two groups' stories are merged into one proposal (evolving_learner's consolidation), restated once.
    (row,) = query(db_url, "SELECT kind, status, new_text, rationale FROM experience_operations WHERE step = 0")
    assert row[:3] == ("ADD", "applied", RESTATED)
    first = re.search(r"first wrote '(When adding (\d+) plus (\d+), line up the digits\.)', which (.*)", row[3])
    assert first and first[4].startswith("names 3 particulars of its question")  # the log keeps both texts
    (asked,) = [r for r in work_requests(learner) if schema_of(r) == "Restated"]
    user = asked["messages"][1]["content"]
    assert first[1] in user and f"What is {first[2]} plus {first[3]}?" in user and "names 3 particulars" in user

    # A restatement that still tells the story is refused, as the first text was; with the knob off, no call.
    configs, db_url = setup_workspace(tmp_path / "again")
    still = stub(restating_learner(restated="Adding {} plus {}: carry the tens."))
    again = run_practice(tmp_path / "again", configs, db_url, stub(agent_script()), still, "--epochs", "1")
    assert again.returncode == 2
    (row,) = query(db_url, "SELECT status, reason FROM experience_operations WHERE step = 0")
    assert row[0] == "refused" and row[1].startswith("junk: names 3 particulars")
    configs, db_url = setup_workspace(tmp_path / "off")
    off = stub(restating_learner())
    args = ("--epochs", "1", "--restate_refused", "false")
    result = run_practice(tmp_path / "off", configs, db_url, stub(agent_script()), off, *args)
    assert result.returncode == 2 and "learned nothing" in result.stderr
    assert not [r for r in work_requests(off) if schema_of(r) == "Restated"]
    (row,) = query(db_url, "SELECT status, reason, rationale FROM experience_operations WHERE step = 0")
    assert row[0] == "refused" and row[1].startswith("junk: names 3 particulars")
    assert "restated" not in row[2]


def test_a_step_with_too_little_contrast_rolls_out_reserve_questions(tmp_path, workspace, stub):
    """`practice.top_up`: the agent always answers the two practised questions right (no contrast); with
    `min_groups 1` each step (one question each) rolls out one question of the set past `rollout_data_truncate`,
    a new one each step, and learns from it; the rerun reuses the steps. Without the top-up it learns nothing;
    without a truncation, or with the validation slice in the reserve, it is refused at once."""
    configs, db_url = workspace
    easy = list(QUESTIONS)[:2]
    kinds = {q: ("right",) if q in easy else ("right", "wrong") for q in QUESTIONS}
    steps = ["--epochs", "1", "--rollout_data_truncate", "2", "--batch_size", "1"]
    top_up = ["--top_up_min_groups", "1", "--top_up_questions", "1"]
    agent, learner = stub(agent_script(kinds)), stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, agent, learner, *steps, *top_up)
    assert result.returncode == 0, result.stderr
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert [(s["questions"], s["questions_added"], s["groups_used"]) for s in stats] == [(2, 1, 1)] * 2
    assert StepStats.model_validate(stats[0]).groups == "1/1 (+1)"  # as the step tables show it
    assert agent.request_count == 2 * 2 * 2  # G=2: each step's question, then its reserve question
    said = " ".join(result.stderr.split())  # as the plan said at the start, a bound that held exactly here
    assert "plan: 2 steps, at most 8 agent attempts (4 rollouts, up to 4 top-up rollouts)," in said
    by_step = "SELECT DISTINCT dataset_index FROM evaluation_data WHERE owner = 't' AND step = ?"
    step_0, step_1 = ({i for (i,) in query(db_url, by_step, step)} for step in (0, 1))
    assert 2 in step_0 and 3 in step_1 and (step_0 | step_1) == {0, 1, 2, 3}
    (sources,) = query(db_url, "SELECT source_questions FROM experience_operations WHERE step = 0")
    assert json.loads(sources[0]) == [2]  # learned from the reserve's group
    again = run_practice(tmp_path, configs, db_url, agent, learner, *steps, *top_up)
    assert again.returncode == 0 and agent.request_count == 2 * 2 * 2  # the saved steps are reused

    result = run_practice(tmp_path, configs, db_url, agent, learner, *steps, "--exp_id", "plain")
    assert result.returncode == 2 and "none of 2 groups carried contrast" in result.stderr

    validation = ["--validation_dataset", "Arith", "--validation_offset", "3", "--validation_size", "1"]
    calls = agent.request_count
    for refused, flags, said in (
        ("untruncated", top_up, "practice.top_up needs data.rollout_data_truncate"),
        ("validated", [*steps, *top_up, *validation], "practice.validation takes 3-3 of it: move the validation"),
    ):
        result = run_practice(tmp_path, configs, db_url, agent, learner, "--exp_id", refused, *flags)
        assert result.returncode == 2 and said in " ".join(result.stderr.split()), refused
        assert len(result.stderr.strip().splitlines()) == 1 and agent.request_count == calls


def advantage_prompts(learner) -> list[tuple[str, str]]:
    return [
        (r["messages"][0]["content"], r["messages"][1]["content"])
        for r in learner.requests
        if schema_of(r) == "GroupAdvantage"
    ]


def test_all_lost_groups_per_step_studies_that_many_groups_that_all_lost_against_the_ground_truth(
    tmp_path, workspace, stub
):
    """One step of the 4 questions: one always wrong, one with contrast, one always right, one always wrong. With
    `all_lost_groups_per_step 1` the learner studies the contrast group as ever and the first all-lost group in
    the step's order, told that none is better; the all-right group and the second all-lost one are skipped."""
    configs, db_url = workspace
    q = list(QUESTIONS)
    kinds = {q[0]: ("wrong",), q[1]: ("right", "wrong"), q[2]: ("right",), q[3]: ("wrong",)}
    agent, learner = stub(agent_script(kinds)), stub(evolving_learner())
    one_step = ["--epochs", "1", "--batch_size", "4", "--all_lost_groups_per_step", "1"]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *one_step)
    assert result.returncode == 0, result.stderr
    (stats,) = [StepStats.model_validate_json(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert (stats.groups_used, stats.groups_skipped, stats.groups_all_lost) == (2, 2, 1)
    assert stats.groups == "2/2, 1 all lost"
    prompts = advantage_prompts(learner)
    lost = [user for system, user in prompts if "Every attempt lost: none is better" in system]
    contrast = [user for system, user in prompts if "Judge which attempts are better and which worse" in system]
    assert len(prompts) == 2 and len(lost) == 1 and len(contrast) == 1
    order = [i for (i,) in query(db_url, "SELECT DISTINCT dataset_index FROM evaluation_data ORDER BY id")]
    first_lost = next(i for i in order if i in (0, 3))  # the first all-lost question of the step's order
    assert q[first_lost] in lost[0] and q[1] in contrast[0]

    plain = run_practice(tmp_path, configs, db_url, agent, learner, *one_step[:4], "--exp_id", "plain")
    assert plain.returncode == 0, plain.stderr
    (stats,) = [
        StepStats.model_validate_json(s)
        for (s,) in query(db_url, "SELECT stats FROM practice_steps WHERE exp_id='plain'")
    ]
    assert (stats.groups_used, stats.groups_all_lost) == (1, 0)


def test_groups_that_all_lost_share_the_step_s_count_with_its_top_up(tmp_path, workspace, stub):
    """Always wrong: each step of one question tops up one more, and of its 2 all-lost groups studies 1, its
    batch's question (the first in the step's order), not the top-up's."""
    configs, db_url = workspace
    agent, learner = stub(agent_script(pattern=("wrong",))), stub(evolving_learner())
    steps = ["--epochs", "1", "--rollout_data_truncate", "2", "--batch_size", "1"]
    top_up = ["--top_up_min_groups", "1", "--top_up_questions", "1", "--all_lost_groups_per_step", "1"]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *steps, *top_up)
    assert result.returncode == 0, result.stderr
    stats = [
        StepStats.model_validate_json(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")
    ]
    assert [s.groups for s in stats] == ["1/1 (+1), 1 all lost"] * 2
    sources = {json.loads(s)[0] for (s,) in query(db_url, "SELECT source_questions FROM experience_operations")}
    assert sources <= {0, 1}  # the batches' questions; the top-up's are 2 and 3


def test_a_top_up_group_that_all_lost_is_studied_when_the_batch_s_had_contrast(tmp_path, workspace, stub):
    """The practised questions show contrast, the reserve's are always wrong: with `min_groups 2` each step tops up
    one question, and its all-lost group is studied, chosen after the top-up."""
    configs, db_url = workspace
    q = list(QUESTIONS)
    kinds = {q[0]: ("right", "wrong"), q[1]: ("right", "wrong"), q[2]: ("wrong",), q[3]: ("wrong",)}
    agent, learner = stub(agent_script(kinds)), stub(evolving_learner())
    steps = ["--epochs", "1", "--rollout_data_truncate", "2", "--batch_size", "1"]
    top_up = ["--top_up_min_groups", "2", "--top_up_questions", "1", "--all_lost_groups_per_step", "1"]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *steps, *top_up)
    assert result.returncode == 0, result.stderr
    rows = query(db_url, "SELECT stats FROM practice_steps ORDER BY step")
    assert [StepStats.model_validate_json(s).groups for (s,) in rows] == ["2/0 (+1), 1 all lost"] * 2


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--given_ground_truth", "false"], "needs given_ground_truth"),
        (["--grpo_n", "1"], "needs grpo_n of 2 or more"),
        (["--all_lost_groups_per_step", "0"], "greater than 0"),
    ],
)
def test_all_lost_groups_per_step_that_cannot_work_is_refused_before_any_work(tmp_path, workspace, stub, flags, said):
    configs, db_url = workspace
    agent = stub(agent_script())
    result = run_practice(
        tmp_path, configs, db_url, agent, stub(evolving_learner()), "--all_lost_groups_per_step", "1", *flags
    )
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and agent.request_count == 0


def test_an_mcp_servers_keys_are_exported_as_the_references_they_were_written_as(tmp_path, monkeypatch):
    from utu.config import load_agent_config
    from utu.config.loader import agent_source
    from utu.practice.export import agent_yaml, enhanced_agent
    from utu.practice.library import Library

    monkeypatch.setenv("MCP_TOKEN", "tok_live_0123456789abcdefSECRET")
    path = tmp_path / "mcp_agent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "mcp_agent",
                "instructions": "Use the tools.",
                "model": {"model_provider": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "k"}},
                "toolkits": [
                    {
                        "name": "mcp",
                        "url": "http://127.0.0.1:9/mcp?key=${oc.env:MCP_TOKEN}",
                        "headers": {"Authorization": "Bearer ${oc.env:MCP_TOKEN}", "X-Team": "maths"},
                    },
                    {
                        "name": "mcp",
                        "command": ["srv", "--token", "${oc.env:MCP_TOKEN}"],
                        "env": {"GITHUB_TOKEN": "${oc.env:MCP_TOKEN}", "LEVEL": "2"},
                    },
                ],
            }
        )
    )
    agent = load_agent_config(str(path))
    assert agent.toolkits[1].env["GITHUB_TOKEN"] == "tok_live_0123456789abcdefSECRET"  # resolved to run
    text = agent_yaml(enhanced_agent(agent, Library({"G0": "Check the units."}, 1)), agent_source(str(path)))
    assert "SECRET" not in text  # written to runs/<exp_id>/ and configs/: the references, as the user wrote them
    exported = yaml.safe_load(text)
    assert exported["toolkits"][0]["headers"] == {"Authorization": "Bearer ${oc.env:MCP_TOKEN}", "X-Team": "maths"}
    assert exported["toolkits"][0]["url"].endswith("?key=${oc.env:MCP_TOKEN}")
    assert exported["toolkits"][1]["env"] == {"GITHUB_TOKEN": "${oc.env:MCP_TOKEN}", "LEVEL": "2"}
    assert exported["toolkits"][1]["command"] == ["srv", "--token", "${oc.env:MCP_TOKEN}"]


def test_a_truncation_past_the_set_is_said(tmp_path, workspace, stub):
    configs, db_url = workspace  # Arith: 4 questions
    agent, learner = stub(agent_script()), stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1", "--rollout_data_truncate", "100")
    said = " ".join(result.stderr.split())
    assert "data set Arith holds 4 questions, fewer than rollout_data_truncate 100: practising on those" in said, said


def test_an_output_folder_rich_would_read_as_markup_is_said_as_written(tmp_path, workspace, stub):
    """The closing lines name the enhanced agent's path: an --output_dir holding '[/x]' ended a finished practice in
    rich's MarkupError."""
    configs, db_url = workspace
    agent, learner = stub(agent_script()), stub(evolving_learner())
    result = run_practice(tmp_path, configs, db_url, agent, learner, "--epochs", "1", "--output_dir", "out[/x]")
    assert result.returncode == 0, result.stderr[-2000:]
    said = "".join(result.stdout.split())
    assert "--agent_configout[/x]/t/enhanced_agent.yaml" in said.replace(str(tmp_path) + "/", ""), result.stdout
