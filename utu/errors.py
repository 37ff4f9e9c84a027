"""Typed errors a user can hit. Scripts turn each into one line on stderr and exit code 2."""


class UtuError(Exception):
    """Base class for errors caused by input, configuration or the environment (not by a bug)."""

    exit_code = 2


class ConfigError(UtuError):
    """A config file, field or flag is invalid."""


class DataError(UtuError):
    """A data file or data set is invalid or missing."""


class LLMError(UtuError):
    """An LLM endpoint failed in a way retries cannot fix."""


class EndpointError(UtuError):
    """The endpoint refuses every request (bad key, unknown model or URL) or cannot be reached at start.

    Not an `LLMError`: the code that turns an `LLMError` into a failed attempt or learner call must let this
    one through, so that the run stops at once instead of failing every attempt the same way.
    """


class BudgetExhausted(EndpointError):
    """The run spent its `max_cost`: it stops between calls (as on a refused key), with its work saved. Exit 3."""

    exit_code = 3


class StorageError(UtuError):
    """The database refused a write (a full disk, a read-only file): nothing of that write was kept."""


class RunFailed(UtuError):
    """A run did not do its job (too many failed attempts, a learner that failed, nothing learned)."""


class StructuredOutputError(LLMError):
    """The model did not return JSON matching the requested schema, even after a retry."""

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw
