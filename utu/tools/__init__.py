"""Tools an agent can call. Each toolkit exposes OpenAI function schemas and runs calls by name."""

from utu.tools.base import Toolkit
from utu.tools.registry import build_toolkits, open_toolkits

__all__ = ["Toolkit", "build_toolkits", "open_toolkits"]
