"""Parameter-updating GRPO on a local model, with the same verify functions as practice: losses, environment,
trainer and checkpoints; `scripts/run_grpo.py` runs it (docs/rl.md)."""
