from utu.agents.agent import Agent, AgentResult
from utu.agents.experience import build_messages, format_experiences

__all__ = ["Agent", "AgentResult", "build_messages", "format_experiences"]
