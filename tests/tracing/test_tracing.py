"""Tracing against a real Phoenix server (started here): the span tree, redaction, Phoenix dying mid-run."""

import contextlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from types import SimpleNamespace

import httpx
import pytest

from tests.practice.helpers import agent_script, evolving_learner, run_practice, setup_workspace, work_requests

pytestmark = pytest.mark.integration
SECRET = "sk-test-secret-123"


@contextlib.contextmanager
def state_dir(path):
    """Point the server manager at `path` for the duration (each Phoenix keeps its own state)."""
    old = os.environ.get("UTU_STATE_DIR")
    os.environ["UTU_STATE_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("UTU_STATE_DIR", None)
        else:
            os.environ["UTU_STATE_DIR"] = old


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    from utu.tracing import phoenix

    state = tmp_path_factory.mktemp("phoenix_state")
    with state_dir(state):
        server, _ = phoenix.serve()
    ui, endpoint = phoenix.endpoints(server)
    yield {"ui": ui, "endpoint": endpoint}
    with state_dir(state):
        phoenix.SERVER.stop()


def spans_of(ui: str, project: str, expected: int | None = None, wait: float = 30) -> list[dict]:
    """Phoenix ingests asynchronously: poll until the count is stable (or reaches `expected`)."""
    from phoenix.client import Client

    client, last, deadline = Client(base_url=ui), -1, time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            spans = client.spans.get_spans(project_identifier=project, limit=5000, timeout=30)
        except Exception:  # the project does not exist until its first span arrives
            spans = []
        if spans and (len(spans) == expected or (expected is None and len(spans) == last)):
            return spans
        last = len(spans)
        time.sleep(1.0)
    return spans


def test_one_practice_step_gives_the_expected_span_tree(tmp_path, phoenix, stub):
    configs, db_url = setup_workspace(tmp_path)
    agent, learner = stub(agent_script()), stub(evolving_learner())
    os.environ.update(PHOENIX_ENDPOINT=phoenix["endpoint"], PHOENIX_PROJECT_NAME="tree")
    try:
        result = run_practice(
            tmp_path, configs, db_url, agent, learner, "--epochs", "1", "--rollout_data_truncate", "2"
        )
    finally:
        del os.environ["PHOENIX_ENDPOINT"], os.environ["PHOENIX_PROJECT_NAME"]
    assert result.returncode == 0, result.stderr
    # 1 run + 1 step + 4 attempts + 4 judgements + 2 groups x 3 stages + 2 group spans + 1 batch + 13 LLM calls
    spans = spans_of(phoenix["ui"], "tree", expected=32)
    by_id = {s["context"]["span_id"]: s for s in spans}
    kinds = Counter((s["name"], s["span_kind"]) for s in spans)
    assert kinds[("practice run", "CHAIN")] == 1 and kinds[("step 0", "CHAIN")] == 1
    assert kinds[("attempt", "AGENT")] == 4 and kinds[("judge", "EVALUATOR")] == 4
    for stage in ("learner.summary", "learner.advantage", "learner.group_update"):
        assert kinds[(stage, "CHAIN")] == 2
    assert kinds[("learner.batch_update", "CHAIN")] == 1
    (run,) = [s for s in spans if s["name"] == "practice run"]
    (step,) = [s for s in spans if s["name"] == "step 0"]
    assert step["parent_id"] == run["context"]["span_id"] and step["attributes"]["step"] == 0
    assert {s["attributes"]["session.id"] for s in spans} == {"t"}

    def ancestors(span):
        while span.get("parent_id") in by_id:
            span = by_id[span["parent_id"]]
            yield span

    attempts = [s for s in spans if s["name"] == "attempt"]
    assert all(step in ancestors(a) for a in attempts)
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT dataset_index, attempt, reward, trace_id FROM evaluation_data").fetchall()
        usage = json.loads(conn.execute("SELECT stats FROM practice_steps").fetchone()[0])["usage"]
    from_spans = {
        (a["attributes"]["question.index"], a["attributes"]["attempt"]): a["attributes"]["reward"] for a in attempts
    }
    assert from_spans == {(i, k): r for i, k, r, _ in rows}
    assert {t for *_, t in rows} == {run["context"]["trace_id"]}
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        (url,) = {u for (u,) in conn.execute("SELECT trace_url FROM evaluation_data")}
    assert url == f"{phoenix['ui'].rstrip('/')}/redirects/traces/{run['context']['trace_id']}"
    page = httpx.get(url, timeout=10)  # a route of Phoenix's UI, which finds the trace's project in the browser
    assert page.status_code == 200 and "<html" in page.text.lower()
    llm = [s for s in spans if s["span_kind"] == "LLM"]
    # 4 rollouts, 4 summaries, 2 advantages, 1 consolidation (no group update on the empty library); the learner's
    # one structured-output probe is not a model call of the run.
    assert len(llm) == agent.request_count + len(work_requests(learner)) == 11
    assert sum(s["attributes"]["llm.token_count.prompt"] for s in llm) == sum(
        u["prompt_tokens"] for u in usage.values()
    )
    assert sum(s["attributes"]["llm.token_count.completion"] for s in llm) == sum(
        u["completion_tokens"] for u in usage.values()
    )


def test_secrets_leave_no_trace(tmp_path, phoenix, stub):
    configs, db_url = setup_workspace(tmp_path)
    script = agent_script()
    answer = script.reply_fn
    script.reply_fn = lambda body: f"{answer(body)} (my key is {SECRET})"  # a reply that quotes the key
    agent, learner = stub(script), stub(evolving_learner())
    env = {"PHOENIX_ENDPOINT": phoenix["endpoint"], "PHOENIX_PROJECT_NAME": "secrets"}
    os.environ.update(env)
    try:
        result = run_practice(
            tmp_path, configs, db_url, agent, learner, "--epochs", "1", "--rollout_data_truncate", "2", api_key=SECRET
        )
        # A 401 whose message quotes the key, as real APIs do: the run stops with one masked line.
        script.fault_fn = lambda body: "http401"
        refused = run_practice(tmp_path, configs, db_url, agent, learner, "--exp_id", "t401", api_key=SECRET)
    finally:
        for key in env:
            del os.environ[key]
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert refused.returncode == 2 and "[REDACTED]" in refused.stderr and SECRET not in refused.stderr
    dump = subprocess.run(["sqlite3", db_url.removeprefix("sqlite:///"), ".dump"], capture_output=True, text=True)
    if dump.returncode != 0:  # no sqlite3 CLI: dump through Python
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            dump_text = "\n".join(conn.iterdump())
    else:
        dump_text = dump.stdout
    assert "[REDACTED]" in dump_text  # the replies were stored, masked
    assert SECRET not in dump_text
    spans = spans_of(phoenix["ui"], "secrets")
    assert spans and SECRET not in json.dumps(spans)
    assert "[REDACTED]" in json.dumps(spans)


def test_unreachable_collector_the_run_completes_with_one_warning(tmp_path, stub):
    from utu.servers import free_port

    configs, db_url = setup_workspace(tmp_path)
    dead_port = free_port()  # nothing listens there
    slow = agent_script()
    slow.latency = 0.3
    env = {"PHOENIX_ENDPOINT": f"http://127.0.0.1:{dead_port}/v1/traces", "PHOENIX_PROJECT_NAME": "dead"}
    os.environ.update(env)
    try:
        result = run_practice(tmp_path, configs, db_url, stub(slow), stub(evolving_learner()), "--epochs", "1")
    finally:
        for key in env:
            del os.environ[key]
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "unreachable" in line]
    assert len(warnings) == 1, result.stderr
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("SELECT count(*) FROM experience_snapshots").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("127.0.0.1:6006/v1/traces", "not an http(s) URL with a host"),
        ("ftp://127.0.0.1/v1/traces", "not an http(s) URL with a host"),
        ("http://[::1/v1/traces", "Invalid IPv6 URL"),
        ("http://127.0.0.1:6006/traces", "it must end in /v1/traces"),
        ("http://me:hunter2pass@127.0.0.1:6006/traces", "it must end in /v1/traces"),
    ],
)
def test_an_endpoint_no_collector_can_be_at_is_refused_at_start(monkeypatch, endpoint, why):
    from utu.errors import ConfigError
    from utu.tracing.setup import setup_tracing

    monkeypatch.setenv("PHOENIX_ENDPOINT", endpoint)
    with pytest.raises(ConfigError, match="PHOENIX_ENDPOINT=") as refused:
        setup_tracing()
    assert why in str(refused.value) and "hunter2pass" not in str(refused.value)


def test_a_password_in_the_endpoint_is_never_shown_or_stored(monkeypatch):
    from utu.tracing import setup

    monkeypatch.setenv("PHOENIX_ENDPOINT", "http://me:hunter2pass@127.0.0.1:6006/v1/traces")
    monkeypatch.setattr(setup, "_provider", object())  # as if tracing were on
    assert setup.trace_url("abc") == "http://127.0.0.1:6006/redirects/traces/abc"
    monkeypatch.setenv("PHOENIX_ENDPOINT", "http://127.0.0.1:6006/phoenix/v1/traces/?project=x")
    assert setup.trace_url("abc") == "http://127.0.0.1:6006/phoenix/redirects/traces/abc"  # no query in the link
    assert setup.shown("http://me:hunter2pass@127.0.0.1:6006/v1/traces") == "http://127.0.0.1:6006/v1/traces"
    monkeypatch.setattr(setup, "_exporter", SimpleNamespace(failed=True))  # Phoenix failed: its spans were dropped
    assert setup.trace_url("abc") is None


def test_phoenix_dies_during_the_run(tmp_path, stub, tmp_path_factory):
    """A real Phoenix, killed while the run is exporting to it."""
    from utu.tracing import phoenix as ph

    state = tmp_path_factory.mktemp("dying_phoenix")
    with state_dir(state):
        server, _ = ph.serve()
    ui, endpoint = ph.endpoints(server)
    configs, db_url = setup_workspace(tmp_path)
    script = agent_script()
    phoenix_dead, answers = threading.Event(), script.reply_fn
    answered = itertools.count()

    def reply(body):  # step 0 (4 attempts) runs; step 1 waits until Phoenix is dead, so its spans must fail
        if next(answered) >= 4:
            phoenix_dead.wait(timeout=120)
        return answers(body)

    script.reply_fn = reply
    env = {**os.environ, "PHOENIX_ENDPOINT": endpoint, "PHOENIX_PROJECT_NAME": "dying", "UTU_CONFIG_DIR": str(configs)}
    agent, learner = stub(script), stub(evolving_learner())
    env |= {
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "agent",
        "UTU_LLM_API_KEY": "k",
        "LEARNER_URL": learner.base_url,
    }
    from tests.practice.helpers import PRACTICE

    command = [sys.executable, PRACTICE, "--config_name", "test", "--db_url", db_url, "--epochs", "1"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from phoenix.client import Client

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # the run's first spans arrived: Phoenix dies
        try:
            if Client(base_url=ui).spans.get_spans(project_identifier="dying", limit=1, timeout=10):
                break
        except Exception:  # the project does not exist until its first span arrives
            pass
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before Phoenix could be killed mid-run"
    with state_dir(state):
        ph.SERVER.stop()
    phoenix_dead.set()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert len([line for line in err.splitlines() if "unreachable" in line]) == 1, err


def test_a_served_request_is_traced(tmp_path, phoenix, stub):
    import openai
    import yaml

    from utu.llm.stub import StubScript

    model = stub(StubScript(replies=["4"]))
    agent = tmp_path / "agent.yaml"
    provider = {"base_url": model.base_url, "model": "stub"}
    library = {"G0": "When adding, carry."}
    agent.write_text(
        yaml.safe_dump({"name": "math", "toolkits": [], "experiences": library, "model": {"model_provider": provider}})
    )
    env = {**os.environ, "PHOENIX_ENDPOINT": phoenix["endpoint"], "PHOENIX_PROJECT_NAME": "served"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "utu.serve", "--agent_config", str(agent), "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].strip()
        openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
            model="math", messages=[{"role": "user", "content": "2+2?"}]
        )
    finally:
        proc.terminate()  # SIGTERM: a clean stop, which flushes the last spans
        proc.wait(timeout=30)
    spans = spans_of(phoenix["ui"], "served", expected=2)
    kinds = {(s["name"], s["span_kind"]) for s in spans}
    assert ("serve math", "AGENT") in kinds and ("ChatCompletion", "LLM") in kinds
    (llm,) = [s for s in spans if s["span_kind"] == "LLM"]
    assert "When adding, carry." in llm["attributes"]["llm.input_messages.0.message.content"]


def test_a_router_s_decisions_and_rewards_are_traced(tmp_path, phoenix, stub):
    from tests.router.test_router_in_agent import agent_reply, evaluate, workspace
    from utu.llm.stub import StubScript

    configs, db_url = workspace(tmp_path)
    agent = stub(StubScript(reply_fn=agent_reply))
    os.environ.update(PHOENIX_ENDPOINT=phoenix["endpoint"], PHOENIX_PROJECT_NAME="routed")
    try:
        result = evaluate(tmp_path, configs, db_url, agent, "routed", limit=3)
    finally:
        del os.environ["PHOENIX_ENDPOINT"], os.environ["PHOENIX_PROJECT_NAME"]
    assert result.returncode == 0, result.stderr
    spans = spans_of(phoenix["ui"], "routed")
    routes = [s for s in spans if s["name"] == "route"]
    rewards = [s for s in spans if s["name"] == "route reward"]
    assert len(routes) == len(rewards) == 3
    for span in routes:
        attributes = span["attributes"]
        assert attributes["choice"] == "rough" and attributes["explore"] is False
        assert attributes["probability.rough"] == attributes["probability.exact"] == pytest.approx(1 / 3, abs=1e-3)
    assert {s["attributes"]["choice"] for s in rewards} == {"rough"}
    assert all(isinstance(s["attributes"]["reward"], float) for s in rewards)
