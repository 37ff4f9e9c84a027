"""Load the bundled data sets (dataset/*.jsonl) into the database; optionally the paper's sets from the hub.

    python scripts/data/process_training_free_GRPO_data.py                  # all bundled sets, offline
    python scripts/data/process_training_free_GRPO_data.py --datasets MAWPS_singleop AIME24
    python scripts/data/process_training_free_GRPO_data.py --from-hub       # + DAPO-Math-17k, AFM_web_RL, WebWalkerQA
    python scripts/data/process_training_free_GRPO_data.py --from-hub --hub_dir copies/   # the same, offline
    python scripts/data/process_training_free_GRPO_data.py --convert-from DIR  # maintainers: raw sets -> dataset/

A set already in the database is skipped (pass --replace to reload it).
"""

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path

from utu import cli
from utu.config.flags import add_db_flag
from utu.db import Database
from utu.db.dataset_io import (
    BUNDLED_DIR,
    bundled_datasets,
    dataset_size,
    parse_dataset_file,
    store_dataset,
)
from utu.db.hub import HUB_SETS, load_from_hub
from utu.db.hub_sets import INSTALL
from utu.errors import DataError

log = logging.getLogger("process_data")


# --- converting the public files into the upload format (done once; the output is committed) ---------------


def _gsm8k(row: dict) -> dict:
    # level = how many calculations (<<a*b=c>>) the reference solution makes: a difficulty the data records.
    return {
        "question": row["question"],
        "answer": row["answer"].split("####")[-1].strip().replace(",", ""),
        "level": str(row["answer"].count("<<")),
    }


def _gsm8k_short(row: dict) -> dict | None:
    """GSM8K questions solved in at most two calculations: the embedded 0.5B is right on about half."""
    line = _gsm8k(row)
    return line if int(line["level"]) <= 2 else None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


CONVERTERS: dict[str, tuple[str, Callable[[dict], dict | None]]] = {
    "AIME24": ("aime24.jsonl", lambda r: {"question": r["problem"], "answer": str(r["answer"])}),
    "AIME25": ("aime25.jsonl", lambda r: {"question": r["question"], "answer": _number(r["answer"])}),
    "MATH-500": (
        "math500.jsonl",
        lambda r: {
            "question": r["problem"],
            "answer": r["answer"],
            "level": str(r["level"]),
            "topic": r["subject"],
            "meta": {"unique_id": r["unique_id"]},
        },
    ),
    "GSM8K": ("gsm8k_test.jsonl", _gsm8k),
    "GSM8K_short": ("gsm8k_test.jsonl", _gsm8k_short),
    "MAWPS_singleop": (
        "mawps_singleop.jsonl",
        lambda r: {"question": r["input"], "answer": _number(r["target"])},
    ),
    "MAWPS_addsub": (
        "mawps_addsub.jsonl",
        lambda r: {"question": r["input"], "answer": _number(r["target"])},
    ),
}


def convert(source_dir: Path) -> None:
    BUNDLED_DIR.mkdir(exist_ok=True)
    for name, (filename, fn) in CONVERTERS.items():
        rows = [json.loads(line) for line in (source_dir / filename).read_text().splitlines() if line.strip()]
        converted = [fields for fields in map(fn, rows) if fields is not None]
        with (BUNDLED_DIR / f"{name}.jsonl").open("w") as out:
            for fields in converted:
                line = {"dataset": name, "source": "training_free_grpo", **fields}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
        log.info("converted %s: %d of %d rows -> dataset/%s.jsonl", filename, len(converted), len(rows), name)


async def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="*", help="names to load (default: every bundled set)")
    parser.add_argument("--from-hub", action="store_true", help="also load DAPO-Math-17k, AFM_web_RL, WebWalkerQA")
    parser.add_argument(
        "--hub_dir",
        type=Path,
        help="read the hub sets from local copies: DIR/<owner>__<name>/<split>.jsonl (rows as on the hub)",
    )
    parser.add_argument("--replace", action="store_true", help="reload sets already in the database")
    parser.add_argument("--convert-from", type=Path, help="(maintainers) regenerate dataset/ from the public files")
    add_db_flag(parser)
    args = parser.parse_args()
    if args.convert_from:
        convert(args.convert_from)
        return 0
    bundled = bundled_datasets()
    wanted = args.datasets or list(bundled)
    unknown = [n for n in wanted if n not in bundled and n not in HUB_SETS]
    if unknown:
        raise DataError(
            f"unknown data set(s) {', '.join(unknown)}; bundled: {', '.join(bundled)}; hub: {', '.join(HUB_SETS)}"
        )
    if args.from_hub or (args.hub_dir and not args.datasets):  # local copies given: the hub sets are wanted
        wanted += [n for n in HUB_SETS if n not in wanted]
    elif not args.datasets:
        log.info(
            "the paper's %s come from the hub: add --from-hub (%s first), or --hub_dir DIR with local copies",
            ", ".join(HUB_SETS),
            INSTALL,
        )
    async with Database(args.db_url) as db:
        await db.create_tables()
        for name in wanted:
            if not args.replace and await dataset_size(db, name):
                log.info("%s: already loaded, skipped", name)
                continue
            rows = parse_dataset_file(bundled[name], name)[1] if name in bundled else load_from_hub(name, args.hub_dir)
            written = await store_dataset(db, name, rows, "replace" if args.replace else "new")
            log.info("%s: loaded %d rows", name, written)
    return 0


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
