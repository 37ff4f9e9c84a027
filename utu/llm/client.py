"""The one async LLM client: bounded concurrency, per-call timeout, retries with backoff, usage, structured output.

Everything in utu talks to an OpenAI-compatible endpoint through `LLMClient` (its HTTP side is
`utu.llm.http`). One policy decides about failures: retry 429, 5xx, timeouts, lost connections and
unreadable replies with exponential backoff and jitter, honouring `Retry-After`; never retry 400/401/403/404,
whose message names the setting to fix.
"""

import email.utils
import functools
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from utu.config.models import ModelConfig
from utu.errors import EndpointError, LLMError, StructuredOutputError
from utu.llm.http import HTTPStatusError, JSONEndpoint
from utu.llm.json_extract import extract_json
from utu.llm.slots import PrioritySlots
from utu.llm.usage import Usage, UsageTracker, priced
from utu.tracing.spans import llm_span, set_llm_output

M = TypeVar("M", bound=BaseModel)

MAX_RETRY_AFTER = 120.0  # seconds; a server asking for longer is treated as a failure
# The endpoint will refuse every request the same way: stop the run rather than fail each attempt.
FATAL_STATUSES = (401, 403, 404)
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
        self._http = JSONEndpoint(base_url, api_key or "not-needed", config.timeout, config.concurrency)
        self._slots = PrioritySlots(config.concurrency)
        # None: not known yet (auto mode); False: the endpoint rejected constrained output, use text.
        self._constrained_ok: bool | None = (
            None if config.structured_output == "auto" else (config.structured_output != "text")
        )

    async def close(self) -> None:
        await self._http.close()

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
            await self._http.get("/models", timeout=min(self.config.timeout, PREFLIGHT_TIMEOUT))
        except HTTPStatusError as e:
            if e.status == 401:
                raise EndpointError(self._explain(e, 1)) from e
        except _UNREADABLE as e:
            why = "no reply" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
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
        params = self.config.model_settings.model_dump(exclude_none=True) | settings
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
                        with llm_span(self.model, messages, params) as current:
                            completion, text = await self._http.post(
                                "/chat/completions", {"model": self.model, "messages": messages, **params}
                            )
                            if not isinstance(completion, dict) or not completion.get("choices"):
                                raise _UnreadableReply("the reply has no choices")
                            set_llm_output(current, text, completion)
        except HTTPStatusError as e:
            error = EndpointError if e.status in FATAL_STATUSES else LLMError
            raise error(self._explain(e, attempts)) from e
        except _UNREADABLE as e:
            why = f"no reply within {self.config.timeout:g}s" if isinstance(e, TimeoutError) else str(e)
            raise LLMError(f"{self.base_url}: {type(e).__name__} after {attempts} attempt(s): {why}") from e
        choice = completion["choices"][0]
        counts = completion.get("usage") or {}
        usage = priced(counts.get("prompt_tokens") or 0, counts.get("completion_tokens") or 0, self.config.pricing)
        self.usage.record(tag, usage)
        reply = choice.get("message") or {}
        message = {"role": "assistant", "content": reply.get("content") or ""}
        if reply.get("tool_calls"):
            message["tool_calls"] = reply["tool_calls"]
        return ChatResponse(
            content=message["content"],
            message=message,
            finish_reason=choice.get("finish_reason"),
            usage=usage,
            latency=time.perf_counter() - start,
            attempts=attempts,
            tool_calls=message.get("tool_calls", []),
        )

    async def structured(
        self, messages: list[dict[str, Any]], schema: type[M], *, tag: str = "default", priority: int = 0, **settings
    ) -> M:
        """A reply parsed and validated as `schema`.

        Uses JSON-schema constrained output where the endpoint supports it; otherwise extracts JSON from
        the text. An invalid reply is retried once with the validation error shown to the model; a
        second failure raises `StructuredOutputError` (with the raw reply).
        """
        schema_json, instruction = _schema_instruction(schema)
        messages = (
            [*messages, {"role": "user", "content": instruction}]
            if _last_role(messages) != "user"
            else [
                *messages[:-1],
                {**messages[-1], "content": f"{messages[-1]['content']}\n\n{instruction}"},
            ]
        )
        if self.config.structured_output == "json_object":
            response_format = {
                "type": "json_object",
                "schema": schema_json,
            }  # llama.cpp turns it into a grammar
        else:
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": schema_json},
            }
        settings = settings | {"priority": priority}
        raw = await self._structured_call(messages, response_format, tag, settings)
        try:
            return _parse(raw, schema)
        except ValueError as first_error:
            retry_messages = [
                *messages,
                {"role": "assistant", "content": raw},
                {
                    "role": "user",
                    "content": f"That reply was invalid: {first_error}. Reply again with only the corrected JSON.",
                },
            ]
            raw = await self._structured_call(retry_messages, response_format, tag, settings)
            try:
                return _parse(raw, schema)
            except ValueError as e:
                raise StructuredOutputError(f"{self.model}: no valid {schema.__name__} after a retry: {e}", raw) from e

    async def _structured_call(self, messages, response_format, tag, settings) -> str:
        if self._constrained_ok is not False:
            try:
                reply = await self.chat(messages, tag=tag, response_format=response_format, **settings)
                self._constrained_ok = True
                return reply.content
            except LLMError as e:
                rejected = isinstance(e.__cause__, HTTPStatusError) and e.__cause__.status in (400, 422)
                if not (rejected and self._constrained_ok is None):
                    raise
                self._constrained_ok = False  # the endpoint rejects response_format: text mode from now on
        return (await self.chat(messages, tag=tag, **settings)).content

    def _wait(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        delay = _retry_after(exc)
        if delay is not None:
            return delay
        # Exponential backoff with jitter: base, 2*base, 4*base, ... capped, plus up to one base at random.
        base = self.config.retry_base_delay
        return min(self.config.retry_max_delay, base * 2 ** (retry_state.attempt_number - 1)) + random.uniform(0, base)

    def _explain(self, e: HTTPStatusError, attempts: int) -> str:
        p = self.env_prefix
        where = f"{self.base_url} (model {self.model!r})"
        detail = e.detail
        if e.status == 401:
            return f"{where}: 401 unauthorized: set a valid {p}_API_KEY (or model_provider.api_key). {detail}"
        if e.status == 403:
            return f"{where}: 403 forbidden: the key in {p}_API_KEY may not use this model. {detail}"
        if e.status == 404:
            return f"{where}: 404 not found: check {p}_BASE_URL (usually ends in /v1) and {p}_MODEL. {detail}"
        if e.status in (400, 422):
            return f"{where}: {e.status} bad request: check {p}_MODEL and the model settings. {detail}"
        return f"{where}: HTTP {e.status} after {attempts} attempt(s). {detail}"


class _UnreadableReply(Exception):
    pass


# Transient failures besides retryable HTTP statuses: no connection, timeout, a body that is not a completion.
_UNREADABLE = (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, UnicodeDecodeError, _UnreadableReply)


def _is_transient(e: BaseException) -> bool:
    if isinstance(e, HTTPStatusError):
        return e.status in (408, 409, 429) or e.status >= 500
    return isinstance(e, _UNREADABLE)


def _retry_after(e: BaseException | None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP date), if present and sane."""
    if not isinstance(e, HTTPStatusError):
        return None
    value = e.headers.get("retry-after")
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
    schema_json = schema.model_json_schema()
    text = "Reply with only a JSON value (no prose, no code fence) that matches this JSON schema:\n"
    return schema_json, text + json.dumps(schema_json)


def _last_role(messages: list[dict[str, Any]]) -> str | None:
    return messages[-1].get("role") if messages else None


def _parse(raw: str, schema: type[M]) -> M:
    try:
        return schema.model_validate(extract_json(raw))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'value'}: {err['msg']}" for err in e.errors()[:5])
        raise ValueError(problems) from e
