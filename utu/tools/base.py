"""The toolkit interface and the factory that builds toolkits from config."""

import json
from typing import Any, Protocol

from utu.config.models import ToolkitConfig


class Toolkit(Protocol):
    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI `tools` entries ({"type": "function", "function": {...}})."""

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; the result is the text the model sees."""


def build_toolkits(configs: list[ToolkitConfig], llm: Any = None) -> list[Toolkit]:
    """Build every configured toolkit; missing keys or settings fail here, at start, not mid-run."""
    from utu.tools.python_executor import PythonExecutorToolkit
    from utu.tools.web import SearchToolkit

    toolkits: list[Toolkit] = []
    for config in configs:
        if config.name == "python_executor":
            toolkits.append(PythonExecutorToolkit(config))
        elif config.name == "search":
            toolkits.append(SearchToolkit.from_env(config, llm))
    return toolkits


def function_schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def as_text(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False)
