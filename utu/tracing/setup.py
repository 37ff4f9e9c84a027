"""Tracing to Phoenix, set up from `PHOENIX_ENDPOINT` (ending in /v1/traces) and `PHOENIX_PROJECT_NAME`.

Spans are batched and exported in the background, secrets masked first. Phoenix is optional and its
failure harmless: if the collector cannot be reached (at start or mid-run), spans are dropped from then
on and one warning is logged, not one per span.
"""

import atexit
import logging
import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from utu.errors import ConfigError
from utu.tracing.redact import Redactor

log = logging.getLogger(__name__)

_provider: TracerProvider | None = None


class RedactingExporter(SpanExporter):
    """Masks secrets in span attributes, then hands the spans on."""

    def __init__(self, inner: SpanExporter):
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        redactor = Redactor()  # the secrets are read once per batch, not once per attribute
        return self.inner.export([_redacted(s, redactor) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class OneWarningExporter(SpanExporter):
    """After the first failed export, warn once and drop all later spans (no retry storms, no log flood)."""

    def __init__(self, inner: SpanExporter, endpoint: str):
        self.inner = inner
        self.endpoint = endpoint
        self.failed = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.failed:
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as e:  # the exporter raises on some transport errors
            result, reason = SpanExportResult.FAILURE, f"{type(e).__name__}: {e}"
        else:
            reason = "the collector did not accept the spans"
        if result is not SpanExportResult.SUCCESS:
            with self._lock:
                if not self.failed:
                    self.failed = True
                    log.warning("Phoenix at %s is unreachable (%s): tracing is off for the rest of this run; "
                                "everything else goes on", self.endpoint, reason)  # fmt: skip
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _clean(attributes, redactor: Redactor) -> dict:
    return {k: redactor(v) if isinstance(v, str) else v for k, v in (attributes or {}).items()}


def _redacted(s: ReadableSpan, redactor: Redactor) -> ReadableSpan:
    attributes = _clean(s.attributes, redactor)
    events = [Event(e.name, _clean(e.attributes, redactor), e.timestamp) for e in s.events]  # exceptions quote
    status = s.status
    if status.description:
        status = type(status)(status.status_code, redactor(status.description))
    return ReadableSpan(
        name=s.name, context=s.context, parent=s.parent, resource=s.resource, attributes=attributes,
        events=events, links=s.links, kind=s.kind, status=status, start_time=s.start_time, end_time=s.end_time,
        instrumentation_scope=s.instrumentation_scope,
    )  # fmt: skip


def trace_url(trace_id: str | None) -> str | None:
    """The trace in Phoenix's UI (its /redirects/traces route finds the project), when tracing is on."""
    endpoint = os.environ.get("PHOENIX_ENDPOINT", "").strip().rstrip("/")
    if _provider is None or not trace_id or not endpoint.endswith("/v1/traces"):
        return None
    return f"{endpoint.removesuffix('/v1/traces')}/redirects/traces/{trace_id}"


def setup_tracing() -> bool:
    """Install the global tracer provider if PHOENIX_ENDPOINT is set (once per process). Returns whether on."""
    global _provider
    endpoint = os.environ.get("PHOENIX_ENDPOINT", "").strip()
    if not endpoint:
        return False
    if _provider is not None:
        return True
    if not endpoint.rstrip("/").endswith("/v1/traces"):
        raise ConfigError(f"PHOENIX_ENDPOINT={endpoint!r} must end in /v1/traces, e.g. http://127.0.0.1:6006/v1/traces")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The OTLP exporter logs every failed batch and retries for a minute; our wrapper reports it once.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL)
    logging.getLogger("opentelemetry.sdk.trace.export").setLevel(logging.CRITICAL)
    project = os.environ.get("PHOENIX_PROJECT_NAME") or os.environ.get("PHOENIX_PROJECT") or "utu"
    _provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    exporter = OneWarningExporter(RedactingExporter(OTLPSpanExporter(endpoint=endpoint, timeout=5)), endpoint)
    _provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
    trace.set_tracer_provider(_provider)
    atexit.register(shutdown_tracing)
    log.info("tracing to Phoenix at %s (project %s)", endpoint, project)
    return True


def shutdown_tracing() -> None:
    """Flush what is left (bounded wait) and stop exporting."""
    global _provider
    if _provider is not None:
        _provider.force_flush(timeout_millis=10000)
        _provider.shutdown()
        _provider = None
