"""A learned router: small GRPO policies that choose a tool (or tools) for a query from its embedding.

Its modules import torch (the `rl` extra); this package file does not, so configs can name the state file."""

STATE_FILE = "tool_router.pt"  # a practice run's router, in its folder (runs/<exp_id>/)
