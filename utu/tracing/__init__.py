"""Tracing to Arize Phoenix (optional): setup, spans with OpenInference conventions, redaction."""

from utu.tracing.setup import setup_tracing, shutdown_tracing

__all__ = ["setup_tracing", "shutdown_tracing"]
