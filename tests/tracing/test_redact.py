"""Redaction masks secrets, not data: short or numeric keys are never matched as free text."""

import json
import sqlite3

from tests.practice.helpers import agent_script, evolving_learner, run_practice, setup_workspace
from utu.tracing.redact import MASK, Redactor, redact


def test_long_keys_and_bearer_headers_are_masked(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-live-0123456789abcdef")
    assert redact("key sk-live-0123456789abcdef here") == f"key {MASK} here"
    assert redact("Authorization: Bearer abcdefgh12345678") == f"Authorization: Bearer {MASK}"


def test_short_or_numeric_keys_never_rewrite_data(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "12345678")
    monkeypatch.setenv("OTHER_TOKEN", "1234567890123456789")  # long, but digits only: could be an answer
    monkeypatch.setenv("JUDGE_LLM_API_KEY", "not-needed")
    text = "The answer is \\boxed{12345678}; also 1234567890123456789; the server said not-needed."
    assert Redactor()(text) == text


def test_a_secret_in_a_question_is_masked_in_every_stored_field(tmp_path, stub, monkeypatch):
    secret = "sk-question-secret-0123456789"
    configs, db_url = setup_workspace(tmp_path)
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        question = conn.execute('SELECT question FROM data ORDER BY "index" LIMIT 1').fetchone()[0]
        conn.execute("UPDATE data SET question = ? WHERE question = ?", (f"{question} {secret}", question))
    agent = stub(agent_script())  # it finds its question inside the masked text
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1")
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT raw_question, trajectories FROM evaluation_data").fetchall()
    masked = [(q, t) for q, t in rows if MASK in q]
    assert masked and all(MASK in json.dumps(t) for _, t in masked)
    assert not [r for r in rows if secret in r[0] or secret in (r[1] or "")]
    assert not [body for body in agent.requests if secret in json.dumps(body)]  # nor was it sent to the LLM
