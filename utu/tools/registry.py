"""Which class serves each toolkit name of an agent config, and building them all at start."""

from typing import Any

from utu.config.models import ToolkitConfig
from utu.errors import ConfigError
from utu.tools.base import Toolkit
from utu.tools.functions import FunctionToolkit
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
        elif config.name == "function":
            toolkits.append(FunctionToolkit(config))
    names = [s["function"]["name"] for toolkit in toolkits for s in toolkit.schemas()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"toolkits: two tools are named {', '.join(twice)}; the model could not tell them apart")
    return toolkits
