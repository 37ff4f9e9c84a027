"""A real MCP server for the tests: `python mcp_server.py` (stdio) or `python mcp_server.py http PORT`."""

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("units")


@server.tool()
def convert_units(value: float, unit: str = "km") -> float:
    """Convert a distance in km or mi to metres."""
    return value * {"km": 1000, "mi": 1609.344}[unit]


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def broken() -> str:
    """Always fails."""
    raise RuntimeError("the database is down")


@server.tool()
def environment(name: str) -> str:
    """One of the server's environment variables, or 'unset'."""
    return os.environ.get(name, "unset")


@server.tool(name="files.read")
def files_read(path: str) -> str:
    """A name the OpenAI API refuses (a dot in it)."""
    return path


if __name__ == "__main__":
    if os.environ.get("PID_FILE"):  # lets a test check that the run stopped the server
        Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
