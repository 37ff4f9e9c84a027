"""Parameter-updating GRPO on a local model, rewarded by the same verify functions as practice and evaluation.

The same program as `utu-grpo`, kept at the path Youtu-Agent's guide uses; see utu/commands/grpo.py or --help.
"""

# Imported under the guard: worker processes (the math verifier's) re-run this file as they start, and
# should not pay for the whole program's imports.
if __name__ == "__main__":
    from utu.launch import launch

    launch("utu.commands.grpo")
