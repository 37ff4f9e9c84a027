"""Load the bundled data sets (dataset/*.jsonl) into the database; optionally the paper's sets from the hub.

    python scripts/data/process_training_free_GRPO_data.py                  # all bundled sets, offline
    python scripts/data/process_training_free_GRPO_data.py --datasets MAWPS_singleop AIME24
    python scripts/data/process_training_free_GRPO_data.py --from-hub       # + DAPO-Math-17k, AFM_web_RL, WebWalkerQA
    python scripts/data/process_training_free_GRPO_data.py --convert-from ../shared/datasets   # (maintainers)

A set already in the database is skipped (pass --replace to reload it).
"""

from utu.commands.process_data import main

if __name__ == "__main__":
    main()
