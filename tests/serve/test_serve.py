"""python -m utu.serve as a user runs it, with the openai SDK as the client and the stub as the agents' model:
the library placed as in practice, streaming, a tool-using agent, several agents, keys and errors."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
import yaml

from tests.conftest import ROOT
from utu.llm.stub import StubScript

LIBRARY = {"G0": "When adding, line up the digits.", "G1": "When done, box the answer."}
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "execute_python_code", "arguments": json.dumps({"code": "print(2 + 2)"})},
}


def agent_file(tmp_path, name, **fields):
    data = {
        "name": name,
        "instructions": f"You are {name}.",
        "toolkits": [],
        "max_turns": 4,
        "model": {"model_provider": {"base_url": "${oc.env:UTU_LLM_BASE_URL}", "model": "stub", "api_key": "k"}},
        **fields,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def model_reply(body):
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"The tool said {last['content'].strip()[-40:]}"
    if "use the tool" in str(last.get("content")):
        return {"tool_calls": [CALL]}
    return "The answer is \\boxed{4}."


@pytest.fixture
def serve(tmp_path, stub):
    servers = []

    def start(*args, key=None, script=None):
        model = stub(script or StubScript(reply_fn=model_reply))
        env = {**os.environ, "UTU_LLM_BASE_URL": model.base_url, "UTU_LLM_MODEL": "stub", "UTU_LLM_API_KEY": "k"}
        env.pop("UTU_SERVE_API_KEY", None)
        if key:
            env["UTU_SERVE_API_KEY"] = key
        proc = subprocess.Popen(
            [sys.executable, "-m", "utu.serve", "--port", "0", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        servers.append(proc)
        line = proc.stdout.readline()
        assert line.startswith("serving "), proc.stderr.read() if proc.poll() is not None else line
        return line.split(" at ")[1].strip(), model, proc

    yield start
    for proc in servers:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_openai_sdk_talks_to_an_enhanced_agent(tmp_path, serve):
    enhanced = agent_file(tmp_path, "math", experiences=LIBRARY)
    plain = agent_file(tmp_path, "plain")
    url, model, _ = serve("--agent_config", str(enhanced), "--agent_config", f"baseline={plain}")
    client = openai.OpenAI(base_url=url, api_key="unused")
    assert sorted(m.id for m in client.models.list()) == ["baseline", "math"]
    reply = client.chat.completions.create(
        model="math",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        temperature=0.1,
    )
    assert reply.choices[0].message.content == "The answer is \\boxed{4}." and reply.choices[0].finish_reason == "stop"
    assert reply.usage.total_tokens > 0
    sent = model.requests[-1]
    system = sent["messages"][0]["content"]
    assert system.startswith("You are math.") and "[G0]. When adding, line up the digits." in system
    assert system.endswith("Be brief.") and sent["temperature"] == 0.1  # the client's system prompt follows ours
    client.chat.completions.create(model="baseline", messages=[{"role": "user", "content": "2+2?"}])
    assert "line up" not in model.requests[-1]["messages"][0]["content"]  # each agent its own library
    chunks = list(
        client.chat.completions.create(
            model="math",
            messages=[{"role": "user", "content": "2+2?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is \\boxed{4}." and chunks[-1].usage.total_tokens > 0
    assert httpx.get(url.removesuffix("/v1") + "/health").json()["status"] == "ok"


def test_a_tool_using_agent_runs_its_tools_in_the_sandbox(tmp_path, serve):
    path = agent_file(tmp_path, "coder", toolkits=[{"name": "python_executor", "timeout": 20}])
    url, model, _ = serve("--agent_config", str(path))
    reply = openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
        model="coder", messages=[{"role": "user", "content": "Please use the tool."}]
    )
    assert reply.choices[0].message.content.startswith("The tool said") and "4" in reply.choices[0].message.content
    assert model.requests[-1]["messages"][-1]["role"] == "tool" and model.requests[0]["tools"]


def test_an_agent_out_of_turns_says_length(tmp_path, serve):
    path = agent_file(tmp_path, "coder", toolkits=[{"name": "python_executor", "timeout": 20}], max_turns=1)
    url, _, _ = serve("--agent_config", str(path))
    reply = openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
        model="coder", messages=[{"role": "user", "content": "Please use the tool."}]
    )
    assert reply.choices[0].finish_reason == "length" and not reply.choices[0].message.content


def test_keys_and_bad_requests_get_openais_errors(tmp_path, serve):
    url, _, _ = serve("--agent_config", str(agent_file(tmp_path, "math")), key="s3cret")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong").models.list()
    client = openai.OpenAI(base_url=url, api_key="s3cret")
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="math", messages=[])
    garbage = httpx.post(f"{url}/chat/completions", content=b"{not json", headers={"Authorization": "Bearer s3cret"})
    assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "invalid_request_error"
    loose = {"model": "math", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}
    typed = httpx.post(f"{url}/chat/completions", json=loose, headers={"Authorization": "Bearer s3cret"})
    assert typed.status_code == 400 and typed.json()["error"]["param"] == "stream"  # JSON's own types only
    health = httpx.get(url.removesuffix("/v1") + "/health")
    assert health.json() == {"status": "ok"}  # no key needed to check liveness, and no model named without one
    lower = httpx.get(f"{url}/models", headers={"Authorization": "bearer s3cret"})
    assert lower.status_code == 200  # the scheme's case does not matter
    bare = httpx.get(f"{url}/models", headers={"Authorization": "s3cret"})
    assert bare.status_code == 401  # the key without its scheme is not taken


def test_a_failing_model_is_a_502_not_a_traceback(tmp_path, serve):
    script = StubScript(reply_fn=model_reply, fault_fn=lambda body: "http401" if "fail" in str(body) else None)
    key = {
        "model_provider": {
            "base_url": "${oc.env:UTU_LLM_BASE_URL}",
            "model": "stub",
            "api_key": "sk-upstream-secret-12345678",
        }
    }
    url, _, proc = serve("--agent_config", str(agent_file(tmp_path, "math", model=key)), script=script)
    with pytest.raises(openai.APIStatusError) as raised:
        openai.OpenAI(base_url=url, api_key="x", max_retries=0).chat.completions.create(
            model="math", messages=[{"role": "user", "content": "please fail"}]
        )
    assert raised.value.status_code == 502 and "the agent's model failed" in raised.value.message
    assert "upstream-secret" not in str(raised.value.body) and "base_url" not in str(
        raised.value.body
    )  # the operator's
    assert proc.poll() is None  # still serving
    proc.terminate()
    log = proc.stderr.read()
    assert "the agent's model failed" in log and "upstream-secret" not in log  # said to the operator, redacted


def test_a_request_the_model_refuses_is_the_clients_400_and_a_slow_agent_a_504(tmp_path, serve):
    def fault(body):
        text = str(body["messages"][-1].get("content"))
        return "http400" if "too long" in text else "hang" if "slowly" in text else None

    script = StubScript(reply_fn=model_reply, fault_fn=fault, hang_seconds=30)
    path = agent_file(tmp_path, "math")
    url, _, proc = serve("--agent_config", str(path), "--request_timeout", "1.5", script=script)
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="refused this request") as refused:
        client.chat.completions.create(model="math", messages=[{"role": "user", "content": "too long"}])
    assert refused.value.code == "upstream_refused"  # the client can fix it; a 502 would say retry
    start = time.monotonic()
    with pytest.raises(openai.APIStatusError) as late:
        client.chat.completions.create(model="math", messages=[{"role": "user", "content": "answer slowly"}])
    assert late.value.status_code == 504 and "within 1.5 s" in late.value.message
    assert time.monotonic() - start < 20  # the deadline, not the model's hang
    reply = client.chat.completions.create(model="math", messages=[{"role": "user", "content": "2+2?"}])
    assert reply.choices[0].message.content == "The answer is \\boxed{4}."  # still serving
    proc.terminate()
    assert "--request_timeout" in proc.stderr.read()  # the operator learns which limit cut it off


def test_a_bad_request_timeout_is_refused_at_the_command_line(tmp_path):
    for bad in ("-1", "soon", "inf"):
        done = subprocess.run(
            [sys.executable, "-m", "utu.serve", "--agent_config", "x.yaml", "--request_timeout", bad],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and "expected seconds" in done.stderr


def test_what_a_served_agent_cannot_honour_is_refused_and_the_rest_is_taken(tmp_path, serve):
    (tmp_path / "lr=0.1").mkdir()
    agent_file(tmp_path / "lr=0.1", "math")
    url, model, _ = serve("--agent_config", "lr=0.1/math.yaml")  # a file there: a path, not NAME=PATH
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    user = [{"role": "user", "content": "2+2?"}]
    for extra, param in (
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"stop": ["\n"]}, "stop"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logprobs": True}, "logprobs"),
        ({"extra_body": {"functions": [{"name": "f"}]}}, "functions"),
    ):
        with pytest.raises(openai.BadRequestError, match=param):
            client.chat.completions.create(model="math", messages=user, **extra)
    system = {"role": "system", "content": [{"type": "text", "text": "SYS_PARTS"}]}
    client.chat.completions.create(
        model="math", messages=[system, *user], max_completion_tokens=5, n=1, stop=None, extra_body={"n": None}
    )
    sent = model.requests[-1]
    assert sent["max_tokens"] == 5 and sent["messages"][0]["content"].endswith("SYS_PARTS")
    chunks = list(client.chat.completions.create(model="math", messages=user, stream=True))
    assert all(c.choices for c in chunks)  # no usage chunk unless stream_options asks for it


def slow_coder(tmp_path, serve, seconds: float):
    """A served agent whose model asks for a tool that sleeps `seconds`, then answers."""
    code = f"import time\ntime.sleep({seconds})\nprint(4)"
    call = {"id": "c1", "type": "function", "function": {"name": "execute_python_code", "arguments": ""}}
    call["function"]["arguments"] = json.dumps({"code": code})

    def reply(body):
        return "done" if body["messages"][-1]["role"] == "tool" else {"tool_calls": [call]}

    path = agent_file(tmp_path, "coder", toolkits=[{"name": "python_executor", "timeout": 20}])
    return serve("--agent_config", str(path), script=StubScript(reply_fn=reply))


def test_a_client_that_leaves_stops_its_agent(tmp_path, serve):
    url, model, _ = slow_coder(tmp_path, serve, 4)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{url}/chat/completions",
            json={"model": "coder", "messages": [{"role": "user", "content": "go"}]},
            timeout=1.5,
        )
    time.sleep(5)  # past the tool: an agent left running would ask its model again
    assert len(model.requests) == 1


def test_stopping_waits_for_requests_in_flight_and_a_second_ctrl_c_stops_at_once(tmp_path, serve):
    url, _, proc = slow_coder(tmp_path, serve, 8)
    body = {"model": "coder", "messages": [{"role": "user", "content": "go"}]}

    def ask():
        with contextlib.suppress(httpx.HTTPError):  # cut off by the second Ctrl-C
            httpx.post(f"{url}/chat/completions", json=body, timeout=30)

    pending = threading.Thread(target=ask)
    pending.start()
    time.sleep(2)  # the tool is running
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    assert proc.poll() is None  # waiting for the request
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 130 and time.perf_counter() - start < 5
    said = " ".join(proc.stderr.read().split())
    assert "1 request(s) in flight" in said and "stopped at once" in said and "Traceback" not in said
    pending.join()


def test_a_key_header_that_is_not_utf8_is_a_401(tmp_path, serve):
    url, _, proc = serve("--agent_config", str(agent_file(tmp_path, "math")), key="s3cret")
    bad = httpx.get(f"{url}/models", headers=[(b"Authorization", b"Bearer \xff\xfe")])
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
    assert proc.poll() is None


def test_bad_setups_are_one_line(tmp_path):
    for args, message in (
        (["--agent_config", "missing.yaml"], "no such file"),
        ([], "give --agent_config"),
        (["--exp_id", "p"], "no enhanced agent there"),
        (["--exp_id", "p", "--step", "foo"], "--step: expected a step number, best or last, got 'foo'"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "utu.serve", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.integration
def test_an_agent_on_the_embedded_model_is_served(local_model, tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "toolkits": [],
                "max_turns": 1,
                "model": {"model_settings": {"max_tokens": 16}},
                "experiences": {"G0": "When asked to greet, say hello."},
            }
        )
    )
    env = {**os.environ, "UTU_LLM_BASE_URL": ""}  # the embedded model (the session's, SmolLM2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "utu.serve", "--agent_config", str(path), "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].strip()
        reply = openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Greet me."}]
        )
        assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
