"""Which class serves each toolkit name of an agent config, and building them all at start."""

from typing import Any

from utu.config.models import ToolkitConfig
from utu.tools.base import Toolkit
from utu.tools.python_executor import PythonExecutorToolkit
from utu.tools.web import SearchToolkit


def build_toolkits(configs: list[ToolkitConfig], llm: Any = None) -> list[Toolkit]:
    """Build every configured toolkit; missing keys or settings fail here, at start, not mid-run."""
    toolkits: list[Toolkit] = []
    for config in configs:
        if config.name == "python_executor":
            toolkits.append(PythonExecutorToolkit(config))
        elif config.name == "search":
            toolkits.append(SearchToolkit.from_env(config, llm))
    return toolkits
