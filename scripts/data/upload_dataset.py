"""Upload a JSONL data set into the `data` table, all lines or none.

The same program as `utu-upload`, kept at the path Youtu-Agent's guide uses; see utu/commands/upload.py or --help.
"""

# Imported under the guard: worker processes (the math verifier's) re-run this file as they start, and
# should not pay for the whole program's imports.
if __name__ == "__main__":
    from utu.launch import launch

    launch("utu.commands.upload")
