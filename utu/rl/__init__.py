"""Parameter-updating GRPO on a local model, with the same verify functions as practice (work in progress:
the loss arithmetic is here; the environment, trainer and `scripts/run_grpo.py` follow)."""
