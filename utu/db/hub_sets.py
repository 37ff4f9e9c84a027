"""The data sets `--from-hub` loads (utu/db/hub.py converts them), and how a user loads one: what a data set
missing from the database is named by, without loading the hub's converters."""

INSTALL = "pip install 'utu[hub]'"  # (in a checkout: .venv/bin/pip install -e '.[hub]')
HUB_SET_NAMES = ("DAPO-Math-17k", "AFM_web_RL", "WebWalkerQA")


def load_command(name: str) -> str:
    """What a user runs to load hub set `name`."""
    return f"{INSTALL}, then `python scripts/data/process_training_free_GRPO_data.py --from-hub --datasets {name}`"
