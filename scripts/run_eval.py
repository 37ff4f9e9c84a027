"""Evaluate an agent: K attempts per question, judged by the configured verify function, with honest metrics.

The same program as `utu-eval`, kept at the path Youtu-Agent's guide uses; see utu/commands/eval.py or --help.
"""

from utu.commands.eval import main

if __name__ == "__main__":
    main()
