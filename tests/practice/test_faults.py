"""Practice survives a faulty API and a SIGKILL: everything ends judged or recorded, nothing is lost or doubled."""

import itertools
import json
import os
import signal
import subprocess
import sys

from tests.practice.helpers import (
    PRACTICE,
    TEST_CONFIG,
    agent_script,
    evolving_learner,
    query,
    run_practice,
    setup_workspace,
)
from utu.llm.stub import StubScript

# Short timeouts so that injected hangs are cut quickly; retries absorb the injected errors.
FAULTY_CONFIG = TEST_CONFIG.replace(
    "      retry_base_delay: 0.01\n      max_retries: 1\n",
    "      retry_base_delay: 0.01\n      max_retries: 4\n      timeout: 1.0\n",
).replace(
    "    retry_base_delay: 0.01\n    max_retries: 1\n",
    "    retry_base_delay: 0.01\n    max_retries: 4\n    timeout: 1.0\n",
)
ARGS = ["--epochs", "1", "--batch_size", "2", "--task_timeout", "20"]  # 4 questions -> 2 steps of 2 groups
STEPS, G = 2, 2


def faulty(script: StubScript, seed: int) -> StubScript:
    script.fault_sequence = ["hang", "http500", "http429"]  # each kind surely happens, then at random
    script.fault_rates = {"http500": 0.10, "http429": 0.05, "hang": 0.05}
    script.retry_after, script.hang_seconds, script.seed = 0.05, 3.0, seed
    return script


def malformed_sometimes(script: StubScript) -> StubScript:
    """Every 10th learner reply is not JSON (10%)."""
    good, counter = script.reply_fn, itertools.count(1)
    script.reply_fn = lambda body: "this is {not json" if next(counter) % 10 == 0 else good(body)
    return script


def test_a_faulty_api_never_breaks_practice(tmp_path, stub):
    assert FAULTY_CONFIG != TEST_CONFIG
    configs, db_url = setup_workspace(tmp_path, FAULTY_CONFIG)
    agent = stub(faulty(agent_script(), seed=1))
    learner = stub(faulty(malformed_sometimes(evolving_learner()), seed=2))
    result = run_practice(tmp_path, configs, db_url, agent, learner, *ARGS)
    assert result.returncode == 0, result.stderr
    assert set(agent.faults_served) | set(learner.faults_served) >= {"http500", "http429", "hang"}
    rows = query(db_url, "SELECT step, dataset_index, attempt, stage FROM evaluation_data")
    assert len(rows) == STEPS * 2 * G
    assert len({(s, i, a) for s, i, a, _ in rows}) == len(rows)  # no duplicates
    assert {stage for *_, stage in rows} <= {"judged", "failed"}  # every attempt ended one way or the other
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert len(stats) == STEPS and query(db_url, "SELECT count(*) FROM experience_snapshots") == [(STEPS,)]
    assert sum(s["attempts_failed"] for s in stats) == sum(stage == "failed" for *_, stage in rows)
    assert sum(s["attempts"] for s in stats) == len(rows)
    errors = query(db_url, "SELECT count(*) FROM learner_errors")[0][0]
    assert sum(s["learner_errors"] for s in stats) == errors


def test_sigkill_mid_step_then_rerun_matches_an_uninterrupted_run(tmp_path, stub):
    whole_dir, killed_dir = tmp_path / "whole", tmp_path / "killed"
    whole_dir.mkdir(), killed_dir.mkdir()
    configs, whole_db = setup_workspace(whole_dir)
    assert (
        run_practice(whole_dir, configs, whole_db, stub(agent_script()), stub(evolving_learner()), *ARGS).returncode
        == 0
    )

    configs, db_url = setup_workspace(killed_dir)
    practice: list[subprocess.Popen] = []
    replies = agent_script().reply_fn

    def kill_at_step_1(body):
        """Step 1's rollouts carry step 0's library ("line up"): the first one kills the run, mid-step."""
        if "line up" in body["messages"][0]["content"] and practice:
            practice.pop().send_signal(signal.SIGKILL)
        return replies(body)

    agent, learner = stub(StubScript(reply_fn=kill_at_step_1)), stub(evolving_learner())
    env = {
        **os.environ,
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "agent",
        "UTU_LLM_API_KEY": "k",
        "LEARNER_URL": learner.base_url,
    }
    proc = subprocess.Popen(
        [sys.executable, PRACTICE, "--config_name", "test", "--db_url", db_url, *ARGS],
        cwd=killed_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    practice.append(proc)
    assert proc.wait(timeout=120) == -signal.SIGKILL  # killed by its own step-1 rollout, not finished
    assert query(db_url, "SELECT count(*) FROM experience_snapshots") == [(1,)]  # step 1 was interrupted

    resumed = run_practice(killed_dir, configs, db_url, agent, learner, *ARGS)
    assert resumed.returncode == 0, resumed.stderr
    per_question = (
        "SELECT step, dataset_index, count(*) FROM evaluation_data GROUP BY step, dataset_index ORDER BY 1, 2"
    )
    assert query(db_url, per_question) == query(whole_db, per_question)
    assert {c for *_, c in query(db_url, per_question)} == {G}
    snapshots = "SELECT step FROM experience_snapshots ORDER BY step"
    assert query(db_url, snapshots) == query(whole_db, snapshots) == [(0,), (1,)]
    assert query(db_url, "SELECT count(*) FROM practice_steps") == [(STEPS,)]
    assert {stage for (stage,) in query(db_url, "SELECT stage FROM evaluation_data")} == {"judged"}
