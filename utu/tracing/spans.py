"""Spans with OpenInference conventions, through the global OpenTelemetry tracer.

When tracing is off no provider is installed and these spans cost next to nothing (OpenTelemetry's
no-op tracer). Every span gets the current session id (the experiment id) from `session(...)`.
"""

import contextlib
import contextvars
import json
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace

_tracer = trace.get_tracer("utu")
_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("utu_session", default=None)

CHAIN, AGENT, TOOL, EVALUATOR, LLM = "CHAIN", "AGENT", "TOOL", "EVALUATOR", "LLM"


@contextlib.contextmanager
def session(session_id: str) -> Iterator[None]:
    """Everything traced inside belongs to this session (LLM spans of the OpenAI instrumentor too)."""
    from openinference.instrumentation import using_session

    token = _session.set(session_id)
    try:
        with using_session(session_id):
            yield
    finally:
        _session.reset(token)


@contextlib.contextmanager
def span(name: str, kind: str, input: Any = None, **attributes: Any) -> Iterator[trace.Span]:
    with _tracer.start_as_current_span(name) as current:
        if current.is_recording():
            current.set_attribute("openinference.span.kind", kind)
            if (session_id := _session.get()) is not None:
                current.set_attribute("session.id", session_id)
            if input is not None:
                set_io(current, "input", input)
            set_attributes(current, attributes)
        yield current


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
