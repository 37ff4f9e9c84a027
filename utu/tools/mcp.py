"""An MCP server as a toolkit: `{name: mcp, command: [python, server.py]}` (stdio) or `{name: mcp, url: ...}`.

The server is started (stdio) or connected to (streamable HTTP) when the run starts and stopped when it ends;
its tools are listed once, filtered by `include`/`exclude`, and offered to the model as they are. A failed
start is a `ConfigError` before any work; a failed call (an error result, a timeout, a server that died)
becomes the tool result the model sees, never a crash of the run. A stdio server gets the MCP SDK's minimal
environment (PATH, HOME, ...) plus `env`, so the keys in yours do not leak to it.
"""

import asyncio
import importlib.util
import json
import logging
import re
from contextlib import AsyncExitStack
from typing import Any

from utu.config.models import ToolkitConfig
from utu.errors import ConfigError
from utu.tools.base import as_text, cut_middle
from utu.tracing.redact import register_secret

log = logging.getLogger(__name__)

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the OpenAI API accepts as a function name
START_TIMEOUT = 60.0  # seconds to start or reach the server and list its tools (npx may download first)


class MCPToolkit:
    def __init__(self, config: ToolkitConfig):
        if importlib.util.find_spec("mcp") is None:
            raise ConfigError("mcp toolkits need the MCP SDK: pip install -e '.[mcp]'")
        self.config = config
        self.label = " ".join(config.command) if config.command else str(config.url)
        self.tools: dict[str, dict[str, Any]] = {}  # name -> OpenAI tool schema
        self._stack = AsyncExitStack()
        self._client: Any = None

    async def __aenter__(self) -> "MCPToolkit":
        try:
            try:  # asyncio's timeout, not anyio's: the client's own cancel scopes stay open past this block
                async with asyncio.timeout(START_TIMEOUT):
                    self._client = await self._stack.enter_async_context(self._connect())
                    listed = await self._list_tools()
            except Exception as e:
                raise ConfigError(
                    f"mcp toolkit {self.label!r}: could not start it or list its tools ({_reason(e)}); "
                    "run the command (or open the url) by hand to see why"
                ) from e
            self.tools = self._offered(listed)
        except BaseException:  # the server must not outlive a failed start
            await self._close()
            raise
        log.info("mcp %s: %d tools (%s)", self.label, len(self.tools), ", ".join(self.tools))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._close()

    def _connect(self) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if self.config.command:
            program, *args = self.config.command
            return Client(StdioServerParameters(command=program, args=args, env=self.config.env or None))
        for value in self.config.headers.values():  # e.g. "Bearer <token>": masked in traces like an API key
            register_secret(value)
            register_secret(value.split()[-1] if value.split() else None)
        http = create_mcp_http_client(headers=self.config.headers or None)
        self._stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(str(self.config.url), http_client=http))

    async def _list_tools(self) -> list[Any]:
        tools, cursor = [], None
        while True:
            page = await self._client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools

    def _offered(self, listed: list[Any]) -> dict[str, dict[str, Any]]:
        names = [tool.name for tool in listed]
        missing = sorted(set(self.config.include or []) - set(names))
        if missing:
            raise ConfigError(
                f"mcp toolkit {self.label!r}: include names {', '.join(missing)}, which the server "
                f"does not offer; it offers {', '.join(names) or 'no tools'}"
            )
        wanted = set(self.config.include if self.config.include is not None else names) - set(self.config.exclude)
        unnamed = sorted(n for n in wanted if not TOOL_NAME.fullmatch(n))
        if unnamed:
            raise ConfigError(
                f"mcp toolkit {self.label!r}: the OpenAI API refuses the tool names {', '.join(unnamed)} "
                "(letters, digits, _ and - only, up to 64): add them to `exclude`"
            )
        return {
            tool.name: {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
            }
            for tool in listed
            if tool.name in wanted
        }

    async def _close(self) -> None:
        try:
            await self._stack.aclose()
        except Exception as e:  # a server that already died cannot be shut down cleanly; the run is done anyway
            log.debug("mcp %s: closing: %s", self.label, _reason(e))
        self._client = None

    def schemas(self) -> list[dict[str, Any]]:
        return list(self.tools.values())

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._client is None:
            return as_text({"error": f"the MCP server of {name} is not running"})
        try:
            result = await self._client.call_tool(name, arguments, read_timeout_seconds=self.config.timeout)
        except Exception as e:  # a timeout, a dead server, a protocol error: the model sees it, the run goes on
            return as_text({"error": f"{name} failed: {_reason(e)}"})
        text = "\n".join(block.text for block in result.content if getattr(block, "type", None) == "text")
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        if result.is_error:
            return as_text({"error": f"{name} failed: {text or 'the server reported an error'}"})
        return cut_middle(text, self.config.max_output_chars)


def _reason(e: BaseException) -> str:
    """The innermost cause of an error, through anyio's exception groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
