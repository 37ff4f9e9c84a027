"""utu: training-free GRPO practice for LLM agents."""

__version__ = "0.1.0"
