from utu.llm.client import ChatResponse, LLMClient
from utu.llm.factory import make_client
from utu.llm.usage import Usage, UsageTracker

__all__ = ["ChatResponse", "LLMClient", "Usage", "UsageTracker", "make_client"]
