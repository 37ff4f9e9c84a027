"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

The same program as `utu-practice`, kept at the path Youtu-Agent's guide uses; see utu/commands/practice.py or --help.
"""

from utu.commands.practice import main

if __name__ == "__main__":
    main()
