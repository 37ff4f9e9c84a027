"""Span exporters for Phoenix: secrets masked, and one warning when the collector is unreachable.

Imported only when tracing is on (it loads the OpenTelemetry SDK).
"""

import logging
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from utu.tracing.redact import Redactor

log = logging.getLogger("utu.tracing.setup")  # the name users filter on


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
                    log.warning(
                        "Phoenix at %s is unreachable (%s): tracing is off for the rest of this run; "
                        "everything else goes on",
                        self.endpoint,
                        reason,
                    )
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
        name=s.name,
        context=s.context,
        parent=s.parent,
        resource=s.resource,
        attributes=attributes,
        events=events,
        links=s.links,
        kind=s.kind,
        status=status,
        start_time=s.start_time,
        end_time=s.end_time,
        instrumentation_scope=s.instrumentation_scope,
    )
