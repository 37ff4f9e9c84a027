"""Upload a JSONL data set into the `data` table, all lines or none.

The same program as `utu-upload`, kept at the path Youtu-Agent's guide uses; see utu/commands/upload.py or --help.
"""

from utu.commands.upload import main

if __name__ == "__main__":
    main()
