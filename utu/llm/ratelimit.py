"""Requests and tokens per minute, shaped on our side so that a paid endpoint's limits are met without 429s.

Providers enforce a per-minute limit over shorter windows too (60,000 RPM may mean 1,000 per second), so the
rate is spread evenly: a leaky bucket that holds one second's share (at least one unit) and refills at the
per-minute rate.
"""

import asyncio
import json
import logging
from typing import Any

from aiolimiter import AsyncLimiter

log = logging.getLogger(__name__)
CHARS_PER_TOKEN = 4  # a rough count, good enough to pace requests; the endpoint's own count is what is billed


def per_minute(limit: int) -> AsyncLimiter:
    burst = max(1.0, limit / 60)
    return AsyncLimiter(burst, burst * 60 / limit)


async def take(bucket: AsyncLimiter, amount: float) -> None:
    """`amount` units, in pieces no larger than the bucket (a large request waits for its whole share)."""
    while amount > 0:
        piece = min(amount, bucket.max_rate)
        await bucket.acquire(piece)
        amount -= piece


class RateLimit:
    """Waits before a request until it fits `requests_per_minute` and `tokens_per_minute` (None: no limit)."""

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None):
        self._requests = per_minute(requests_per_minute) if requests_per_minute else None
        self._tokens = per_minute(tokens_per_minute) if tokens_per_minute else None
        self._tokens_per_minute = tokens_per_minute or 0  # read only when self._tokens is set
        self._said_long_wait = False
        self._turn = asyncio.Lock()  # first come, first served: a large request's pieces are not interleaved

    async def wait(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> None:
        if self._requests is None and self._tokens is None:
            return
        async with self._turn:
            if self._requests is not None:
                await take(self._requests, 1)
            if self._tokens is not None:
                tokens = estimated_tokens(messages, params)
                if tokens > self._tokens_per_minute and not self._said_long_wait:  # said once: not per request
                    self._said_long_wait = True
                    log.warning(
                        "a request of about %d tokens is more than tokens_per_minute (%d): it waits about %.1f"
                        " minutes for its share; raise tokens_per_minute to your plan's TPM if it allows more",
                        tokens,
                        self._tokens_per_minute,
                        tokens / self._tokens_per_minute,
                    )
                await take(self._tokens, tokens)


def estimated_tokens(messages: list[dict[str, Any]], params: dict[str, Any]) -> int:
    """The prompt's characters / CHARS_PER_TOKEN plus the reply's cap (max_tokens)."""
    prompt = sum(len(m["content"]) if isinstance(m.get("content"), str) else len(json.dumps(m)) for m in messages)
    return prompt // CHARS_PER_TOKEN + int(params.get("max_tokens") or 0) + 1
