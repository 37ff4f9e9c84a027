"""Load the bundled data sets (dataset/*.jsonl) into the database; optionally the paper's sets from the hub.

The same program as `utu-data`, kept at the path Youtu-Agent's guide uses; see utu/commands/process_data.py or --help.
"""

from utu.commands.process_data import main

if __name__ == "__main__":
    main()
