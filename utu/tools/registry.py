"""Which class serves each toolkit name of an agent config, and building them all at start."""

from contextlib import AsyncExitStack
from typing import Any

from utu.config.models import ToolkitConfig
from utu.errors import ConfigError
from utu.tools.base import Toolkit
from utu.tools.functions import FunctionToolkit
from utu.tools.python_executor import PythonExecutorToolkit
from utu.tools.web import SearchToolkit


def build_toolkits(configs: list[ToolkitConfig], llm: Any = None) -> list[Toolkit]:
    """Build every configured toolkit that needs no server; missing keys or settings fail here, at start."""
    toolkits: list[Toolkit] = []
    for config in configs:
        if config.name == "python_executor":
            toolkits.append(PythonExecutorToolkit(config))
        elif config.name == "search":
            toolkits.append(SearchToolkit.from_env(config, llm))
        elif config.name == "function":
            toolkits.append(FunctionToolkit(config))
        elif config.name == "mcp":
            raise ConfigError("mcp toolkits start a server: build them with `await open_toolkits(stack, ...)`")
    return _unique(toolkits)


async def open_toolkits(stack: AsyncExitStack, configs: list[ToolkitConfig], llm: Any = None) -> list[Toolkit]:
    """Every configured toolkit, MCP servers started (and stopped when `stack` closes), in config order."""
    from utu.tools.mcp import MCPToolkit

    toolkits: list[Toolkit] = []
    for config in configs:
        if config.name == "mcp":
            toolkits.append(await stack.enter_async_context(MCPToolkit(config)))
        else:
            toolkits += build_toolkits([config], llm)
    return _unique(toolkits)


def _unique(toolkits: list[Toolkit]) -> list[Toolkit]:
    names = [s["function"]["name"] for toolkit in toolkits for s in toolkit.schemas()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"toolkits: two tools are named {', '.join(twice)}; the model could not tell them apart")
    return toolkits
