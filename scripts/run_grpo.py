"""Parameter-updating GRPO on a local model, rewarded by the same verify functions as practice and evaluation.

The same program as `utu-grpo`, kept at the path Youtu-Agent's guide uses; see utu/commands/grpo.py or --help.
"""

from utu.commands.grpo import main

if __name__ == "__main__":
    main()
