"""Redaction masks secrets, not data: short or numeric keys are never matched as free text."""

import sqlite3

from tests.practice.helpers import agent_script, evolving_learner, run_practice, setup_workspace
from utu.tracing.redact import MASK, Redactor, redact


def test_long_keys_and_bearer_headers_are_masked(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-live-0123456789abcdef")
    assert redact("key sk-live-0123456789abcdef here") == f"key {MASK} here"
    assert redact("Authorization: Bearer abcdefgh12345678") == f"Authorization: Bearer {MASK}"
    assert redact('{"Authorization": "Bearer abcdefghijk"}') == f'{{"Authorization": "Bearer {MASK}"}}'
    assert redact("token: bearer sk-proj-abc123def456ghi789") == f"token: bearer {MASK}"


def test_secrets_are_masked_inside_json_held_in_a_string(monkeypatch):
    """A tool's JSON output inside a message inside a stored row: its quotes and backslashes are escaped there."""
    import json

    monkeypatch.setenv("DB_PASSWORD", 'pa"ss\\word-1234567890')
    tool = json.dumps({"headers": {"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz0123456789"}})
    said = json.dumps({"said": 'the password is pa"ss\\word-1234567890'})
    stored = Redactor().value([{"role": "tool", "content": tool}, {"role": "tool", "content": said}])
    text = json.dumps(stored)
    assert "abcdefghijklmnop" not in text and "word-1234567890" not in text and text.count(MASK) == 2
    assert json.loads(stored[0]["content"])["headers"]["Authorization"] == f"Bearer {MASK}"  # still JSON
    span = Redactor()(json.dumps([{"role": "tool", "content": said}]))  # a span's input.value: the messages' JSON
    assert "word-1234567890" not in span
    ends_in_a_quote = Redactor(['abcdefghijklmnop"'])
    assert ends_in_a_quote.value(["x abcdefghijklmnop", "y"]) == ["x abcdefghijklmnop", "y"]  # no broken JSON
    assert ends_in_a_quote.value(['x abcdefghijklmnop" y']) == [f"x {MASK} y"]
    as_a_key = ends_in_a_quote.value({"x abcdefghijklmnop": "y", 'abcdefghijklmnop" z': 1})
    assert as_a_key == {"x abcdefghijklmnop": "y", f"{MASK} z": 1}  # a key is masked as a value is


def test_ordinary_words_after_bearer_are_data():
    for text in (
        "A ring bearer delivered 15 rings to 3 tables.",
        "The Bearer Bonds Company paid 1500 dollars.",
        "Each flag bearer carried 2 flags; the standard-bearer walked ahead.",
    ):
        assert redact(text) == text


def test_short_or_numeric_keys_never_rewrite_data(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "12345678")
    monkeypatch.setenv("OTHER_TOKEN", "1234567890123456789")  # long, but digits only: could be an answer
    monkeypatch.setenv("JUDGE_LLM_API_KEY", "not-needed")
    text = "The answer is \\boxed{12345678}; also 1234567890123456789; the server said not-needed."
    assert Redactor()(text) == text


def test_the_model_is_asked_the_question_as_given_and_stored_text_is_masked(tmp_path, stub, monkeypatch):
    secret = "sk-question-secret-0123456789"
    configs, db_url = setup_workspace(tmp_path)
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute('SELECT question FROM data ORDER BY "index" LIMIT 2').fetchall()
        secret_question, bearer_question = (f"{rows[0][0]} {secret}", f"A ring bearer delivered this: {rows[1][0]}")
        conn.execute("UPDATE data SET question = ? WHERE question = ?", (secret_question, rows[0][0]))
        conn.execute("UPDATE data SET question = ? WHERE question = ?", (bearer_question, rows[1][0]))
    agent = stub(agent_script())
    result = run_practice(tmp_path, configs, db_url, agent, stub(evolving_learner()), "--epochs", "1")
    assert result.returncode == 0, result.stderr
    asked = [m["content"] for body in agent.requests for m in body["messages"] if m["role"] == "user"]
    assert any(secret_question in text for text in asked) and any(bearer_question in text for text in asked)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        stored = conn.execute("SELECT raw_question, trajectories, response FROM evaluation_data").fetchall()
    assert {q for q, _, _ in stored} >= {secret_question, bearer_question}  # the question as the data set has it
    assert not [t for _, t, r in stored if secret in (t or "") + (r or "")]  # what the run wrote is masked
    assert [t for q, t, _ in stored if q == secret_question and MASK in (t or "")]


def test_a_logged_traceback_is_masked_too(monkeypatch):
    import io
    import logging

    from utu.tracing.redact import RedactingFilter

    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-live-0123456789abcdef")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("test_redact_traceback")
    log.addHandler(handler)
    try:
        raise RuntimeError("the endpoint said: invalid key sk-live-0123456789abcdef")
    except RuntimeError:
        log.exception("serving failed")
    log.removeHandler(handler)
    text = stream.getvalue()
    assert "0123456789abcdef" not in text and "serving failed" in text and f"invalid key {MASK}" in text
    assert "RuntimeError" in text  # the traceback is kept, masked
