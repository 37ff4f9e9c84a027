"""Tracing to Phoenix, set up from `PHOENIX_ENDPOINT` (ending in /v1/traces) and `PHOENIX_PROJECT_NAME`.

Spans are batched and exported in the background, secrets masked first. Phoenix is optional and its
failure harmless: if the collector cannot be reached (at start or mid-run), spans are dropped from then
on and one warning is logged, not one per span.
"""

import atexit
import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

from opentelemetry import trace

from utu.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from utu.tracing.export import OneWarningExporter

log = logging.getLogger(__name__)

_provider: "TracerProvider | None" = None
_exporter: "OneWarningExporter | None" = None


def trace_url(trace_id: str | None) -> str | None:
    """The trace in Phoenix's UI (its /redirects/traces route finds the project), when tracing is on and
    Phoenix has not failed (a link to spans that were dropped leads nowhere)."""
    endpoint = os.environ.get("PHOENIX_ENDPOINT", "").strip()
    if _provider is None or not trace_id or (_exporter is not None and _exporter.failed):
        return None
    url = _without_user(urlsplit(endpoint))  # (checked when tracing started)
    path = url.path.rstrip("/").removesuffix("/v1/traces")
    return url._replace(path=f"{path}/redirects/traces/{trace_id}", query="", fragment="").geturl()


def shown(endpoint: str) -> str:
    """The endpoint as logged and stored: without a user and password written into it."""
    try:
        return _without_user(urlsplit(endpoint)).geturl()
    except ValueError:
        return endpoint


def _without_user(url: SplitResult) -> SplitResult:
    return url._replace(netloc=url.netloc.rpartition("@")[2])


def _checked(endpoint: str) -> None:
    """Refuse, at start, an endpoint no collector can be at (exporting to it would fail only at the run's end)."""
    try:
        url = urlsplit(endpoint)
        url.port  # noqa: B018 (a port that is no number raises here)
        if url.scheme not in ("http", "https") or not url.hostname:
            why = "not an http(s) URL with a host"
        else:
            why = "" if url.path.rstrip("/").endswith("/v1/traces") else "it must end in /v1/traces"
    except ValueError as e:
        why = str(e)
    if why:
        raise ConfigError(f"PHOENIX_ENDPOINT={shown(endpoint)!r}: {why}, e.g. http://127.0.0.1:6006/v1/traces")


def setup_tracing() -> bool:
    """Install the global tracer provider if PHOENIX_ENDPOINT is set (once per process). Returns whether on."""
    global _provider, _exporter
    endpoint = os.environ.get("PHOENIX_ENDPOINT", "").strip()
    if not endpoint:
        return False
    if _provider is not None:
        return True
    _checked(endpoint)
    # here, not at the top: the SDK is 15 ms of every command's start, and most runs do not trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from utu.tracing.export import OneWarningExporter, RedactingExporter

    # The OTLP exporter logs every failed batch and retries for a minute; our wrapper reports it once.
    logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL)
    logging.getLogger("opentelemetry.sdk.trace.export").setLevel(logging.CRITICAL)
    project = os.environ.get("PHOENIX_PROJECT_NAME") or os.environ.get("PHOENIX_PROJECT") or "utu"
    _provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    _exporter = OneWarningExporter(RedactingExporter(OTLPSpanExporter(endpoint=endpoint, timeout=5)), shown(endpoint))
    _provider.add_span_processor(BatchSpanProcessor(_exporter, schedule_delay_millis=1000))
    trace.set_tracer_provider(_provider)
    atexit.register(shutdown_tracing)
    log.info("tracing to Phoenix at %s (project %s)", shown(endpoint), project)
    return True


def shutdown_tracing() -> None:
    """Flush what is left (bounded wait) and stop exporting."""
    global _provider
    if _provider is not None:
        _provider.force_flush(timeout_millis=10000)
        _provider.shutdown()
        _provider = None
