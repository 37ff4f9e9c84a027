"""Practice survives a faulty API and a SIGKILL: everything ends judged or recorded, nothing is lost or doubled."""

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.practice.helpers import (
    PRACTICE,
    QUESTIONS,
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


def kill_mid_step_1(workdir, configs, db_url, stub):
    """Run practice until the first rollout of step 1 kills it (SIGKILL): step 0 is saved, step 1 is not. Returns
    the stubs (agent, learner) to resume it with."""
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
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    practice.append(proc)
    assert proc.wait(timeout=120) == -signal.SIGKILL  # killed by its own step-1 rollout, not finished
    assert query(db_url, "SELECT count(*) FROM experience_snapshots") == [(1,)]  # step 1 was interrupted
    return agent, learner


def test_sigkill_mid_step_then_rerun_matches_an_uninterrupted_run(tmp_path, stub):
    whole_dir, killed_dir = tmp_path / "whole", tmp_path / "killed"
    whole_dir.mkdir(), killed_dir.mkdir()
    configs, whole_db = setup_workspace(whole_dir)
    assert (
        run_practice(whole_dir, configs, whole_db, stub(agent_script()), stub(evolving_learner()), *ARGS).returncode
        == 0
    )

    configs, db_url = setup_workspace(killed_dir)
    agent, learner = kill_mid_step_1(killed_dir, configs, db_url, stub)

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


def test_killed_then_parked_and_unparked_on_another_machine_it_resumes_as_an_uninterrupted_run(tmp_path, stub):
    """The learning suite's `park` (benchmarks/learning/suite_park.py) carries a practice stopped midway to a
    machine with an empty runs/: there it resumes at the step it stopped in, as if never moved."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "learning"))
    import suite_park

    whole_dir, killed_dir, moved_dir = tmp_path / "whole", tmp_path / "killed", tmp_path / "moved"
    for d in (whole_dir, killed_dir, moved_dir):
        d.mkdir()
    configs, whole_db = setup_workspace(whole_dir)
    whole = run_practice(whole_dir, configs, whole_db, stub(agent_script()), stub(evolving_learner()), *ARGS)
    assert whole.returncode == 0, whole.stderr
    configs, killed_db = setup_workspace(killed_dir)
    agent, learner = kill_mid_step_1(killed_dir, configs, killed_db, stub)

    archive = tmp_path / "parked.tar.gz"
    killed_path = Path(killed_db.removeprefix("sqlite:///"))
    assert suite_park.park(killed_path, {"t": tmp_path / "no_gepa", "other": tmp_path / "none"}, archive) == ["t"]
    moved_path = moved_dir / "p.db"
    assert suite_park.unpark(archive, moved_path, moved_dir / "gepa") == ["t"]
    configs, moved_db = setup_workspace(moved_dir)  # the suite uploads the data set again before each run
    assert moved_db == f"sqlite:///{moved_path}"

    served_before = len(agent.requests)
    resumed = run_practice(moved_dir, configs, moved_db, agent, learner, *ARGS)
    assert resumed.returncode == 0, resumed.stderr
    # step 0 came from the parked file, not run again: every rollout after the move carries step 0's library
    after = agent.requests[served_before:]
    assert after and all("line up" in body["messages"][0]["content"] for body in after)
    per_question = "SELECT step, dataset_index, count(*) FROM evaluation_data GROUP BY 1, 2 ORDER BY 1, 2"
    assert query(moved_db, per_question) == query(whole_db, per_question)
    snapshots = "SELECT step FROM experience_snapshots ORDER BY step"
    assert query(moved_db, snapshots) == query(whole_db, snapshots) == [(0,), (1,)]


def test_attempts_scored_without_an_answer_are_counted_and_said(tmp_path, stub):
    """A verifier that fails on some attempts, and empty replies: each scores as a wrong answer, which the step's
    statistics count and its log says, so a run that learned from such rewards does not read like a clean one."""
    configs, db_url = setup_workspace(tmp_path)
    flaky = tmp_path / "flaky.py"
    flaky.write_text(
        "from utu.verify.math import verify_func as math\n\n"
        "def verify_func(sample, timeout_score=0, **kw):\n"
        "    if '{0}' in sample.response:\n"
        "        raise ValueError('cannot read it')\n"
        "    return {'reward': float('{' + sample.correct_answer + '}' in sample.response)}\n"
    )
    kinds = itertools.cycle([("right", "empty"), ("right", "wrong")])  # of 4 questions, 2 empty replies, 2 errors
    agent = stub(agent_script(pattern={question: next(kinds) for question in QUESTIONS}))
    verify = f"evaluation.verify_filename={flaky}"
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), *ARGS, verify)
    assert result.returncode == 0, result.stderr
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert sum(s["verifier_errors"] for s in stats) == 2 and sum(s["replies_empty"] for s in stats) == 2
    said = " ".join(result.stderr.split())  # (the log wraps at 80 columns)
    assert said.count("attempts had a verifier that failed (scored timeout_score)") >= 1
    assert said.count("attempts got an empty reply") >= 1
