"""The HTTP side of the LLM client: POST a JSON body to an OpenAI-compatible endpoint over aiohttp.

A chat completion is one authenticated POST, so this is all the transport the client needs. It replaced
the openai SDK (over aiohttp), whose request and response layers cost ~4x the CPU of the POST itself:
at high concurrency the client, not the LLM, was the bottleneck (benchmarks/llm_client_overhead.py).
"""

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import aiohttp


class HTTPStatusError(Exception):
    """The endpoint answered with an HTTP error status."""

    def __init__(self, status: int, headers: Mapping[str, str], text: str):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.text = text

    @property
    def detail(self) -> str:
        """The server's error message: OpenAI-style `{"error": {"message": ...}}` if present, else the body."""
        try:
            body = json.loads(self.text)
        except ValueError:
            body = self.text
        if isinstance(body, dict):
            body = body.get("error", body)
        if isinstance(body, dict):
            body = body.get("message") or body.get("error") or body
        return " ".join(str(body or f"HTTP {self.status}").split())[:300]


class JSONEndpoint:
    """POSTs to `base_url` + path with a bearer key. One connection pool per event loop, opened lazily."""

    def __init__(self, base_url: str, api_key: str, timeout: float, max_connections: int):
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, str]:
        """(parsed JSON, raw text) of the reply. Raises HTTPStatusError, aiohttp.ClientError, TimeoutError,
        or ValueError for a body that is not JSON."""
        async with self._open().post(self.base_url + path, data=json.dumps(body), headers=self._headers) as r:
            text = await r.text()
            if r.status >= 400:
                raise HTTPStatusError(r.status, r.headers, text)
        return json.loads(text), text

    async def get(self, path: str, timeout: float) -> Any:
        """GET `path` (parsed JSON). Raises like `post`."""
        limit = aiohttp.ClientTimeout(total=timeout)
        async with self._open().get(self.base_url + path, headers=self._headers, timeout=limit) as r:
            text = await r.text()
            if r.status >= 400:
                raise HTTPStatusError(r.status, r.headers, text)
        return json.loads(text)

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._loop = loop
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
