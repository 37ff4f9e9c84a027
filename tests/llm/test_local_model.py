"""The real embedded model (llama.cpp serving SmolLM2-135M): start, answer, constrained JSON, reuse, stop."""

import os

import pytest
from pydantic import BaseModel

from tests.conftest import run_script
from utu.config import ModelConfig
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
    env = {"UTU_STATE_DIR": str(tmp_path)}
    assert run_script("-m", "utu.llm.local", "status", env=env).returncode == 1
    started = run_script("-m", "utu.llm.local", "serve", env=env)
    assert started.returncode == 0, started.stderr
    assert "started" in started.stdout
    assert "already running" in run_script("-m", "utu.llm.local", "serve", env=env).stdout
    stopped = run_script("-m", "utu.llm.local", "stop", env=env)
    assert "stopped" in stopped.stdout
    assert run_script("-m", "utu.llm.local", "status", env=env).returncode == 1
    assert not (tmp_path / "local_llm.json").exists()
