"""Upload a JSONL data set into the `data` table, all lines or none.

python scripts/data/upload_dataset.py --file_path x.jsonl --dataset_name X [--replace | --append]
    [--data_format llamafactory]
"""

import argparse
import logging
from pathlib import Path
from typing import Literal

from utu import cli
from utu.config.flags import add_db_flag
from utu.db import Database
from utu.db.dataset_io import (
    ANSWER_NAMES,
    FORMATS,
    MAX_LINE_BYTES,
    DatasetLine,
    bundled_datasets,
    parse_dataset_file,
    store_dataset,
)
from utu.db.hub_sets import HUB_SET_NAMES

log = logging.getLogger("upload_dataset")


def _line_bytes(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 2**30:
        raise argparse.ArgumentTypeError(f"{value}: a line's size must be 1 byte to 1 GiB")
    return value


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file_path", required=True, type=Path, help="JSONL file, one question per line")
    parser.add_argument("--dataset_name", help='name of the data set (default: the lines\' "dataset" field)')
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--replace", action="store_true", help="overwrite an existing data set of that name")
    mode.add_argument("--append", action="store_true", help="add the lines to an existing data set")
    parser.add_argument(
        "--data_format",
        choices=FORMATS,
        default="default",
        help="default: question/answer lines; llamafactory: instruction/input/output lines",
    )
    parser.add_argument(
        "--max_line_bytes",
        type=_line_bytes,
        default=MAX_LINE_BYTES,
        help=f"refuse a line longer than this (default {MAX_LINE_BYTES}: one question, not a whole file)",
    )
    add_db_flag(parser)
    return parser.parse_args()


async def run() -> int:
    args = parse_args()
    name, rows = parse_dataset_file(args.file_path, args.dataset_name, args.data_format, args.max_line_bytes)
    renamed = sorted({row.dataset for row in rows if row.dataset and row.dataset != name})
    if renamed:
        log.info("lines naming data set %s are stored as %r (--dataset_name)", ", ".join(map(repr, renamed)), name)
    warn_of_repeats(rows)
    warn_of_answers_named_otherwise(rows)
    if name in bundled_datasets() or name in HUB_SET_NAMES:
        log.warning(
            "%r is also a bundled data set's name: scripts/data/process_training_free_GRPO_data.py --replace would"
            " replace your upload with it; upload under another name",
            name,
        )
    async with Database(args.db_url) as db:
        await db.create_tables()
        mode: Literal["new", "replace", "append"] = "replace" if args.replace else "append" if args.append else "new"
        written = await store_dataset(db, name, rows, mode)
    log.info("uploaded %d rows to data set %r in %s", written, name, db.describe())
    return 0


def warn_of_answers_named_otherwise(rows: list[DatasetLine]) -> None:
    """No line has an `answer`, and the lines have a key other data sets give the answer under: a verifier will
    refuse the set at eval time, so say it now."""
    if any(row.answer is not None for row in rows):
        return
    for name in ANSWER_NAMES:
        having = sum(isinstance(row.meta, dict) and name in row.meta for row in rows)
        if having:
            log.warning(
                "no line has an 'answer', and %d of %d have %r (kept in meta): if it is the answer, rename it to answer"
                " and upload again with --replace",
                *(having, len(rows), name),
            )
            return


def warn_of_repeats(rows: list[DatasetLine]) -> None:
    """Questions said twice weigh twice in a Mean@K, and may sit in two slices (practice and held out) at once."""
    first_seen: dict[str, int] = {}
    repeats = [(first_seen.setdefault(row.question, i), i) for i, row in enumerate(rows, start=1)]
    repeats = [(a, b) for a, b in repeats if a != b]
    if repeats:
        a, b = repeats[0]
        log.warning(
            "%d of %d questions repeat an earlier one (first: data lines %d and %d, %r): drop the repeats if they are"
            " not meant, so that no question weighs twice or is both practised and held out",
            *(len(repeats), len(rows), a, b, rows[b - 1].question[:60]),
        )


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
