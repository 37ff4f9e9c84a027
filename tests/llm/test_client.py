"""The LLM client against the scripted stub: retries, Retry-After, errors, usage, concurrency, structured output."""

import asyncio
import json
import time

import pytest
from pydantic import BaseModel, Field, ValidationError

from tests.conftest import client_for, fast_config
from utu.config import ModelConfig, Pricing
from utu.errors import BudgetExhausted, EndpointError, LLMError, StructuredOutputError
from utu.llm import LLMClient, UsageTracker
from utu.llm.stub import StubScript, count_tokens

USER = [{"role": "user", "content": "what is one plus one"}]


@pytest.mark.parametrize("fault", ["http500", "http429", "malformed", "hang"])
async def test_each_transient_fault_is_retried_then_succeeds(stub, fault):
    server = stub(StubScript(replies=["two"], fault_sequence=[fault], retry_after=0.01, hang_seconds=3))
    client = client_for(server, timeout=0.5)
    reply = await client.chat(USER)
    assert reply.content == "two"
    assert reply.attempts == 2
    assert server.request_count == 2
    assert server.faults_served == [fault]


async def test_retries_are_bounded_and_then_raise(stub):
    server = stub(StubScript(fault_sequence=["http500"] * 10))
    client = client_for(server, max_retries=3)
    with pytest.raises(LLMError, match="HTTP 500 after 4 attempt"):
        await client.chat(USER)
    assert server.request_count == 4


async def test_backoff_grows_between_attempts(stub):
    server = stub(StubScript(replies=["ok"], fault_sequence=["http500"] * 3))
    client = client_for(server, retry_base_delay=0.1, retry_max_delay=1.0)
    start = time.perf_counter()
    await client.chat(USER)
    # Exponential: at least 0.1 + 0.2 + 0.4 seconds of waiting before the 4th attempt.
    assert time.perf_counter() - start >= 0.7


async def test_retry_after_is_honoured(stub):
    server = stub(StubScript(replies=["ok"], fault_sequence=["http429"], retry_after=0.6))
    client = client_for(server, retry_base_delay=0.01, retry_max_delay=0.02)
    start = time.perf_counter()
    await client.chat(USER)
    assert time.perf_counter() - start >= 0.6


async def test_no_retry_on_auth_error_and_the_message_names_the_variable(stub):
    server = stub(StubScript(fault_sequence=["http401"]))
    with pytest.raises(EndpointError, match="UTU_LLM_API_KEY") as info:  # stops the run, not one attempt
        await client_for(server).chat(USER)
    assert "401" in str(info.value)
    assert server.request_count == 1


async def test_preflight_names_a_dead_endpoint_at_once():
    from utu.servers import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    client = LLMClient(fast_config(max_retries=4), base_url=url, model="m", api_key="k")
    try:
        start = time.perf_counter()
        with pytest.raises(EndpointError, match="cannot reach the endpoint.*UTU_LLM_BASE_URL"):
            await client.preflight()
        assert time.perf_counter() - start < 5  # no retries
    finally:
        await client.close()


async def test_preflight_passes_a_live_endpoint(stub):
    server = stub(StubScript(replies=["x"]))
    await client_for(server).preflight()
    assert server.request_count == 0  # GET /models, no chat completion spent


async def test_a_malformed_retry_after_falls_back_to_backoff():
    import httpx2
    import openai

    from utu.llm.client import _retry_after

    def rate_limited(value: str) -> openai.RateLimitError:
        request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
        response = httpx2.Response(429, headers={"retry-after": value}, request=request)
        return openai.RateLimitError("rate limited", response=response, body=None)

    for value in ("soon", "Mon, 99 Foo 2026 99:99:99 GMT", "nan", "-5", "1e9", ""):
        assert _retry_after(rate_limited(value)) is None
    assert _retry_after(rate_limited("2")) == 2.0


async def test_no_retry_on_bad_request(stub):
    server = stub(StubScript(fault_sequence=["http400"]))
    with pytest.raises(LLMError, match="UTU_LLM_MODEL"):
        await client_for(server).chat(USER)
    assert server.request_count == 1


async def test_the_error_names_the_servers_own_message(stub):
    server = stub(StubScript(fault_sequence=["http500"] * 3))
    with pytest.raises(LLMError, match="HTTP 500 after 3 attempt.*injected server error"):
        await client_for(server, max_retries=2).chat(USER)


async def test_a_dead_endpoint_is_retried_then_named():
    from utu.servers import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    client = LLMClient(fast_config(max_retries=2), base_url=url, model="m", api_key="k")
    try:
        with pytest.raises(LLMError, match=f"{url}: cannot connect after 3 attempt.*Connection.*is the server running"):
            await client.chat(USER)  # refused, not a timeout (the transport calls it a connect timeout)
    finally:
        await client.close()


# The first loop's pool cannot be closed from the second loop; the collector closes its socket.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_one_client_serves_successive_event_loops(stub):
    """Sync callers may wrap each call in its own asyncio.run: the connection pool follows the loop."""
    server = stub(StubScript(replies=["a", "b"]))
    client = LLMClient(fast_config(), base_url=server.base_url, model="m", api_key="k")
    assert asyncio.run(client.chat(USER)).content == "a"

    async def second_and_close():
        try:
            return (await client.chat(USER)).content
        finally:
            await client.close()

    assert asyncio.run(second_and_close()) == "b"


async def test_usage_totals_are_exact_and_priced(stub):
    replies = ["one two three", "four five", "six"]
    server = stub(StubScript(replies=replies))
    usage = UsageTracker()
    client = client_for(server, usage=usage, pricing=Pricing(input_per_million=2.0, output_per_million=10.0))
    for tag in ("a", "a", "b"):
        await client.chat(USER, tag=tag)
    prompt = 3 * count_tokens(USER[0]["content"])
    completion = sum(count_tokens(r) for r in replies)
    total = usage.total()
    assert (total.calls, total.prompt_tokens, total.completion_tokens) == (3, prompt, completion)
    assert usage.by_tag["a"].calls == 2 and usage.by_tag["b"].completion_tokens == 1
    assert total.cost == pytest.approx((prompt * 2.0 + completion * 10.0) / 1e6)


async def test_failed_calls_add_no_usage(stub):
    server = stub(StubScript(fault_sequence=["http400"]))
    usage = UsageTracker()
    with pytest.raises(LLMError):
        await client_for(server, usage=usage).chat(USER)
    assert usage.total().calls == 0


async def test_concurrency_is_bounded_per_client(stub):
    server = stub(StubScript(replies=["ok"], latency=0.1))
    client = client_for(server, concurrency=3)
    await asyncio.gather(*(client.chat(USER) for _ in range(12)))
    assert server.max_in_flight == 3


async def test_per_call_timeout(stub):
    server = stub(StubScript(fault_sequence=["hang"] * 5, hang_seconds=5))
    client = client_for(server, timeout=0.2, max_retries=1)
    start = time.perf_counter()
    with pytest.raises(LLMError, match="Timeout"):
        await client.chat(USER)
    assert time.perf_counter() - start < 5  # sooner than one 5 s hang: the per-call timeout ended both tries
    assert server.request_count == 2


class Answer(BaseModel):
    value: int
    unit: str


@pytest.mark.parametrize(
    "reply",
    [
        '{"value": 3, "unit": "apples"}',
        'Here you go:\n```json\n{"value": 3, "unit": "apples"}\n```\nHope it helps.',
        'Sure. The answer is {"value": 3, "unit": "apples"} as requested.',
    ],
    ids=["clean", "fenced", "prose"],
)
async def test_structured_output_parses_clean_fenced_and_prose_json(stub, reply):
    server = stub(StubScript(replies=[reply]))
    result = await client_for(server, structured_output="text").structured(USER, Answer)
    assert result == Answer(value=3, unit="apples")
    assert server.request_count == 1


async def test_structured_output_retries_once_showing_the_validation_error(stub):
    server = stub(StubScript(replies=['{"value": "many"}', '{"value": 4, "unit": "pears"}']))
    result = await client_for(server, structured_output="text").structured(USER, Answer)
    assert result.value == 4
    retry_prompt = server.requests[1]["messages"][-1]["content"]
    assert "invalid" in retry_prompt and "value" in retry_prompt and "unit" in retry_prompt


async def test_structured_output_gives_a_typed_error_after_its_retries(stub):
    server = stub(StubScript(replies=["not json at all", "still not json", "never json"]))
    with pytest.raises(StructuredOutputError) as info:
        await client_for(server, structured_output="text").structured(USER, Answer)
    assert info.value.raw == "never json"
    assert server.request_count == 3


async def test_a_reply_cut_at_max_tokens_is_asked_again_with_more_room(stub):
    cut = {"content": '{"value": 3, "unit": "a very long unit that goes on and', "finish_reason": "length"}
    server = stub(StubScript(replies=[cut, '{"value": 3, "unit": "m"}']))
    result = await client_for(server, structured_output="text").structured(USER, Answer, max_tokens=50)
    assert result == Answer(value=3, unit="m")
    retry = server.requests[1]
    assert retry["max_tokens"] == 100
    assert "cut off" in retry["messages"][-1]["content"] and "shorter" in retry["messages"][-1]["content"]


async def test_a_reply_cut_every_time_says_so(stub):
    cut = {"content": '{"value": 3, "unit": "an', "finish_reason": "length"}
    server = stub(StubScript(replies=[cut]))
    with pytest.raises(StructuredOutputError, match="cut off at the 400-token limit"):
        await client_for(server, structured_output="text").structured(USER, Answer, max_tokens=100)
    assert [r["max_tokens"] for r in server.requests] == [100, 200, 400]


@pytest.mark.parametrize(
    "reply",
    [
        r'{"value": 3, "unit": "\boxed{3} \text{cm}"}',  # LaTeX with one backslash: \b and \t are JSON escapes
        r'{"value": 3, "unit": "\boxed{3} \text{cm}"}'.replace("\\", "\\\\"),  # correctly doubled
        '{"value": 3, "unit": "\\(\\sqrt{2}\\) \\boxed{3} \\text{cm}"}',  # invalid escapes \( \s
    ],
    ids=["latex", "doubled", "invalid-escapes"],
)
async def test_latex_backslashes_inside_json_strings_are_read_literally(stub, reply):
    server = stub(StubScript(replies=[reply]))
    result = await client_for(server, structured_output="text").structured(USER, Answer)
    assert "\\boxed{3}" in result.unit and "\\text{cm}" in result.unit
    assert "\b" not in result.unit and "\t" not in result.unit  # no backspace or tab characters
    assert server.request_count == 1


async def test_structured_output_empty_content_is_invalid(stub):
    server = stub(StubScript(replies=[""]))
    with pytest.raises(StructuredOutputError, match="empty"):
        await client_for(server, structured_output="text").structured(USER, Answer)


async def test_json_schema_mode_sends_the_schema(stub):
    server = stub(StubScript(replies=['{"value": 1, "unit": "x"}']))
    await client_for(server, structured_output="json_schema").structured(USER, Answer)
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["required"] == ["value", "unit"]


class Titled(BaseModel):
    title: str = Field("untitled", description="a field called title")
    value: int = 0


async def test_the_schema_instruction_ends_the_system_message_so_calls_share_their_prefix(stub):
    server = stub(StubScript(replies=['{"title": "a", "value": 1}']))
    client = client_for(server, structured_output="json_schema")
    for question in ("first question", "second question"):
        await client.structured(
            [{"role": "system", "content": "You judge."}, {"role": "user", "content": question}], Titled
        )
    first, second = (r["messages"] for r in server.requests)
    assert first[0]["content"] == second[0]["content"]  # the fixed prefix: role, then the schema
    assert first[0]["content"].startswith("You judge.\n\nReply with only a JSON value")
    assert [m["content"] for m in (first[1], second[1])] == ["first question", "second question"]
    shown = json.loads(first[0]["content"].split("\n")[-1])
    assert shown == {
        "properties": {
            "title": {"description": "a field called title", "type": "string"},
            "value": {"type": "integer"},
        },
        "type": "object",
    }
    assert server.requests[0]["response_format"]["json_schema"]["schema"]["title"] == "Titled"  # full for grammars
    await client.structured(USER, Titled)  # no system message: the instruction becomes one, first
    assert server.requests[-1]["messages"][0]["role"] == "system" and server.requests[-1]["messages"][1:] == USER


@pytest.mark.parametrize("status", ["http400", "http500"])
async def test_auto_mode_probes_once_and_falls_back_to_text_whatever_the_status(stub, status):
    def reject_formats(body):
        return status if "response_format" in body else None

    server = stub(StubScript(replies=['{"value": 2, "unit": "y"}'], fault_fn=reject_formats))
    client = client_for(server, structured_output="auto", max_retries=4)
    results = await asyncio.gather(*(client.structured(USER, Answer) for _ in range(3)))
    assert [r.value for r in results] == [2, 2, 2]
    # One probe per kind (no retries burnt on them), one plain probe, then text mode only.
    kinds = [r.get("response_format", {}).get("type") for r in server.requests]
    assert kinds[:4] == ["json_schema", None, "json_schema", "json_object"]
    assert kinds[4:] == [None, None, None]


async def test_a_rate_limit_during_the_probe_does_not_turn_structured_output_off(stub):
    limited = [2]

    def rate_limited_at_start(body):
        if "response_format" in body and limited[0]:
            limited[0] -= 1
            return "http429"
        return None

    server = stub(StubScript(replies=['{"value": 2, "unit": "y"}'], fault_fn=rate_limited_at_start))
    client = client_for(server, structured_output="auto", max_retries=3)
    assert (await client.structured(USER, Answer)).value == 2
    assert server.requests[-1]["response_format"]["type"] == "json_schema"


async def test_auto_mode_uses_json_object_where_only_that_is_accepted(stub):
    def only_json_object(body):  # llama-cpp-python's server: json_schema gives HTTP 500
        fmt = body.get("response_format")
        return "http500" if fmt and fmt["type"] != "json_object" else None

    server = stub(StubScript(replies=['{"value": 2, "unit": "y"}'], fault_fn=only_json_object))
    client = client_for(server, structured_output="auto")
    assert (await client.structured(USER, Answer)).value == 2
    assert server.requests[-1]["response_format"]["type"] == "json_object"
    assert server.requests[-1]["response_format"]["schema"]["required"] == ["value", "unit"]


async def test_auto_mode_keeps_json_schema_where_it_works(stub):
    server = stub(StubScript(replies=['{"value": 2, "unit": "y"}']))
    client = client_for(server, structured_output="auto")
    await client.structured(USER, Answer)
    await client.structured(USER, Answer)
    assert [r["response_format"]["type"] for r in server.requests] == ["json_schema"] * 3  # probe + 2 calls


async def test_json_object_mode_sends_the_llama_cpp_format(stub):
    server = stub(StubScript(replies=['{"value": 1, "unit": "x"}']))
    await client_for(server, structured_output="json_object").structured(USER, Answer)
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_object" and fmt["schema"]["required"] == ["value", "unit"]


async def test_preflight_stops_on_an_invalid_key_but_not_on_a_key_that_may_not_list_models():
    from aiohttp import web

    from utu.servers import free_port

    statuses = {"/v1/models": 401}

    async def models(request):
        return web.json_response({"error": {"message": "no"}}, status=statuses["/v1/models"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = LLMClient(fast_config(), base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="k")
    try:
        with pytest.raises(EndpointError, match="401 unauthorized: set a valid UTU_LLM_API_KEY"):
            await client.preflight()
        for status in (403, 404, 405):  # a restricted key, or no such route: the first real call decides
            statuses["/v1/models"] = status
            await client.preflight()
    finally:
        await client.close()
        await runner.cleanup()


async def test_requests_per_minute_spread_the_calls_with_no_429(stub):
    server = stub(StubScript(replies=["ok"]))
    client = client_for(server, requests_per_minute=240, concurrency=12)  # 4 a second, one second's share at once
    start = time.perf_counter()
    await asyncio.gather(*(client.chat(USER) for _ in range(12)))
    assert time.perf_counter() - start >= 1.9  # 8 calls beyond the first second's 4, at 4 a second: 2 s at least
    assert server.request_count == 12


async def test_tokens_per_minute_count_the_prompt_and_the_reply_cap(stub):
    server = stub(StubScript(replies=["ok"]))
    client = client_for(server, tokens_per_minute=6000, concurrency=4)  # 100 tokens a second
    start = time.perf_counter()
    await asyncio.gather(*(client.chat(USER, max_tokens=95) for _ in range(4)))  # ~100 tokens each
    assert time.perf_counter() - start >= 2.9  # the first in the first second's share, then one a second


async def test_max_cost_is_never_passed_a_request_that_could_pass_it_is_not_sent(stub):
    """Requests in flight once took a run 18% past max_cost: each now holds its worst case (a token per byte of
    its prompt, max_tokens of reply) while in flight, and one that could pass the cap is not sent."""
    server = stub(StubScript(reply_fn=lambda body: "ok " * 5, latency=0.05))
    usage = UsageTracker(max_cost=0.05)
    pricing = {"input_per_million": 100.0, "output_per_million": 200.0}
    client = client_for(server, usage, pricing=pricing, model_settings={"max_tokens": 20})

    async def call() -> bool:
        try:
            await client.chat(USER)
            return True
        except BudgetExhausted:
            return False

    sent = await asyncio.gather(*(call() for _ in range(200)))
    assert 0 < sum(sent) < 200 and server.request_count == sum(sent)
    # requests wait for those in flight rather than stop the run early: the cap is used to its last request
    worst = client._worst_cost(USER, {"max_tokens": 20})
    assert 0.05 - worst < usage.total().cost <= 0.05 and usage.over_budget
    with pytest.raises(BudgetExhausted, match=r"of max_cost \$0.0500: stopped before a request that could cost"):
        usage.check_budget()
    assert BudgetExhausted.exit_code == 3


async def test_a_request_that_alone_could_pass_max_cost_says_so(stub):
    server = stub(StubScript(replies=["ok"]))
    usage = UsageTracker(max_cost=0.0001)
    client = client_for(server, usage, pricing={"output_per_million": 100.0}, model_settings={"max_tokens": 2000})
    with pytest.raises(BudgetExhausted, match="one request can cost more than max_cost: raise it or lower max_tokens"):
        await client.chat(USER)
    assert server.request_count == 0


async def test_a_hanging_endpoint_is_said_once_while_it_is_waited_for(stub, monkeypatch, caplog):
    """With the default timeout and retries, a hanging endpoint was waited for 15 minutes without a word."""
    monkeypatch.setattr("utu.llm.client.SLOW_REPLY_SECONDS", 0.2)
    server = stub(StubScript(replies=["ok"], latency=0.6))
    client = client_for(server)
    with caplog.at_level("WARNING", logger="utu.llm.client"):
        await asyncio.gather(*(client.chat(USER) for _ in range(4)))
    said = [r.getMessage() for r in caplog.records if "no reply for" in r.getMessage()]
    assert len(said) == 1 and "still waiting" in said[0], said


def test_tokens_per_minute_below_one_reply_is_refused_at_start():
    with pytest.raises(ValidationError, match="tokens_per_minute \\(100\\) is not above model_settings.max_tokens"):
        ModelConfig(tokens_per_minute=100, model_settings={"max_tokens": 512})


async def test_a_request_larger_than_tokens_per_minute_is_said(stub, caplog):
    server = stub(StubScript(replies=["ok"]))
    client = client_for(server, tokens_per_minute=600)  # 10 tokens a second
    long = [{"role": "user", "content": "word " * 520}]  # about 650 tokens: a minute and more of waiting
    with caplog.at_level("WARNING", logger="utu.llm.ratelimit"):
        task = asyncio.create_task(client.chat(long))
        await asyncio.sleep(0.5)
        task.cancel()
    said = [r.getMessage() for r in caplog.records if "more than tokens_per_minute" in r.getMessage()]
    assert len(said) == 1 and "waits about 1.1 minutes" in said[0], said
