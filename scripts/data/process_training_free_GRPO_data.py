"""Load the bundled data sets (dataset/*.jsonl) into the database; optionally the paper's sets from the hub.

The same program as `utu-data`, kept at the path Youtu-Agent's guide uses; see utu/commands/process_data.py or --help.
"""

# Imported under the guard: worker processes (the math verifier's) re-run this file as they start, and
# should not pay for the whole program's imports.
if __name__ == "__main__":
    from utu.launch import launch

    launch("utu.commands.process_data")
