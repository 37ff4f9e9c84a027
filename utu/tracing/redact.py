"""Secrets never leave the process: API keys and Authorization headers are masked in spans, rows and logs.

The secrets are the values of environment variables named like keys (`*_API_KEY`, `*_TOKEN`, `*_SECRET`,
`*PASSWORD*`) plus any key registered at run time (e.g. an api_key written in a YAML config). A value
shorter than `MIN_SECRET_LENGTH` characters, or made only of digits, is never matched as free text: a
local server's `UTU_LLM_API_KEY=12345678` must not turn an answer `\\boxed{12345678}` into `[REDACTED]`.
Every text field utu stores (attempts' trajectories, library snapshots, operations, learner errors), span
attributes and log lines are masked of those values and of well-formed keys (`KEY_FORMATS`: an Authorization
header's bearer token, provider key formats such as `sk-...`, `ghp_...`, `AKIA...`), never by a loose pattern.

A reply that is judged (`response`) is masked of the known secrets' values only, and judged as stored: live or
after a resume, from `--step judge` or in one run, the verifier sees the same text, which is the reply the model
gave unless it quoted one of your keys. What the model is asked is never masked: an attempt row keeps its question
and answer as the data set has them, and the model and the verifier get exactly those.
"""

import json
import logging
import os
import re
import traceback
from typing import Any, TypeGuard

MASK = "[REDACTED]"
_SECRET_NAME = re.compile(r"(_API_KEY|_TOKEN|_SECRET|PASSWORD)$|^(OPENAI_API_KEY|PHOENIX_API_KEY)$", re.IGNORECASE)
_TOKEN = r"[A-Za-z0-9._\-~+/=]"
# Keys in the shape their issuers give them, and a token in an Authorization header (its quotes escaped too, as in
# JSON held in a JSON string: a tool's output in a stored trajectory); never a word after "bearer" in prose ("a ring
# bearer delivered") nor any text that merely looks random.
KEY_FORMATS = re.compile(
    rf"(?i:(authorization\\*[\"']?\s*[:=]\s*\\*[\"']?bearer\s+)){_TOKEN}{{8,}}"
    r"|(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic (sk-ant-), DeepSeek and others: with a digit (`_masked_key`)
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r")(?![A-Za-z0-9])"
)
MIN_SECRET_LENGTH = 16
_extra: set[str] = set()


def maskable(value: str | None) -> TypeGuard[str]:
    """Long and distinctive enough to be matched as free text without rewriting ordinary data."""
    return value is not None and len(value) >= MIN_SECRET_LENGTH and not value.isdigit()


def register_secret(value: str | None) -> None:
    if maskable(value):
        _extra.add(value)


def secrets() -> list[str]:
    found = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and maskable(v)}
    return sorted(found | _extra, key=len, reverse=True)


def _masked_key(match: re.Match) -> str:
    """A well-formed key masked (a header keeps its name). A `sk-` run without a digit is a word ("sk-learn-...")
    and stays; checked here, not by a lookahead in the pattern, which rescanned the rest of the text from every
    `sk-` (quadratic: 40 KB of "sk-sk-..." took 6 s)."""
    text = match.group(0)
    if text.startswith("sk-") and not any(c.isdigit() for c in text):
        return text
    return (match.group(1) or "") + MASK


class Redactor:
    """Masks a fixed set of secrets (longest first, one regex pass) and well-formed keys. Build one per batch of
    texts: reading the environment for every string was most of the cost of exporting spans."""

    def __init__(self, known: list[str] | None = None):
        known = secrets() if known is None else known
        forms = sorted({form for secret in known for form in _written_forms(secret)}, key=len, reverse=True)
        self._secrets = re.compile("|".join(re.escape(s) for s in forms)) if forms else None

    def __call__(self, text: str) -> str:
        return KEY_FORMATS.sub(_masked_key, self.secrets_only(text))

    def secrets_only(self, text: str) -> str:
        """`text` with the known secrets' values masked and nothing else changed: what a judged reply is stored as."""
        return self._secrets.sub(MASK, text) if self._secrets is not None else text

    def value(self, value: Any, *, formats: bool = True) -> Any:
        """Redact strings anywhere inside a JSON-like value (dicts, lists); `formats=False`: the known secrets only."""
        mask = self if formats else self.secrets_only
        if isinstance(value, str):
            return mask(value)
        if isinstance(value, dict | list):
            # masked as the JSON text, where a header's name and its value are side by side
            text = json.dumps(value, ensure_ascii=False)
            cleaned = mask(text)
            try:
                return value if cleaned == text else json.loads(cleaned)
            except json.JSONDecodeError:  # a secret across two strings' quotes: each string masked alone
                if isinstance(value, dict):
                    return {mask(key): self.value(item, formats=formats) for key, item in value.items()}
                return [self.value(item, formats=formats) for item in value]
        return value


def _written_forms(secret: str) -> set[str]:
    """`secret` as written in text, and as JSON writes it inside a string once and twice (a tool's JSON output
    inside a message inside a stored row): a quote or backslash in it is escaped there, and matched as such."""
    forms = {secret}
    for _ in range(2):
        forms |= {json.dumps(form, ensure_ascii=ascii)[1:-1] for form in forms for ascii in (False, True)}
    return forms


def redact(text: str) -> str:
    return Redactor()(text)


class RedactingFilter(logging.Filter):
    """Masks secrets in every log record that passes through the handler it is attached to."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:  # a traceback's messages can quote a key too
            trace = "".join(traceback.format_exception(*record.exc_info))
            masked = redact(trace)
            if masked != trace:  # then as plain text, masked (the handler would render the exception unmasked)
                record.msg, record.args = f"{record.msg}\n{masked}", None
                record.exc_info, record.exc_text = None, None
        return True
