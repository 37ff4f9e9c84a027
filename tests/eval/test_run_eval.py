"""scripts/run_eval.py end to end against the stub LLM: metrics, resume after SIGKILL, errors, compare."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from tests.conftest import ROOT, run_script
from utu.llm.stub import StubScript

RUN_EVAL = str(ROOT / "scripts/run_eval.py")
QUESTIONS = [json.loads(line) for line in (ROOT / "dataset/MAWPS_singleop.jsonl").read_text().splitlines()[:6]]
# Per question, the answers its attempts get, in order of arrival (so totals do not depend on scheduling).
PLAN = {
    q["question"]: [q["answer"], "0"] if i % 3 == 0 else [q["answer"]] * 2 if i % 3 == 1 else ["-1"] * 2
    for i, q in enumerate(QUESTIONS)
}


def scripted(plan=PLAN):
    served: dict[str, int] = defaultdict(int)

    def reply(body):
        question = body["messages"][1]["content"]
        answers = plan[question]
        answer = answers[served[question] % len(answers)]
        served[question] += 1
        return f"Let me think. The answer is \\boxed{{{answer}}}."

    return reply


def env_for(server) -> dict[str, str]:
    return {"UTU_LLM_BASE_URL": server.base_url, "UTU_LLM_MODEL": "stub-model", "UTU_LLM_API_KEY": "k"}


def eval_args(db_url, exp_id="e1", *extra):
    return [
        RUN_EVAL,
        "--config_name",
        "local/mawps",
        "--limit",
        "6",
        "--pass_k",
        "2",
        "--exp_id",
        exp_id,
        "--concurrency",
        "2",
        "--db_url",
        db_url,
        *extra,
    ]


def rows(db_path, exp_id):
    with sqlite3.connect(db_path) as conn:
        return conn.execute(
            "SELECT dataset_index, attempt, stage, reward, error FROM evaluation_data WHERE exp_id=? ORDER BY 1, 2",
            (exp_id,),
        ).fetchall()


def rewards_by_question(db_path, exp_id):
    out = defaultdict(Counter)
    for index, _, stage, reward, _ in rows(db_path, exp_id):
        out[index][(stage, reward)] += 1
    return dict(out)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "eval.db"
    return path, f"sqlite:///{path}"


def test_metrics_equal_hand_computed_values(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())
    # Questions 0 and 3: one of two right; 1 and 4: both right; 2 and 5: none.
    assert metrics["k"] == 2
    assert metrics["mean_at_k"] == pytest.approx((0.5 + 1 + 0 + 0.5 + 1 + 0) / 6)
    assert metrics["pass_at_k"] == pytest.approx(4 / 6)
    assert metrics["unbiased_pass_at"]["1"] == pytest.approx(metrics["mean_at_k"])
    assert (metrics["attempts"], metrics["attempts_judged"], metrics["attempts_failed"]) == (12, 12, 0)
    assert server.request_count == 12
    assert "Mean@2" in result.stdout and "0.500" in result.stdout
    # Stored in the DB as well.
    with sqlite3.connect(db[0]) as conn:
        stored = json.loads(conn.execute("SELECT metrics FROM eval_results WHERE exp_id='e1'").fetchone()[0])
    assert stored["mean_at_k"] == metrics["mean_at_k"]
    # Youtu-Agent's judgement columns, filled from the verdict
    with sqlite3.connect(db[0]) as conn:
        judged = set(
            conn.execute(
                "SELECT judged_response, reward, extracted_final_answer FROM evaluation_data "
                "WHERE exp_id='e1' AND dataset_index IN (2, 5)"
            )
        )
    assert judged == {("Incorrect", 0.0, "-1")}
    # Re-running a complete experiment does nothing new.
    again = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert again.returncode == 0 and server.request_count == 12


def test_killed_mid_run_then_resumed_equals_an_uninterrupted_run(stub, tmp_path, db):
    reference = stub(StubScript(reply_fn=scripted()))
    assert run_script(*eval_args(db[1], "whole"), env=env_for(reference), cwd=tmp_path).returncode == 0

    server = stub(StubScript(reply_fn=scripted(), latency=0.3))
    proc = subprocess.Popen(
        [sys.executable, *eval_args(db[1], "killed")],
        cwd=tmp_path,
        env={**os.environ, **env_for(server)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        judged = [r for r in rows(db[0], "killed") if r[2] == "judged"] if db[0].exists() else []
        if len(judged) >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = rows(db[0], "killed")
    assert 3 <= sum(r[2] == "judged" for r in partial) < 12

    resumed = run_script(*eval_args(db[1], "killed"), env=env_for(server), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    final = rows(db[0], "killed")
    assert len(final) == 12 and {r[2] for r in final} == {"judged"}
    assert len({(r[0], r[1]) for r in final}) == 12  # no duplicates
    assert rewards_by_question(db[0], "killed") == rewards_by_question(db[0], "whole")
    assert server.request_count <= 12 + 2  # at most the attempts in flight at the kill are redone
    m_whole = json.loads((tmp_path / "runs/whole/eval_metrics.json").read_text())
    m_killed = json.loads((tmp_path / "runs/killed/eval_metrics.json").read_text())
    for key in ("mean_at_k", "pass_at_k", "unbiased_pass_at", "attempts_judged", "mean_at_k_ci95"):
        assert m_killed[key] == m_whole[key]


def test_failed_attempts_fail_the_run_are_stored_and_retried_on_rerun(stub, tmp_path, db):
    broken = QUESTIONS[2]["question"]
    state = {"fixed": False}

    def fault(body):  # the broken question's requests get HTTP 400 (not retried) until "fixed"
        return "http400" if body["messages"][1]["content"] == broken and not state["fixed"] else None

    server = stub(StubScript(reply_fn=scripted(), fault_fn=fault))
    result = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert (
        "e1: 2 of 12 attempts failed; first error:" in result.stderr and "run the same command again" in result.stderr
    )
    failed = [r for r in rows(db[0], "e1") if r[2] == "failed"]
    assert [(r[0], r[1]) for r in failed] == [(2, 0), (2, 1)]
    assert all("400" in r[4] for r in failed)
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()  # a failed run leaves no result file
    allowed = run_script(*eval_args(db[1], "e1", "--max_failed_share", "0.2"), env=env_for(server), cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr  # 2 of 12 is within 20%
    metrics = json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())
    assert (metrics["attempts_failed"], metrics["attempts_judged"]) == (2, 10)
    state["fixed"] = True
    assert run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path).returncode == 0
    assert {r[2] for r in rows(db[0], "e1")} == {"judged"}


def test_a_wrong_key_stops_the_run_at_once(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted(), fault_fn=lambda body: "http401"))
    start = time.perf_counter()
    result = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "401 unauthorized: set a valid UTU_LLM_API_KEY" in errors[0]
    assert server.request_count <= 4  # the requests in flight when the first 401 came back (2), no retries
    assert time.perf_counter() - start < 30


def test_a_dead_endpoint_stops_the_run_before_any_work(tmp_path, db):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"UTU_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1", "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    start = time.perf_counter()
    result = run_script(*eval_args(db[1]), env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot reach the endpoint" in result.stderr and "UTU_LLM_BASE_URL" in result.stderr
    assert time.perf_counter() - start < 30
    assert not db[0].exists()  # found before the database was opened: nothing written


def test_nothing_judged_is_no_result_and_a_failure(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted(), fault_fn=lambda body: "http400"))
    result = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2
    assert "95% CI" not in result.stdout  # no table of zeros that reads like a result
    assert "12 of 12 attempts failed" in result.stderr
    assert not list(tmp_path.glob("**/eval_metrics.json"))  # nothing that looks like a result
    with sqlite3.connect(db[0]) as conn:
        assert conn.execute("SELECT count(*) FROM eval_results").fetchone() == (0,)
    for pair in (["e1", "e1"], ["e1", "other"]):
        compared = run_script(RUN_EVAL, "--compare", *pair, "--db_url", db[1], cwd=tmp_path)
        assert compared.returncode == 2, compared.stdout
    assert "both runs are 'e1'" in compared.stderr or "has no result" in compared.stderr


def test_empty_replies_everywhere_are_no_result_and_fresh_drops_the_old_one(stub, tmp_path, db):
    good = stub(StubScript(reply_fn=scripted()))
    assert run_script(*eval_args(db[1], "base"), env=env_for(good), cwd=tmp_path).returncode == 0
    assert run_script(*eval_args(db[1]), env=env_for(good), cwd=tmp_path).returncode == 0
    server = stub(StubScript(reply_fn=lambda body: ""))
    result = run_script(*eval_args(db[1], "e1", "--fresh"), env=env_for(server), cwd=tmp_path)
    assert result.returncode != 0 and "final reply was empty in all 12 attempts" in result.stderr, result.stderr
    assert "95% CI" not in result.stdout
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()  # the earlier result went with --fresh
    compared = run_script(RUN_EVAL, "--compare", "base", "e1", "--db_url", db[1], cwd=tmp_path)
    assert compared.returncode == 2 and "run 'e1' has no result" in compared.stderr, compared.stderr


def test_questions_without_answers_are_refused_before_any_work(stub, tmp_path, db):
    data = tmp_path / "half.jsonl"
    data.write_text(
        json.dumps({"question": "What is 2 plus 2?", "answer": "4"})
        + "\n"
        + json.dumps({"question": "What is 3 plus 3?"})
        + "\n"
    )
    upload = run_script(
        "scripts/data/upload_dataset.py", "--file_path", str(data), "--dataset_name", "Half", "--db_url", db[1]
    )
    assert upload.returncode == 0, upload.stderr
    server = stub(StubScript(reply_fn=lambda body: "\\boxed{4}"))
    args = [
        RUN_EVAL,
        "--config_name",
        "local/mawps",
        "--dataset",
        "Half",
        "--limit",
        "2",
        "--exp_id",
        "h",
        "--db_url",
        db[1],
    ]
    result = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and "1 of 2 questions have no answer (first: #1)" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and server.request_count == 0


def test_resuming_under_a_changed_config_is_refused(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    assert run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path).returncode == 0
    changed = run_script(*eval_args(db[1]), "agent.max_turns=3", env=env_for(server), cwd=tmp_path)
    assert changed.returncode == 2
    assert "changed: agent.max_turns" in changed.stderr and "--fresh" in changed.stderr
    fresh = run_script(*eval_args(db[1]), "agent.max_turns=3", "--fresh", env=env_for(server), cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert server.request_count == 24


def test_a_run_that_computed_nothing_can_be_rerun_with_a_fixed_config(stub, tmp_path, db):
    refused = stub(StubScript(reply_fn=scripted(), fault_fn=lambda body: "http400"))
    assert run_script(*eval_args(db[1]), env=env_for(refused), cwd=tmp_path).returncode == 2
    server = stub(StubScript(reply_fn=scripted()))
    fixed = run_script(*eval_args(db[1]), "agent.max_turns=3", "--limit", "3", env=env_for(server), cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr  # no --fresh needed: nothing was computed under the old config
    assert len(rows(db[0], "e1")) == 6 and server.request_count == 6  # 3 questions x K=2, the old rows gone


def test_a_verifier_that_fails_everywhere_fails_the_run_and_the_rerun_only_judges(stub, tmp_path, db):
    verify = tmp_path / "my_verify.py"
    verify.write_text("def verify_func(sample, timeout_score=0, **kw):\n    raise KeyError('gold')\n")
    server = stub(StubScript(reply_fn=scripted()))
    args = [*eval_args(db[1]), f"verify_filename={verify}"]
    failed = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert failed.returncode == 2 and "the verifier failed on all 12 attempts" in failed.stderr, failed.stderr
    assert "95% CI" not in failed.stdout  # no table of zeros that reads like a result
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()
    verify.write_text("def verify_func(sample, timeout_score=0, **kw):\n    return {'reward': 1.0}\n")
    fixed = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert server.request_count == 12  # judged again, not rolled out again
    assert {r[3] for r in rows(db[0], "e1")} == {1.0}


def test_a_verifier_edited_in_place_judges_the_stored_attempts_again(stub, tmp_path, db):
    """Fix the verifier and run the same command again: its attempts are judged by the fixed one (not rolled out
    again), and the result is the fixed one's; an unchanged verifier judges nothing again."""
    verify = tmp_path / "lenient.py"
    verify.write_text("def verify_func(sample, timeout_score=0, **kw):\n    return {'reward': 1.0}\n")
    server = stub(StubScript(reply_fn=scripted()))
    args = [*eval_args(db[1]), f"verify_filename={verify}"]
    assert run_script(*args, env=env_for(server), cwd=tmp_path).returncode == 0
    assert json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())["mean_at_k"] == 1.0
    same = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert same.returncode == 0 and "judging" not in same.stderr
    verify.write_text("def verify_func(sample, timeout_score=0, **kw):\n    return {'reward': 0.0}\n")
    edited = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert edited.returncode == 0, edited.stderr
    said = " ".join(edited.stderr.split())  # (the log wraps at 80 columns)
    assert "the verifier's file changed since its attempts were judged: 12 are judged again now" in said
    assert server.request_count == 12 and {r[3] for r in rows(db[0], "e1")} == {0.0}
    assert json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())["mean_at_k"] == 0.0
    verify.write_text("def verify_func(sample, timeout_score=0, **kw):\n    return {'reward': 0.5}\n")
    rolled = run_script(*args, "--step", "rollout", env=env_for(server), cwd=tmp_path)
    assert rolled.returncode == 0 and "12 are judged again with --step judge" in " ".join(rolled.stderr.split())
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()  # the old judgements' result went with them


def test_an_async_verifier_that_never_gives_the_loop_back_is_stopped_and_the_run_says_why(stub, tmp_path, db):
    """Computing instead of awaiting, it holds the event loop, where its timeout cannot fire: a watchdog stops each
    call, which fails like a timeout; a verifier that failed everywhere fails the run in one line."""
    verify = tmp_path / "spin.py"
    verify.write_text("async def verify_func(sample, timeout_score=0, **kw):\n    while True:\n        pass\n")
    server = stub(StubScript(reply_fn=scripted()))
    args = [*eval_args(db[1], "e1", "--limit", "1"), f"verify_filename={verify}", "verify_timeout=0.5"]
    result = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert "the verifier failed on all 2 attempts" in said and "Traceback" not in said
    assert "spin.py:verify_func: held the run past its timeout (0.5s) without awaiting, and was stopped" in said
    assert {stage for _, _, stage, _, _ in rows(db[0], "e1")} == {"judged"}  # judged as failed, kept


def test_step_rollout_then_judge(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    rolled = run_script(*eval_args(db[1]), "--step", "rollout", env=env_for(server), cwd=tmp_path)
    assert rolled.returncode == 0 and "12 of 12 attempts rolled out; judge them with --step judge" in rolled.stdout
    assert {r[2] for r in rows(db[0], "e1")} == {"rollout"}
    # nothing judged: no metrics that read Mean@K 0.000, no result row
    assert "Mean@" not in rolled.stdout and "95% CI" not in rolled.stdout
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()
    one_run = run_script(*eval_args(db[1], "one"), env=env_for(server), cwd=tmp_path)
    assert run_script(*eval_args(db[1]), "--step", "judge", env=env_for(server), cwd=tmp_path).returncode == 0
    assert {r[2] for r in rows(db[0], "e1")} == {"judged"} and server.request_count == 24
    assert run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path).returncode == 0  # a rerun: nothing to do
    again = run_script(*eval_args(db[1]), "--step", "rollout", env=env_for(server), cwd=tmp_path)
    assert "12 of 12 attempts rolled out; all judged already" in again.stdout, again.stdout
    with sqlite3.connect(db[0]) as conn:
        assert conn.execute("SELECT count(*) FROM eval_results WHERE exp_id = 'e1'").fetchone() == (1,)
    split = json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())
    whole = json.loads((tmp_path / "runs/one/eval_metrics.json").read_text())
    assert one_run.returncode == 0 and split["mean_at_k"] == whole["mean_at_k"] > 0


def test_a_practices_own_rows_are_not_compared_with_an_eval(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    assert run_script(*eval_args(db[1], "base"), env=env_for(server), cwd=tmp_path).returncode == 0
    for internal in ("p1_epoch_0", "p1_eval_step2"):
        compared = run_script(RUN_EVAL, "--compare", internal, "base", "--db_url", db[1], cwd=tmp_path)
        assert compared.returncode == 2 and "holds a practice's own attempts" in compared.stderr, compared.stderr
        assert len(compared.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pass_k", "0"], "command line: pass_k: Input should be greater than 0"),
        (["verify_filename=nope.py"], "verify_filename: 'nope.py' not found"),
        (["--dataset", "NoSuchSet"], "not bundled"),
        (["agent.max_turns=abc"], "command line (agent.max_turns=abc): agent.max_turns"),
        (["--dataset", "a/b", "--limit", "2"], "data.dataset: not a plain name"),  # never one to upload
    ],
)
def test_bad_input_is_one_line_and_exit_2(stub, tmp_path, db, args, message):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), *args, env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert server.request_count == 0


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("http://[::1", "is not a URL (Invalid IPv6 URL)"),
        ("http://127.0.0.1:notaport/v1", "is not a URL (Port could not be cast"),
        ("http://user:pw-secret@host/v1", "carries credentials (user:password@): put the key in UTU_LLM_API_KEY"),
        ("localhost:8000/v1", "is not an http(s) URL"),
    ],
)
def test_a_bad_endpoint_url_is_one_line(tmp_path, db, base_url, message):
    env = {"UTU_LLM_BASE_URL": base_url, "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    result = run_script(*eval_args(db[1]), env=env, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "pw-secret" not in result.stderr


def test_an_agent_file_that_is_not_utf8_is_one_line(stub, tmp_path, db):
    agent = tmp_path / "agent.yaml"
    agent.write_bytes(b"instructions: caf\xe9 au lait\n")
    result = run_script(*eval_args(db[1]), "--agent_config", str(agent), env=env_for(stub(StubScript())), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "agent.yaml: not UTF-8 text (byte 0xe9" in result.stderr


def test_max_cost_stops_the_run_with_exit_3_and_loses_no_paid_attempt(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted(), latency=0.05))
    priced = ["agent.model.pricing.input_per_million=1000", "--concurrency", "4"]  # $0.001 per prompt token
    first = run_script(*eval_args(db[1]), *priced, "--max_cost", "0.5", env=env_for(server), cwd=tmp_path)
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert first.returncode == 3 and len(errors) == 1, first.stderr
    assert "of max_cost $0.5000: stopped before" in errors[0]
    paid = server.request_count
    judged = sum(r[2] == "judged" for r in rows(db[0], "e1"))
    assert 1 <= paid < 12 and judged == paid  # the calls sent finished and were saved; no other started
    with sqlite3.connect(db[0]) as conn:
        assert conn.execute("SELECT sum(cost) FROM evaluation_data").fetchone()[0] <= 0.5  # never past the cap
    assert not (tmp_path / "runs/e1/eval_metrics.json").exists()
    rest = run_script(*eval_args(db[1]), *priced, "--max_cost", "1000000", env=env_for(server), cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert server.request_count == 12 and {r[2] for r in rows(db[0], "e1")} == {"judged"}


def test_max_cost_without_a_price_is_refused(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), "--max_cost", "1", env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and "max_cost: no model of this run has a price" in result.stderr
    assert server.request_count == 0


def test_compare_reports_the_paired_difference(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    assert run_script(*eval_args(db[1], "base"), env=env_for(server), cwd=tmp_path).returncode == 0
    better = {q: [QUESTIONS[i]["answer"]] * 2 for i, q in enumerate(PLAN)}
    server2 = stub(StubScript(reply_fn=scripted(better)))
    assert run_script(*eval_args(db[1], "better"), env=env_for(server2), cwd=tmp_path).returncode == 0
    result = run_script(RUN_EVAL, "--compare", "base", "better", "--db_url", db[1], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "B - A = +0.500" in result.stdout and "over 6 shared questions" in result.stdout
    missing = run_script(RUN_EVAL, "--compare", "base", "nope", "--db_url", db[1], cwd=tmp_path)
    assert missing.returncode == 2 and "no attempts stored for exp_id 'nope'" in missing.stderr


@pytest.mark.integration
def test_a_small_eval_on_the_real_embedded_model(local_model, tmp_path, db):
    env = {"UTU_STATE_DIR": os.environ["UTU_STATE_DIR"], "UTU_LLM_BASE_URL": ""}
    result = run_script(
        RUN_EVAL,
        "--config_name",
        "local/mawps",
        "--limit",
        "2",
        "--pass_k",
        "1",
        "--exp_id",
        "real",
        "--db_url",
        db[1],
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "embedded model" in result.stderr
    final = rows(db[0], "real")
    assert len(final) == 2 and {r[2] for r in final} == {"judged"}
    assert all(r[3] in (0.0, 1.0) for r in final)


def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), "--output_dir", "/proc", env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "choose another --output_dir" in result.stderr
    assert server.request_count == 0


@pytest.mark.parametrize("exp_id", ["../../x", "/tmp/abs", "", "x" * 300, "a/b", ".hidden"])
def test_experiment_ids_are_plain_names_checked_before_any_work(stub, tmp_path, db, exp_id):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1], exp_id), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and "exp_id" in result.stderr and "not a plain name" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert server.request_count == 0 and not (tmp_path / "runs").exists()


def upload(tmp_path, db_url, questions, *flags):
    path = tmp_path / "custom.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    upload = str(ROOT / "scripts/data/upload_dataset.py")
    result = run_script(upload, "--file_path", str(path), "--dataset_name", "Custom", "--db_url", db_url, *flags)
    assert result.returncode == 0, result.stderr


def test_a_replaced_data_set_or_another_selection_is_not_silently_reused(stub, tmp_path, db):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    upload(tmp_path, db[1], [{"question": f"q{i}", "answer": "1"} for i in range(4)])
    args = [*eval_args(db[1], "e1"), "--dataset", "Custom"]
    assert run_script(*args, env=env_for(server), cwd=tmp_path).returncode == 0
    upload(tmp_path, db[1], [{"question": f"new {i}", "answer": "2"} for i in range(4)], "--replace")
    stale = run_script(*args, env=env_for(server), cwd=tmp_path)
    assert stale.returncode == 2 and "changed: selection.sha256" in stale.stderr
    smaller = run_script(*args, "--limit", "2", "--fresh", env=env_for(server), cwd=tmp_path)
    assert smaller.returncode == 0, smaller.stderr
    metrics = json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())
    assert (metrics["questions"], metrics["attempts"]) == (2, 4)  # the current selection only


def test_a_limit_set_for_one_data_set_does_not_cut_another_silently(stub, tmp_path, db):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    upload(tmp_path, db[1], [{"question": f"q{i}", "answer": "1"} for i in range(25)])
    result = run_script(
        RUN_EVAL,
        "--config_name",
        "local/mawps",
        "--dataset",
        "Custom",
        "--pass_k",
        "1",
        "--exp_id",
        "all",
        "--db_url",
        db[1],
        env=env_for(server),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "limit (20) was set for MAWPS_singleop: not applied to Custom" in " ".join(result.stderr.split())
    assert json.loads((tmp_path / "runs/all/eval_metrics.json").read_text())["questions"] == 25


def lease_rows(db_path):
    if not db_path.exists():
        return []
    with sqlite3.connect(db_path) as conn:
        try:
            return conn.execute("SELECT exp_id, pid FROM experiment_leases").fetchall()
        except sqlite3.OperationalError:
            return []


def test_one_run_per_experiment_at_a_time_and_a_dead_runs_lease_is_taken_over(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted(), latency=30))
    first = subprocess.Popen(
        [sys.executable, *eval_args(db[1])],
        cwd=tmp_path,
        env={**os.environ, **env_for(server)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not lease_rows(db[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lease_rows(db[0]) == [("e1", first.pid)]
        second = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
        assert second.returncode == 2
        assert f"exp_id 'e1' is being run by pid {first.pid} on" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    quick = stub(StubScript(reply_fn=scripted()))
    third = run_script(*eval_args(db[1]), env=env_for(quick), cwd=tmp_path)  # the dead pid's lease is taken over
    assert third.returncode == 0, third.stderr
    assert lease_rows(db[0]) == []  # released at the end


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"UTU_LLM_BASE_URL": "ftp://x/v1"}, [], "is not an http(s) URL"),
        ({"UTU_LLM_BASE_URL": "http://127.0.0.1:9/v1"}, [], "cannot reach the endpoint"),
        ({"UTU_LLM_API_KEY": "sk-abc\x01def"}, [], "holds a control character, which an HTTP header cannot carry"),
        ({"UTU_LLM_API_KEY": "sk-abcé"}, [], "holds a space or a non-ASCII character"),
        ({}, ["--output_dir", "/proc"], "choose another --output_dir"),
        ({}, ["--dataset", "NoSuchSet"], "'NoSuchSet' is not in"),
        ({}, ["--output_dir", "out/deeper"], None),  # a good start: it writes
        ({}, ["--output_dir", "out/deeper[/x]"], None),  # a folder rich would read as markup: said as written
    ],
)
def test_a_failed_start_writes_nothing(stub, tmp_path, db, env, args, message):
    """A bad endpoint or output folder once left the database created, the bundled data set loaded, the
    experiment registered and an empty runs/<id>/."""
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), *args, env=env_for(server) | env, cwd=tmp_path)
    if message is None:
        metrics = tmp_path / args[1] / "e1" / "eval_metrics.json"
        assert result.returncode == 0 and db[0].exists() and metrics.exists(), result.stderr[-2000:]
        return
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "sk-abc" not in result.stderr  # the key is never shown
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_an_evaluation_of_more_attempts_than_a_run_takes_is_refused_before_any(stub, tmp_path, db):
    """Every attempt is a row held in memory: a typo's K=100000 on 20 questions grew by 75 MiB a second."""
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), "--pass_k", "200000", env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "6 questions × K=200000 = 1,200,000 attempts, more than a run takes (1,000,000)" in result.stderr
    assert server.request_count <= 1  # its preflight, no attempt
    with sqlite3.connect(db[0]) as conn:
        assert conn.execute("SELECT count(*) FROM evaluation_data").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM experiments").fetchone() == (0,)


def test_an_eval_config_that_is_not_utf8_is_one_line(stub, tmp_path, db):
    (tmp_path / "configs/eval").mkdir(parents=True)
    (tmp_path / "configs/eval/mine.yaml").write_bytes(b"data:\n  dataset: MAWPS_singleop\n# caf\xe9\n")
    server = stub(StubScript(reply_fn=scripted()))
    args = [RUN_EVAL, "--config_name", "mine", "--db_url", db[1]]
    result = run_script(*args, env=env_for(server) | {"UTU_CONFIG_DIR": str(tmp_path / "configs")}, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "configs/eval/mine.yaml: not UTF-8 text (byte 0xe9)" in result.stderr
    as_path = run_script(RUN_EVAL, "--config_name", "/etc/passwd", env=env_for(server), cwd=tmp_path)
    assert as_path.returncode == 2 and "a config name under eval/, not a path" in as_path.stderr, as_path.stderr


def test_judging_while_attempts_are_not_rolled_out_writes_no_result(stub, tmp_path, db):
    """A rollout stopped part-way (kill -9, max_cost) then --step judge printed a partial Mean@K as the result."""
    server = stub(StubScript(reply_fn=scripted()))
    first = run_script(*eval_args(db[1]), "--step", "judge", env=env_for(server), cwd=tmp_path)  # nothing rolled out
    assert first.returncode == 2 and "12 of 12 attempts are not rolled out yet" in first.stderr, first.stderr
    assert run_script(*eval_args(db[1]), "--step", "rollout", env=env_for(server), cwd=tmp_path).returncode == 0
    with sqlite3.connect(db[0]) as conn:  # as a kill -9 would leave it: five attempts never rolled out
        conn.execute("UPDATE evaluation_data SET stage = 'init', response = NULL WHERE dataset_index < 3")
    judged = run_script(*eval_args(db[1]), "--step", "judge", env=env_for(server), cwd=tmp_path)
    assert judged.returncode == 2 and "6 of 12 attempts are not rolled out yet" in judged.stderr, judged.stderr
    assert "95% CI" not in judged.stdout and not (tmp_path / "runs/e1/eval_metrics.json").exists()
    assert run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path).returncode == 0  # the rest, then judged
    with sqlite3.connect(db[0]) as conn:  # two whose rollout failed: a judge step cannot mend them
        conn.execute("UPDATE evaluation_data SET stage = 'failed', error = 'HTTP 400' WHERE dataset_index = 3")
    judged = run_script(*eval_args(db[1]), "--step", "judge", env=env_for(server), cwd=tmp_path)
    said = " ".join(judged.stderr.split())
    assert judged.returncode == 2 and "2 of 12 attempts failed" in said and "with --step rollout (or no" in said, said
    allowed = run_script(
        *eval_args(db[1]), "--step", "judge", "--max_failed_share", "0.2", env=env_for(server), cwd=tmp_path
    )
    assert allowed.returncode == 0, allowed.stderr  # within the allowed share, a judge step writes its result
    # --fresh with --step judge deleted the judged attempts and the result, then had nothing to judge
    fresh = run_script(*eval_args(db[1]), "--step", "judge", "--fresh", env=env_for(server), cwd=tmp_path)
    assert fresh.returncode == 2 and "--fresh starts over from the rollouts" in fresh.stderr, fresh.stderr
    assert (tmp_path / "runs/e1/eval_metrics.json").exists()
    with sqlite3.connect(db[0]) as conn:
        assert conn.execute("SELECT count(*) FROM evaluation_data WHERE stage = 'judged'").fetchone()[0] == 10


def test_an_offset_past_the_end_is_refused_not_scored(stub, tmp_path, db):
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), "--offset", "100000", env=env_for(server), cwd=tmp_path)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "--offset 100000 selects no question (it holds " in said, result.stderr
    assert "Mean@" not in result.stdout and not (tmp_path / "runs").exists()


def test_fewer_questions_than_the_limit_are_said(stub, tmp_path, db):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    upload(tmp_path, db[1], [{"question": f"q{i}", "answer": "1"} for i in range(3)])
    args = [RUN_EVAL, "--config_name", "local/mawps", "--dataset", "Custom", "--db_url", db[1], "--exp_id", "few"]
    result = run_script(*args, "--offset", "2", "--limit", "5", env=env_for(server), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "data set 'Custom' holds 1 questions from offset 2, not the 5 of --limit" in said


def test_an_output_path_that_is_a_file_is_refused_before_any_work(stub, tmp_path, db):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs/e1").write_text("#!/bin/sh\n")
    (tmp_path / "runs/e1").chmod(0o755)
    server = stub(StubScript(reply_fn=scripted()))
    result = run_script(*eval_args(db[1]), env=env_for(server), cwd=tmp_path)
    assert result.returncode == 2 and "runs/e1: is a file, not a folder" in result.stderr, result.stderr
    assert server.request_count == 0 and not db[0].exists()


def test_compare_without_a_database_creates_none(tmp_path):
    result = run_script(RUN_EVAL, "--compare", "a", "b", cwd=tmp_path)
    assert result.returncode == 2 and "--compare: no database at" in result.stderr, result.stderr
    assert not (tmp_path / "utu.db").exists()


def test_a_level_is_shown_as_written_and_a_replaced_data_set_is_not_compared(stub, tmp_path, db):
    levels = ["[/bold]", "[hard]", "easy\x1b]0;pwned\x07\x1b[2J"]
    questions = [
        {"question": f"What is {i} plus {i}?", "answer": str(2 * i), "level": lv} for i, lv in enumerate(levels)
    ]
    upload(tmp_path, db[1], questions)
    server = stub(StubScript(reply_fn=lambda body: "\\boxed{0}"))
    args = [RUN_EVAL, "--config_name", "local/mawps", "--dataset", "Custom", "--db_url", db[1]]
    first = run_script(*args, "--exp_id", "lv1", env=env_for(server), cwd=tmp_path)
    assert first.returncode == 0, first.stderr  # "[/bold]" was markup that crashed the table after all the work
    shown = " ".join(first.stdout.split())
    assert "level [/bold]" in shown and "level [hard]" in shown and "\x1b" not in first.stdout
    assert "easy\\x1b]0;pwned\\x07\\x1b[2J" in shown
    upload(tmp_path, db[1], [{**q, "question": q["question"].replace("plus", "times")} for q in questions], "--replace")
    second = run_script(*args, "--exp_id", "lv2", env=env_for(server), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    compared = run_script(RUN_EVAL, "--compare", "lv1", "lv2", "--db_url", db[1], cwd=tmp_path)
    assert compared.returncode == 2 and "Custom#0 is another question (or answer)" in compared.stderr, compared.stderr


@pytest.mark.parametrize(
    "flags, limit, offset, said",
    [
        ([], None, 0, "limit (12) and offset (200) were set for Portions: not applied to Custom; pass --limit N or"),
        (["--limit", "5"], 5, 0, "offset (200) was set for Portions: not applied to Custom; pass --offset N"),
        (["--offset", "3"], None, 3, "limit (12) was set for Portions: not applied to Custom; pass --limit N"),
        (["--limit", "5", "--offset", "3"], 5, 3, None),
        # an override typed on this command line is given too
        (["data.offset=5"], None, 5, "limit (12) was set for Portions: not applied to Custom; pass --limit N"),
        (["data={limit: 5}"], 5, 0, "offset (200) was set for Portions: not applied to Custom; pass --offset N"),
    ],
)
def test_another_data_set_takes_none_of_the_config_s_slice_it_was_not_given(
    monkeypatch, caplog, flags, limit, offset, said
):
    from utu.commands import eval as eval_command

    argv = ["run_eval.py", "--config_name", "local/portions", "--dataset", "Custom", *flags]
    monkeypatch.setattr(sys, "argv", argv)
    config = eval_command.build_config(*eval_command.parse_args())
    assert (config.data.dataset, config.data.limit, config.data.offset) == ("Custom", limit, offset)
    warned = " ".join(" ".join(r.getMessage() for r in caplog.records).split())
    assert (said in warned) if said else "not applied" not in warned


@pytest.mark.parametrize(
    "dataset",
    [["data.dataset=Custom"], ["++data.dataset=Custom"], ["data.dataset='Custom'"], ["data={dataset: Custom}"]],
)
def test_another_data_set_named_as_an_override_is_as_if_named_by_the_flag(monkeypatch, caplog, dataset):
    from utu.commands import eval as eval_command

    monkeypatch.setattr(sys, "argv", ["run_eval.py", "--config_name", "local/portions", *dataset])
    config = eval_command.build_config(*eval_command.parse_args())
    assert (config.data.dataset, config.data.limit, config.data.offset) == ("Custom", None, 0)
    assert "limit (12) and offset (200) were set for Portions" in " ".join(caplog.text.split())


def test_a_reader_that_closes_the_output_early_does_not_stop_the_result_being_kept(stub, tmp_path, db):
    """`run_eval ... | true`: the progress bar is on standard error, so the run gets to keep its result."""
    server = stub(StubScript(reply_fn=scripted()))
    process = subprocess.Popen(
        [sys.executable, *eval_args(db[1])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, **env_for(server)},
    )
    process.stdout.close()  # as `true` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 1 and "Traceback" not in stderr, stderr  # its result unread: not a success
    assert json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())["questions"] == 6


@pytest.mark.parametrize("log", ["closed by its reader", "closed at start"])
def test_a_log_stream_that_is_gone_does_not_stop_the_run(stub, tmp_path, db, log):
    """`run_eval ... 2>&1 >out | head -1` ended the run at its first log line (rich exits on a broken pipe) and lost
    its result; `2>&-` made a finished run exit 1, and sent its error lines to standard output."""
    server = stub(StubScript(reply_fn=scripted()))
    env = {**os.environ, **env_for(server)}
    if log == "closed by its reader":
        reader, writer = os.pipe()
        os.close(reader)
        done = subprocess.run(
            [sys.executable, *eval_args(db[1])], stdout=subprocess.PIPE, stderr=writer, cwd=tmp_path, env=env
        )
        os.close(writer)
    else:
        closed = ["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable]
        done = subprocess.run([*closed, *eval_args(db[1])], stdout=subprocess.PIPE, cwd=tmp_path, env=env)
        refused = subprocess.run([*closed, *eval_args(db[1], "../x")], stdout=subprocess.PIPE, cwd=tmp_path, env=env)
        assert refused.returncode == 2 and refused.stdout == b""  # the error line goes nowhere, not to the output
    assert done.returncode == 0 and b"Mean@2" in done.stdout
    assert json.loads((tmp_path / "runs/e1/eval_metrics.json").read_text())["questions"] == 6
    with sqlite3.connect(db[0]) as conn:  # the database did not take the closed stream's number and its log lines
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_config_s_own_data_set_written_as_a_reference_keeps_its_slice(monkeypatch, caplog, tmp_path):
    """`dataset: ${oc.env:MY_DATA,Portions}` then `--dataset Portions` names the config's own set: its slice stays."""
    from utu.commands import eval as eval_command
    from utu.config.loader import written_value

    (tmp_path / "eval").mkdir()
    (tmp_path / "eval/mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - local/portions\n  - _self_\ndata:\n  dataset: ${oc.env:MY_DATA,Portions}\n"
    )
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("MY_DATA", raising=False)
    monkeypatch.setattr(sys, "argv", ["run_eval.py", "--config_name", "mine", "--dataset", "Portions"])
    config = eval_command.build_config(*eval_command.parse_args())
    assert (config.data.dataset, config.data.limit, config.data.offset) == ("Portions", 12, 200)
    assert "not applied" not in caplog.text
    (tmp_path / "eval/unset.yaml").write_text(
        "# @package _global_\ndefaults:\n  - local/portions\n  - _self_\ndata:\n  dataset: ${oc.env:MY_DATA}\n"
    )
    monkeypatch.setattr(sys, "argv", ["run_eval.py", "--config_name", "unset", "data.dataset=Custom"])
    config = eval_command.build_config(*eval_command.parse_args())  # the unset variable is not needed: replaced
    assert (config.data.dataset, config.data.limit, config.data.offset) == ("Custom", None, 0)
    # another reference that needs the command line (an exp_id from a variable, given as an override instead)
    (tmp_path / "eval/other.yaml").write_text(
        "# @package _global_\ndefaults:\n  - local/portions\n  - _self_\nexp_id: ${oc.env:MY_EXP}\n"
        "data:\n  dataset: ${oc.env:MY_DATA,Portions}\n"
    )
    monkeypatch.setattr(sys, "argv", ["run_eval.py", "--config_name", "other", "--dataset", "Portions", "exp_id=e1"])
    config = eval_command.build_config(*eval_command.parse_args())
    assert (config.data.dataset, config.data.limit, config.data.offset) == ("Portions", 12, 200)
    # a data set the config leaves to the command line (`???`): its slice is for whichever is given
    (tmp_path / "eval/open.yaml").write_text("# @package _global_\ndata:\n  dataset: ???\n  limit: 5\n")
    assert written_value("eval", "open", "data.dataset", ["data.dataset=Custom"]) == "???"
    assert eval_command.dropped_slice("open", config, {}, ["data.dataset=Custom"]) == ({}, "???")
