"""Tracing to Arize Phoenix (optional) and the TaskRecorder (always)."""

from utu.tracing.recorder import TaskRecorder
from utu.tracing.setup import setup_tracing, shutdown_tracing

__all__ = ["TaskRecorder", "setup_tracing", "shutdown_tracing"]
