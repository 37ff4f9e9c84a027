"""The client on the openai SDK: the Responses API, Azure OpenAI, request fields the SDK does not name."""

import json

import pytest
from pydantic import BaseModel

from tests.conftest import _open_clients, client_for, fast_config
from utu.config import ModelConfig
from utu.llm import LLMClient
from utu.llm.stub import StubScript

USER = [{"role": "user", "content": "what is one plus one"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}
TOOL = {"type": "function", "function": {"name": "add", "description": "a+b", "parameters": {"type": "object"}}}


def responses_client(server, **config) -> LLMClient:
    provider = {"type": "responses"}
    return client_for(server, model_provider=provider, **config)


async def test_responses_api_text_usage_and_max_tokens(stub):
    server = stub(StubScript(replies=["two"]))
    client = responses_client(server)
    reply = await client.chat([{"role": "system", "content": "be brief"}, *USER], max_tokens=7, temperature=0.1)
    assert reply.content == "two"
    assert reply.finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 1)  # words: the stub counts tokens so
    request = server.requests[0]
    assert request["api"] == "responses"  # it went to POST /v1/responses
    assert request["max_tokens"] == 7 and request["temperature"] == 0.1  # sent as max_output_tokens
    assert request["messages"] == [{"role": "system", "content": "be brief"}, *USER]


async def test_responses_api_tool_calls_round_trip(stub):
    server = stub(StubScript(replies=[{"tool_calls": [CALL]}, "2"]))
    client = responses_client(server)
    first = await client.chat(USER, tools=[TOOL])
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls == [CALL]  # a function_call item, read back in chat terms
    assert server.requests[0]["tools"] == [TOOL]  # sent as a Responses function tool
    history = [*USER, first.message, {"role": "tool", "tool_call_id": "call_1", "content": "2"}]
    second = await client.chat(history, tools=[TOOL])
    assert second.content == "2"
    # the assistant's call and the tool's result went as function_call / function_call_output items
    sent = server.requests[1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_1" and sent[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "2",
    }


async def test_responses_api_cut_reply_and_structured_output(stub):
    class Answer(BaseModel):
        value: int

    replies = ['{"ok": true}', {"content": '{"value": ', "finish_reason": "length"}, '{"value": 2}']
    server = stub(StubScript(replies=replies))
    client = responses_client(server)
    assert (await client.structured(USER, Answer, max_tokens=10)).value == 2
    probe, cut, again = server.requests
    assert probe["text"]["format"]["type"] == "json_schema"  # constrained output the Responses way
    assert cut["max_tokens"] == 10 and again["max_tokens"] == 20  # the cut reply was seen as finish "length"


async def test_azure_openai_deployment_path_and_api_version(stub):
    server = stub(StubScript(replies=["two"]))
    config = fast_config(model_provider={"api_version": "2024-10-21"})
    azure_endpoint = server.base_url.removesuffix("/v1")
    client = LLMClient(config, base_url=azure_endpoint, model="my-deployment", api_key="k")
    _open_clients.append(client)
    assert (await client.chat(USER)).content == "two"
    request = server.requests[0]
    assert request["model"] == "my-deployment" and request["api_version"] == "2024-10-21"


async def test_fields_the_sdk_does_not_name_are_sent_as_they_are(stub):
    server = stub(StubScript(replies=["two"]))
    client = client_for(server)
    await client.chat(USER, top_k=5, min_p=0.1, max_tokens=9)
    request = server.requests[0]
    assert (request["top_k"], request["min_p"], request["max_tokens"]) == (5, 0.1, 9)


def test_the_api_and_azure_version_are_knobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("UTU_LLM_TYPE", "responses")
    monkeypatch.setenv("UTU_LLM_API_VERSION", "2024-10-21")
    from utu.config.loader import load_model_config

    config = load_model_config("base")
    assert config.model_provider.type == "responses" and config.model_provider.api_version == "2024-10-21"
    assert json.loads(ModelConfig.model_validate({}).model_dump_json())["model_provider"]["type"] == "chat.completions"


async def test_a_youtu_verifier_calls_query_one_on_the_judge(stub, tmp_path):
    from types import SimpleNamespace

    from utu.verify import Verifier, load_verifier

    youtu_verifier = tmp_path / "my_verify.py"
    youtu_verifier.write_text(
        "async def judge(sample, timeout_score=0, **kwargs):\n"
        "    llm = kwargs['llm']\n"
        "    up = [{'role': 'user', 'content': f'Is {sample.response} equal to {sample.correct_answer}?'}]\n"
        "    verdict = await llm.query_one(messages=up, model='ignored', temperature=0)\n"
        "    again = await llm.query_one(input='Say yes or no.')\n"
        "    third = await llm.query_one(messages='A string, as webwalker.py sends it.')\n"
        "    return {'reward': 1.0 if verdict == 'yes' else 0.0, 'reasoning': verdict + again, 'confidence': 90}\n"
    )
    server = stub(StubScript(replies=["yes", "no", "x"]))
    verifier = Verifier(load_verifier(str(youtu_verifier), "judge"), llm=client_for(server))
    verdict = await verifier(SimpleNamespace(response="4", correct_answer="4", raw_question="2+2"))
    assert (verdict.reward, verdict.reasoning, verdict.confidence, verdict.error) == (1.0, "yesno", 90, None)
    first, second, third = server.requests
    assert first["model"] == "stub-model" and first["temperature"] == 0 and "Is 4 equal to 4?" in str(first)
    assert second["messages"] == [{"role": "user", "content": "Say yes or no."}]
    assert third["messages"] == [{"role": "user", "content": "A string, as webwalker.py sends it."}]


def test_a_chat_completion_is_read_from_its_json():
    from utu.llm.transport import UnreadableReply, from_chat_completion

    message = {"content": None, "tool_calls": [CALL | {"index": None}]}  # None fields are dropped, as the SDK did
    data = {
        "model": "m",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "choices": [{"finish_reason": "tool_calls", "message": message}],
    }
    reply = from_chat_completion(data)
    assert (reply.content, reply.tool_calls, reply.finish_reason) == ("", [CALL], "tool_calls")
    assert (reply.prompt_tokens, reply.completion_tokens, reply.model) == (3, 2, "m")
    assert json.loads(reply.raw_json()) == data
    for garbage in (
        "<html>busy</html>",
        {},
        {"choices": []},
        {"choices": [{"message": {"content": 7}}]},
        {"choices": [{"message": {"tool_calls": "x"}}]},
        {"choices": ["x"]},
        {"choices": [{"message": {}}], "usage": {"prompt_tokens": "many"}},
    ):
        with pytest.raises(UnreadableReply):
            from_chat_completion(garbage)


def test_a_command_starts_without_the_modules_only_some_runs_need():
    """Start-up time (benchmarks/speed/practice_e2e.py): web search's httpx, the tracing SDK and the Responses API's
    models are loaded when a run uses them, not by every command."""
    import subprocess
    import sys

    probe = (
        "import sys, utu.commands.practice, utu.commands.eval; print([m for m in ('httpx', "
        "'opentelemetry.sdk', 'openai.resources.responses') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_plain_http_endpoint_gets_a_tls_context_that_trusts_nothing():
    """The CA bundle is loaded for https endpoints only (it slowed every command's start); the context a plain-http
    endpoint gets still checks certificates and hostnames, against no CA: TLS through it fails, never
    goes unverified."""
    import ssl

    from utu.llm.transport import tls_verify

    assert tls_verify("https://api.deepseek.com/v1") is True and tls_verify("HTTPS://x.openai.azure.com") is True
    # only a plain-http URL is trusted to need no CA: anything else keeps the system's trust
    assert tls_verify("api.deepseek.com/v1") is True and tls_verify("https://http.example.com") is True
    context = tls_verify("http://127.0.0.1:8080/v1")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0
