"""The wire side of the LLM client: one request to an OpenAI-compatible API through the `openai` SDK.

Our code speaks chat messages (dicts, as in the Chat Completions API). This module sends them to the
API the model provider names (`chat.completions`, or `responses`, translated both ways), to OpenAI-style
endpoints or to Azure OpenAI (when `api_version` is set), and returns one `Reply`. The SDK's own retries
are off: the client's policy (`utu.llm.client`) decides about failures, on the SDK's typed errors.
The SDK's aiohttp transport is used: at 64 concurrent requests it is about 4x faster than its default.
"""

import asyncio
import functools
import inspect
import json
import ssl
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import openai
from openai.types.responses import Response, ResponseInputParam

from utu.errors import ConfigError

APIS = ("chat.completions", "responses")


@dataclass
class Reply:
    """One reply, whichever API produced it, in chat-completion terms."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # chat-style {"id", "type", "function"}
    finish_reason: str | None = None  # "stop", "length", "tool_calls"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None
    raw: Any = None  # the reply's JSON or the SDK's object, dumped only when a trace records it

    def raw_json(self) -> str:
        if isinstance(self.raw, dict):  # a chat completion as it came
            return json.dumps(self.raw, ensure_ascii=False)
        return self.raw.model_dump_json(exclude_unset=True) if self.raw is not None else ""


def tls_verify(base_url: str) -> ssl.SSLContext | bool:
    """How the SDK checks TLS: the trusted CAs for an https endpoint; for a plain-http one (a local server),
    a context that trusts no certificate. Nothing goes over TLS there, and with the CA bundle loaded, building
    the SDK's HTTP client took 0.07-0.13 s instead of 0.05 s (a slow 2-core machine); should a redirect lead to
    https, the handshake fails rather than go unverified."""
    if urlsplit(base_url.strip()).scheme.lower() != "http":
        return True  # https, and anything unexpected: the system's trust, as the SDK's default
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies hostnames and certificates, against no CA


class UnreadableReply(Exception):
    """The endpoint answered 2xx with something that is not a completion."""


class Transport:
    """An `openai.AsyncOpenAI` (or `AsyncAzureOpenAI`) for one endpoint, made lazily on the running loop."""

    def __init__(
        self, base_url: str, api_key: str, timeout: float, api: str = "chat.completions", api_version: str | None = None
    ):
        if api not in APIS:
            raise ConfigError(
                f"model_provider.type {api!r} is not supported: use chat.completions or responses "
                "(for litellm, run a LiteLLM proxy and use chat.completions with its URL)"
            )
        self.base_url = base_url.rstrip("/")
        self.api = api
        self._api_key = api_key
        self._timeout = timeout
        self._api_version = api_version
        self._client: openai.AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def sdk(self) -> openai.AsyncOpenAI:
        """The SDK client of the running event loop (its aiohttp session belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            http = openai.DefaultAioHttpClient(verify=tls_verify(self.base_url))
            key, timeout = self._api_key, self._timeout
            if self._api_version:
                self._client = openai.AsyncAzureOpenAI(
                    azure_endpoint=self.base_url,
                    api_version=self._api_version,
                    api_key=key,
                    timeout=timeout,
                    max_retries=0,
                    http_client=http,
                )
            else:
                self._client = openai.AsyncOpenAI(
                    base_url=self.base_url, api_key=key, timeout=timeout, max_retries=0, http_client=http
                )
            self._loop = loop
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.close()

    async def list_models(self, timeout: float) -> None:
        await self.sdk().models.list(timeout=timeout)

    async def complete(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> Reply:
        if self.api == "responses":
            return await self._responses(model, messages, params)
        # The SDK's `chat.completions.create` first walks every message through its TypedDict transform (30%
        # of a call's CPU at high concurrency, and nothing to transform in plain chat dicts); its documented
        # raw `post` sends the same body with the same errors and Azure routing. The reply is read as JSON:
        # building the SDK's ChatCompletion models from it was another 15%.
        body = {"model": model, "messages": messages, **params}
        return from_chat_completion(await self.sdk().post("/chat/completions", body=body, cast_to=dict))

    async def _responses(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> Reply:
        params = dict(params)
        if "max_tokens" in params:
            params["max_output_tokens"] = params.pop("max_tokens")
        if "tools" in params:
            params["tools"] = [_response_tool(t) for t in params["tools"]]
        if "response_format" in params:
            params["text"] = {"format": _response_text_format(params.pop("response_format"))}
        known, extra = _split(params, _responses_params())
        response = await self.sdk().responses.create(
            model=model,
            input=cast(ResponseInputParam, to_response_input(messages)),  # plain dicts of the items' shapes
            **known,
            extra_body=extra or None,
        )
        if not isinstance(response, Response) or response.output is None:
            raise UnreadableReply("the reply has no output")
        return from_response(response)


def from_chat_completion(data: Any) -> Reply:
    """A chat completion's JSON as a `Reply`; `UnreadableReply` if it is not shaped like one."""
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        usage = data.get("usage") or {}
        if not isinstance(content, str) or not isinstance(calls, list):
            raise TypeError("content is not a string or tool_calls not a list")
        return Reply(
            content=content,
            tool_calls=[_without_none(call) for call in calls],
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            model=data.get("model"),
            raw=data,
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise UnreadableReply(f"the reply is not a chat completion ({type(e).__name__}: {e})") from None


def _without_none(value: Any) -> Any:
    """As the SDK's `model_dump(exclude_none=True)`: tool calls keep only the fields that are set."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _split(params: dict[str, Any], known: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Request fields the SDK method names, and the rest (sent as they are in the body: top_k, min_p, ...)."""
    ours = {k: v for k, v in params.items() if k in known}
    return ours, {k: v for k, v in params.items() if k not in known}


@functools.cache
def _responses_params() -> frozenset[str]:
    # imported here: the Responses resource loads its streaming event models, 55 ms of every command's start
    from openai.resources.responses import AsyncResponses

    return _keywords(AsyncResponses.create)


def _keywords(method) -> frozenset[str]:
    skip = {"self", "model", "messages", "input", "extra_headers", "extra_query", "extra_body", "timeout"}
    return frozenset(inspect.signature(method).parameters) - skip


# --- Chat Completions terms <-> Responses terms ------------------------------------------------------------


def to_response_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as Responses API input items (assistant tool calls and tool results become items)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m.get("tool_call_id", ""),
                    "output": _text(m.get("content")),
                }
            )
            continue
        if m.get("content") or not m.get("tool_calls"):
            items.append({"role": role, "content": m.get("content") or ""})
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id", ""),
                    "name": function.get("name", ""),
                    "arguments": function.get("arguments") or "{}",
                }
            )
    return items


def from_response(response: Any) -> Reply:
    """A Responses API reply in chat terms: its text, its function calls as tool_calls, why it stopped."""
    texts, calls = [], []
    for item in response.output:
        if item.type == "message":
            texts += [part.text for part in item.content if getattr(part, "type", "") == "output_text"]
        elif item.type == "function_call":
            calls.append(
                {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
            )
    details = response.incomplete_details
    if response.status == "incomplete" and details is not None and details.reason == "max_output_tokens":
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    usage = response.usage
    return Reply(
        content="".join(texts),
        tool_calls=calls,
        finish_reason=finish,
        prompt_tokens=(usage.input_tokens or 0) if usage else 0,
        completion_tokens=(usage.output_tokens or 0) if usage else 0,
        model=response.model,
        raw=response,
    )


def _response_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function" or "function" not in tool:
        return tool
    return {"type": "function", **tool["function"]}


def _response_text_format(response_format: dict[str, Any]) -> dict[str, Any]:
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        return {"type": "json_schema", "name": spec.get("name", "reply"), "schema": spec.get("schema", {})}
    return {"type": response_format.get("type", "text")}  # json_object (the llama.cpp `schema` key has no place)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "" if content is None else str(content)
