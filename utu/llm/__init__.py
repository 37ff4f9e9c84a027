"""LLM access. `make_client` lives in utu.llm.factory (importing it here would load the local-server module)."""

from utu.llm.client import ChatResponse, LLMClient
from utu.llm.usage import Usage, UsageTracker

__all__ = ["ChatResponse", "LLMClient", "Usage", "UsageTracker"]
