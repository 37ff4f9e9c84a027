"""Evaluate an agent: K attempts per question, judged by the configured verify function, with honest metrics.

The same program as `utu-eval`, kept at the path Youtu-Agent's guide uses; see utu/commands/eval.py or --help.
"""

# Imported under the guard: worker processes (the math verifier's) re-run this file as they start, and
# should not pay for the whole program's imports.
if __name__ == "__main__":
    from utu.launch import launch

    launch("utu.commands.eval")
