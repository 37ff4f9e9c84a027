"""The command-line programs (`utu-eval`, `utu-practice`, `utu-grpo`, `utu-upload`, `utu-data`).

`scripts/` keeps the Youtu-Agent style entry points (`python scripts/run_eval.py ...`), which call these.
"""
