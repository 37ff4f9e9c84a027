"""The one async LLM client: bounded concurrency, per-call timeout, retries with backoff, usage, structured output.

Everything in utu talks to an OpenAI-compatible endpoint through `LLMClient` (its wire side, the
`openai` SDK, is `utu.llm.transport`). One policy decides about failures: retry 429, 5xx, timeouts, lost connections and
unreadable replies with exponential backoff and jitter, honouring `Retry-After`; never retry 400/401/403/404,
whose message names the setting to fix.
"""

import asyncio
import contextlib
import email.utils
import functools
import json
import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from utu.config.models import ModelConfig
from utu.errors import EndpointError, LLMError, StructuredOutputError
from utu.llm.json_extract import extract_json
from utu.llm.ratelimit import RateLimit
from utu.llm.slots import PrioritySlots
from utu.llm.transport import Transport, UnreadableReply
from utu.llm.usage import Usage, UsageTracker, priced
from utu.tracing.spans import llm_span, set_llm_output

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)

STRUCTURED_RETRIES = 2  # a cut or invalid structured reply is asked again at most this often
MAX_RETRY_AFTER = 120.0  # seconds; a server asking for longer is treated as a failure
# The endpoint will refuse every request the same way: stop the run rather than fail each attempt.
FATAL_STATUSES = (401, 403, 404)
SLOW_REPLY_SECONDS = 60  # a request still waiting this long is said (once until a reply comes)
PREFLIGHT_TIMEOUT = 30.0


@dataclass
class ChatResponse:
    content: str
    message: dict[str, Any]  # the assistant message as a chat dict (content, tool_calls)
    finish_reason: str | None
    usage: Usage
    latency: float
    attempts: int = 1
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class LLMClient:
    """Async client for one endpoint and model. Create one per model and share it."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        usage: UsageTracker | None = None,
        env_prefix: str = "UTU_LLM",
    ):
        self.config = config
        self.base_url = base_url
        self.model = model
        self.usage = usage or UsageTracker()
        self.env_prefix = env_prefix
        provider = config.model_provider
        self._transport = Transport(
            base_url, api_key or "not-needed", config.timeout, provider.type, provider.api_version
        )
        self._slots = PrioritySlots(config.concurrency)
        self._rate = RateLimit(config.requests_per_minute, config.tokens_per_minute)
        # How structured replies are asked for; in auto mode found by one probe, on first use.
        self._format: str | None = None if config.structured_output == "auto" else config.structured_output
        self._probe_lock = asyncio.Lock()
        self._said_slow = False

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "LLMClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def preflight(self) -> None:
        """One `GET /models` before any work: an unreachable endpoint or an invalid key raises `EndpointError`
        now, not after every attempt has spent its retries. Any other answer is let through: an endpoint
        without that route, or a key allowed to chat but not to list models (403); their first real call
        still stops the run on a refused key, model or URL."""
        p = self.env_prefix
        try:
            await self._transport.list_models(timeout=min(self.config.timeout, PREFLIGHT_TIMEOUT))
        except openai.APIStatusError as e:
            if e.status_code == 401:
                raise EndpointError(self._explain(e, 1)) from e
        except _UNREADABLE as e:
            why = "no reply" if _timed_out(e) else f"{type(e).__name__}: {e}"
            raise EndpointError(f"{self.base_url}: cannot reach the endpoint ({why}): check {p}_BASE_URL") from e

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tag: str = "default",
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        priority: int = 0,
        **settings: Any,
    ) -> ChatResponse:
        """One chat completion, retried on transient failures. Settings override the config's.

        When all `concurrency` slots are busy, waiting calls get the next free one by `priority`, lower first.
        """
        params = self.config.model_settings.model_dump(exclude_none=True, exclude={"extra_body"})
        params = params | self.config.model_settings.extra_body | settings
        if tools:
            params["tools"] = tools
        if response_format:
            params["response_format"] = response_format
        attempts = 0
        start = time.perf_counter()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    async with self._slots.hold(priority):
                        await self._rate.wait(messages, params)
                        async with self.usage.reserve(self._worst_cost(messages, params)):
                            with llm_span(self.model, messages, params) as current, self._said_if_slow():
                                reply = await self._transport.complete(self.model, messages, params)
                                set_llm_output(current, reply)
                            usage = priced(reply.prompt_tokens, reply.completion_tokens, self.config.pricing)
                            self.usage.record(tag, usage)  # before the reservation ends: the cap never double-counts
        except openai.APIStatusError as e:
            error = EndpointError if e.status_code in FATAL_STATUSES else LLMError
            raise error(self._explain(e, attempts)) from e
        except _UNREADABLE as e:
            refused = _refused(e)  # the transport reports a refused connection as a connect timeout
            if refused is not None:
                why = f"cannot connect after {attempts} attempt(s) ({type(refused).__name__}: {refused})"
                raise LLMError(f"{self.base_url}: {why}; is the server running?") from e
            why = f"no reply within {self.config.timeout:g}s" if _timed_out(e) else str(e)
            raise LLMError(f"{self.base_url}: {type(e).__name__} after {attempts} attempt(s): {why}") from e
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        return ChatResponse(
            content=reply.content,
            message=message,
            finish_reason=reply.finish_reason,
            usage=usage,
            latency=time.perf_counter() - start,
            attempts=attempts,
            tool_calls=reply.tool_calls,
        )

    @contextlib.contextmanager
    def _said_if_slow(self) -> Iterator[None]:
        """A request with no reply after SLOW_REPLY_SECONDS is said once (a hanging endpoint with the default
        timeout and retries was silent for 15 minutes), and again only after a reply has come."""
        timer = asyncio.get_running_loop().call_later(SLOW_REPLY_SECONDS, self._say_slow)
        try:
            yield
            self._said_slow = False
        finally:
            timer.cancel()

    def _say_slow(self) -> None:
        if not self._said_slow:
            self._said_slow = True
            c = self.config
            log.warning(
                "%s (model %s): no reply for %ds yet; each request waits up to %gs and is tried %d times (timeout,"
                " max_retries): still waiting",
                self.base_url,
                self.model,
                SLOW_REPLY_SECONDS,
                c.timeout,
                c.max_retries + 1,
            )

    def _worst_cost(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> float:
        """The most one request can cost, for `max_cost`: a prompt token is at least one byte of its UTF-8 text,
        and the reply at most `max_tokens` (unbounded without one: then only the prompt is counted)."""
        if self.usage.max_cost is None:
            return 0.0
        sent = [messages, params.get("tools"), params.get("response_format")]  # what the prompt is made of
        prompt = len(json.dumps(sent, ensure_ascii=False).encode())
        return priced(prompt, int(params.get("max_tokens") or 0), self.config.pricing).cost

    async def query_one(
        self, messages: list[dict[str, Any]] | str | None = None, *, input: str | list | None = None, **settings: Any
    ) -> str:
        """The reply's text: Youtu-Agent's `SimplifiedAsyncOpenAI.query_one`, so verify functions written for it
        (`await llm.query_one(messages=...)` on the judge) work unchanged. `messages` may be one string (one user
        message, as Youtu-Agent's webwalker.py sends it); `input` is the Responses API's spelling of the
        messages; `model` is this client's (a verifier cannot switch it)."""
        settings.pop("model", None)
        if messages is None:
            messages = input
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        messages = list(messages or [])
        return (await self.chat(messages, tag=settings.pop("tag", "judge"), **settings)).content

    async def structured(
        self, messages: list[dict[str, Any]], schema: type[M], *, tag: str = "default", priority: int = 0, **settings
    ) -> M:
        """A reply parsed and validated as `schema`.

        Uses constrained output where the endpoint supports it (auto mode probes once which kind it takes);
        otherwise extracts JSON from the text. A reply cut by `max_tokens` is asked again with twice the
        room and a request to be brief; an invalid one is asked again with the validation error shown.
        After `STRUCTURED_RETRIES` such retries, raises `StructuredOutputError` (with the raw reply).
        """
        schema_json, instruction = _schema_instruction(schema)
        messages = _with_instruction(messages, instruction)
        kind = await self._structured_format()
        if kind == "json_object":
            response_format = {"type": "json_object", "schema": schema_json}  # llama.cpp turns it into a grammar
        elif kind == "json_schema":
            response_format = {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": schema_json}}
        else:
            response_format = None
        settings = settings | {"priority": priority}
        asked = messages
        for _ in range(STRUCTURED_RETRIES + 1):
            reply = await self.chat(asked, tag=tag, response_format=response_format, **settings)
            raw = reply.content
            if reply.finish_reason == "length":
                limit = settings.get("max_tokens") or self.config.model_settings.max_tokens
                problem = f"the reply was cut off at the {limit or 'output'}-token limit before its JSON ended"
                if limit:
                    settings = settings | {"max_tokens": limit * 2}
                fix = "Reply again with the complete JSON, much shorter: one or two sentences per text field."
                asked = [*messages, {"role": "user", "content": f"Your last reply was cut off. {fix}"}]
            else:
                try:
                    return _parse(raw, schema)
                except ValueError as e:
                    problem = str(e)
                fix = "Reply again with only the corrected JSON."
                asked = [
                    *messages,
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": f"That reply was invalid: {problem}. {fix}"},
                ]
        raise StructuredOutputError(
            f"{self.model}: no valid {schema.__name__} after {STRUCTURED_RETRIES} retries: {problem}", raw
        )

    async def _structured_format(self) -> str:
        """json_schema, json_object or text: the configured one, or in auto mode the first the endpoint takes."""
        if self._format is None:
            async with self._probe_lock:
                if self._format is None:
                    self._format = await self._probe_format()
        return self._format

    async def _probe_format(self) -> str:
        """One tiny request per kind of constrained output (a rate limit or a gateway's error waited out: `_probe`).
        Servers reject what they do not support with any status (llama-cpp-python's answers json_schema with a
        500), so the first failed probe is checked against a plain request and tried once more: if the plain one
        works and the probe fails again, the endpoint rejects the format."""
        rejected: list[str] = []
        for kind in ("json_schema", "json_object"):
            why = await self._probe(_PROBE_FORMATS[kind])
            if why and not rejected:  # does the endpoint answer at all? (retried; raises like any call if not)
                await self.chat(_PROBE_MESSAGES, tag="probe", max_tokens=4)
                why = await self._probe(_PROBE_FORMATS[kind])  # a second chance, in case the first was bad luck
            if why is None:
                if rejected:
                    log.warning("%s: %s; using %s", self.base_url, "; ".join(rejected), kind)
                return kind
            rejected.append(f"response_format {kind} rejected ({why})")
        log.warning("%s: %s; extracting JSON from text replies", self.base_url, "; ".join(rejected))
        return "text"

    async def _probe(self, response_format: dict[str, Any]) -> str | None:
        """None if the endpoint answers a request with this response_format, else why not. A rate limit or a
        gateway's error says nothing about the format: it is waited out (as many times as `max_retries`)."""
        params = {"max_tokens": 8, "response_format": response_format}
        for attempt in range(self.config.max_retries + 1):
            try:
                await self._rate.wait(_PROBE_MESSAGES, params)
                await self._transport.complete(self.model, _PROBE_MESSAGES, params)
                return None
            except openai.APIStatusError as e:
                why = f"HTTP {e.status_code}: {_detail(e)}"
                if e.status_code not in _NOT_A_REJECTION or attempt == self.config.max_retries:
                    return why
                base = self.config.retry_base_delay
                delay = _retry_after(e)
                await asyncio.sleep(delay if delay is not None else min(self.config.retry_max_delay, base * 2**attempt))
            except _UNREADABLE as e:
                return type(e).__name__
        raise AssertionError("unreachable")

    def _wait(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        delay = _retry_after(exc)
        if delay is not None:
            return delay
        # Exponential backoff with jitter: base, 2*base, 4*base, ... capped, plus up to one base at random.
        base = self.config.retry_base_delay
        return min(self.config.retry_max_delay, base * 2 ** (retry_state.attempt_number - 1)) + random.uniform(0, base)

    def _explain(self, e: openai.APIStatusError, attempts: int) -> str:
        p = self.env_prefix
        where = f"{self.base_url} (model {self.model!r})"
        detail, status = _detail(e), e.status_code
        if status == 401:
            return f"{where}: 401 unauthorized: set a valid {p}_API_KEY (or model_provider.api_key). {detail}"
        if status == 403:
            return f"{where}: 403 forbidden: the key in {p}_API_KEY may not use this model. {detail}"
        if status == 404:
            return f"{where}: 404 not found: check {p}_BASE_URL (usually ends in /v1) and {p}_MODEL. {detail}"
        if status in (400, 422):
            return f"{where}: {status} bad request: check {p}_MODEL and the model settings. {detail}"
        return f"{where}: HTTP {status} after {attempts} attempt(s). {detail}"


# Transient failures besides retryable HTTP statuses: no connection, timeout, a body that is not a completion.
_UNREADABLE = (
    openai.APIConnectionError,  # includes APITimeoutError
    openai.APIResponseValidationError,
    TimeoutError,
    json.JSONDecodeError,
    UnicodeDecodeError,
    UnreadableReply,
)


def _timed_out(e: BaseException) -> bool:
    return isinstance(e, openai.APITimeoutError | TimeoutError)


def _refused(e: BaseException) -> ConnectionRefusedError | None:
    """The system's refusal to connect, down the chain of causes, if that is what happened (a reset or a broken
    pipe mid-reply is not: the server was reached)."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionRefusedError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _detail(e: openai.APIStatusError) -> str:
    """The server's error message: OpenAI-style `{"error": {"message": ...}}` if present, else the body."""
    body = e.body if e.body is not None else e.response.text
    if isinstance(body, dict):
        body = body.get("error", body)
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body
    return " ".join(str(body or f"HTTP {e.status_code}").split())[:300]


# Statuses a server gives for load or an upstream fault, never for a response_format it does not take.
_NOT_A_REJECTION = (408, 409, 429, 502, 503, 504)


def _is_transient(e: BaseException) -> bool:
    if isinstance(e, openai.APIStatusError):
        return e.status_code in (408, 409, 429) or e.status_code >= 500
    return isinstance(e, _UNREADABLE)


def _retry_after(e: BaseException | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP date), if present and sane."""
    if not isinstance(e, openai.APIStatusError):
        return None
    value = e.response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):  # a malformed header: use our own backoff
            return None
    return seconds if 0 <= seconds <= MAX_RETRY_AFTER else None


@functools.cache
def _schema_instruction(schema: type[BaseModel]) -> tuple[dict[str, Any], str]:
    """The schema (for constrained output) and the instruction that shows it to the model, without the
    titles and defaults pydantic adds (a third of the text, and nothing a model needs)."""
    schema_json = schema.model_json_schema()
    text = "Reply with only a JSON value (no prose, no code fence) that matches this JSON schema:\n"
    return schema_json, text + json.dumps(_without_keys(schema_json, {"title", "default"}), separators=(",", ":"))


def _without_keys(value: Any, keys: set[str], names: bool = False) -> Any:
    """`value` without `keys` at any depth; `names`: the keys of this dict are field names (of "properties",
    where a field may well be called "title"), kept."""
    if isinstance(value, dict):
        return {
            k: _without_keys(v, keys, k == "properties" and not names)
            for k, v in value.items()
            if names or k not in keys
        }
    if isinstance(value, list):
        return [_without_keys(v, keys) for v in value]
    return value


def _with_instruction(messages: list[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
    """The schema instruction at the end of the system message (or as one): the same for every call with
    this schema, it belongs in the prompt's fixed prefix, which servers keep computed between calls
    (llama.cpp's slots, OpenAI's prompt cache), rather than after each call's own text."""
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


_PROBE_MESSAGES = [{"role": "user", "content": 'Reply with the JSON {"ok": true}.'}]
_PROBE_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
_PROBE_FORMATS = {
    "json_schema": {"type": "json_schema", "json_schema": {"name": "Probe", "schema": _PROBE_SCHEMA}},
    "json_object": {"type": "json_object", "schema": _PROBE_SCHEMA},
}


def _parse(raw: str, schema: type[M]) -> M:
    try:
        return schema.model_validate(extract_json(raw))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}" for err in e.errors()[:5])
        raise ValueError(problems) from e
