"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

The same program as `utu-practice`, kept at the path Youtu-Agent's guide uses; see utu/commands/practice.py or --help.
"""

# Imported under the guard: worker processes (the math verifier's) re-run this file as they start, and
# should not pay for the whole program's imports.
if __name__ == "__main__":
    from utu.launch import launch

    launch("utu.commands.practice")
