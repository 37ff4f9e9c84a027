"""Secrets never leave the process: API keys and Authorization headers are masked in spans, rows and logs.

The secrets are the values of environment variables named like keys (`*_API_KEY`, `*_TOKEN`, `*_SECRET`,
`*PASSWORD*`) plus any key registered at run time (e.g. an api_key written in a YAML config). A value
shorter than `MIN_SECRET_LENGTH` characters, or made only of digits, is never matched as free text: a
local server's `UTU_LLM_API_KEY=12345678` must not turn an answer `\\boxed{12345678}` into `[REDACTED]`.
Every text field utu stores is masked the same way (attempts' trajectories and replies, library snapshots,
operations, learner errors); so are span attributes and log lines. What the model is asked is never masked:
an attempt row keeps its question and answer as the data set has them, and the model and the verifier get
exactly those.
"""

import json
import logging
import os
import re
from typing import Any

MASK = "[REDACTED]"
_SECRET_NAME = re.compile(r"(_API_KEY|_TOKEN|_SECRET|PASSWORD)$|^(OPENAI_API_KEY|PHOENIX_API_KEY)$", re.IGNORECASE)
# A bearer token is a header's value, or a long run of letters and digits: never a word ("a ring bearer delivered")
# nor a number.
_BEARER = re.compile(
    r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?bearer\s+)[A-Za-z0-9._\-~+/=]{8,}"
    r"|(bearer\s+)(?=[A-Za-z._\-~+/=]*[0-9])(?=[0-9._\-~+/=]*[A-Za-z])[A-Za-z0-9._\-~+/=]{16,}"
)
MIN_SECRET_LENGTH = 16
_extra: set[str] = set()


def maskable(value: str | None) -> bool:
    """Long and distinctive enough to be matched as free text without rewriting ordinary data."""
    return bool(value) and len(value) >= MIN_SECRET_LENGTH and not value.isdigit()


def register_secret(value: str | None) -> None:
    if maskable(value):
        _extra.add(value)


def secrets() -> list[str]:
    found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and maskable(v)}
    return sorted(found | _extra, key=len, reverse=True)


class Redactor:
    """Masks a fixed set of secrets (longest first, one regex pass) and Bearer tokens. Build one per batch of
    texts: reading the environment for every string was most of the cost of exporting spans."""

    def __init__(self, known: list[str] | None = None):
        known = secrets() if known is None else known
        self._secrets = re.compile("|".join(re.escape(s) for s in known)) if known else None

    def __call__(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        return _BEARER.sub(lambda m: (m.group(1) or m.group(2)) + MASK, text)

    def value(self, value: Any) -> Any:
        """Redact strings anywhere inside a JSON-like value (dicts, lists)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict | list):
            text = json.dumps(value, ensure_ascii=False)
            cleaned = self(text)
            return value if cleaned == text else json.loads(cleaned)
        return value


def redact(text: str) -> str:
    return Redactor()(text)


class RedactingFilter(logging.Filter):
    """Masks secrets in every log record that passes through the handler it is attached to."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
