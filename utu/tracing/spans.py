"""Spans with OpenInference conventions, through the global OpenTelemetry tracer.

When tracing is off no provider is installed and these spans cost next to nothing (OpenTelemetry's
no-op tracer). Every span gets the current session id (the experiment id) from `session(...)`.
"""

import contextlib
import contextvars
import json
from collections.abc import Iterator
from typing import Any, Protocol

from opentelemetry import context, trace
from opentelemetry.trace import Status, StatusCode

_tracer = trace.get_tracer("utu")
_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("utu_session", default=None)

CHAIN, AGENT, TOOL, EVALUATOR, LLM = "CHAIN", "AGENT", "TOOL", "EVALUATOR", "LLM"


@contextlib.contextmanager
def session(session_id: str) -> Iterator[None]:
    """Everything traced inside belongs to this session (LLM spans included: the client makes them)."""
    token = _session.set(session_id)
    try:
        yield
    finally:
        _session.reset(token)


@contextlib.contextmanager
def span(name: str, kind: str, input: Any = None, **attributes: Any) -> Iterator[trace.Span]:
    """A span that is current inside the block; an exception escaping the block is recorded on it.

    Made with start_span + context.attach rather than start_as_current_span: the latter's two decorated
    context managers were a third of the cost of tracing a practice step."""
    current = _tracer.start_span(name)
    if current.is_recording():
        current.set_attribute("openinference.span.kind", kind)
        if (session_id := _session.get()) is not None:
            current.set_attribute("session.id", session_id)
        if input is not None:
            set_io(current, "input", input)
        set_attributes(current, attributes)
    token = context.attach(trace.set_span_in_context(current))
    try:
        yield current
    except Exception as e:  # not cancellation: a cancelled attempt is not an error of the span's work
        if current.is_recording():
            current.record_exception(e)
            current.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
        raise
    finally:
        context.detach(token)
        current.end()


def set_io(current: trace.Span, which: str, value: Any) -> None:
    if not current.is_recording():
        return
    if isinstance(value, str):
        current.set_attribute(f"{which}.value", value)
    else:
        current.set_attribute(f"{which}.value", json.dumps(value, ensure_ascii=False, default=str))
        current.set_attribute(f"{which}.mime_type", "application/json")


def set_attributes(current: trace.Span, attributes: dict[str, Any]) -> None:
    if not current.is_recording():
        return
    for key, value in attributes.items():
        if value is None:
            continue
        if not isinstance(value, str | bool | int | float):
            value = json.dumps(value, ensure_ascii=False, default=str)
        current.set_attribute(key, value)


def trace_id_of(current: trace.Span) -> str | None:
    ctx = current.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


@contextlib.contextmanager
def llm_span(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> Iterator[trace.Span]:
    """One LLM request as an OpenInference LLM span (what Phoenix shows as a chat). Our client records it
    itself: the OpenAI instrumentor re-parsed every raw reply into pydantic objects, which was most of the
    cost of tracing. Finish it with `set_llm_output`."""
    with span("ChatCompletion", LLM) as current:
        if current.is_recording():
            request = {"model": model, "messages": messages, **params}
            current.set_attribute("input.value", json.dumps(request, ensure_ascii=False, default=str))
            current.set_attribute("input.mime_type", "application/json")
            current.set_attribute("llm.model_name", model)
            current.set_attribute("llm.system", "openai")
            current.set_attribute("llm.invocation_parameters", json.dumps(params, ensure_ascii=False, default=str))
            for i, message in enumerate(messages):
                prefix = f"llm.input_messages.{i}.message"
                current.set_attribute(f"{prefix}.role", str(message.get("role", "")))
                if isinstance(message.get("content"), str):
                    current.set_attribute(f"{prefix}.content", message["content"])
        yield current


class LLMReply(Protocol):
    """What `set_llm_output` reads of a reply (utu.llm.transport.Reply; tracing does not import the client)."""

    # Read-only (properties): a reply whose content is always a str is one too.
    @property
    def model(self) -> str | None: ...
    @property
    def content(self) -> str | None: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...

    def raw_json(self) -> str: ...


def set_llm_output(current: trace.Span, reply: LLMReply) -> None:
    """The reply of an `llm_span`: the raw JSON as output, the message, the token counts."""
    if not current.is_recording():
        return
    current.set_attribute("output.value", reply.raw_json())
    current.set_attribute("output.mime_type", "application/json")
    if reply.model:
        current.set_attribute("llm.model_name", reply.model)
    current.set_attribute("llm.output_messages.0.message.role", "assistant")
    current.set_attribute("llm.output_messages.0.message.content", reply.content)
    counts = (reply.prompt_tokens, reply.completion_tokens, reply.prompt_tokens + reply.completion_tokens)
    for ours, count in zip(("prompt", "completion", "total"), counts, strict=True):
        current.set_attribute(f"llm.token_count.{ours}", count)


def annotate(**attributes: Any) -> None:
    """Put facts (step statistics, the library, ...) on the current span, secrets masked."""
    from utu.tracing.redact import Redactor

    redactor = Redactor()
    set_attributes(trace.get_current_span(), {k: redactor.value(v) for k, v in attributes.items()})
