"""Load the bundled data sets (dataset/*.jsonl) into the database; optionally the paper's sets from the hub.

    python scripts/data/process_training_free_GRPO_data.py                  # all bundled sets, offline
    python scripts/data/process_training_free_GRPO_data.py --datasets MAWPS_singleop AIME24
    python scripts/data/process_training_free_GRPO_data.py --from-hub       # + DAPO-Math-17k, AFM_web_RL, WebWalkerQA
    python scripts/data/process_training_free_GRPO_data.py --convert-from ../shared/datasets   # (maintainers)

A set already in the database is skipped (pass --replace to reload it).
"""

import argparse
import json
import logging
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from utu import cli
from utu.db import Database
from utu.db.dataset_io import (
    BUNDLED_DIR,
    DatasetLine,
    bundled_datasets,
    dataset_size,
    parse_dataset_file,
    store_dataset,
)
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


# --- the paper's sets from the Hugging Face hub (needs network and the `datasets` package) ---------------


def _dapo() -> Iterator[dict]:
    from datasets import load_dataset

    seen: dict[str, str] = {}
    for row in load_dataset("BytedTsinghua-SIA/DAPO-Math-17k", split="train"):
        prompt = row["prompt"][0]["content"]
        prompt = re.sub(r"^Solve the following math problem.*?\n\n", "", prompt, flags=re.DOTALL)
        prompt = re.sub(r"\n\nRemember to put your answer.*$", "", prompt, flags=re.DOTALL)
        seen.setdefault(prompt, str(row["reward_model"]["ground_truth"]))
    items = list(seen.items())
    random.Random(42).shuffle(items)
    for question, answer in items:
        yield {"question": question, "answer": answer}


def _afm() -> Iterator[dict]:
    from datasets import load_dataset

    rows = [
        r
        for r in load_dataset("PersonalAILab/AFM-WebAgent-RL-Dataset", split="train")
        if len(r["extra_info"]["answer"]) == 1
    ]
    random.Random(42).shuffle(rows)
    for r in rows:
        yield {"question": r["extra_info"]["question"], "answer": r["extra_info"]["answer"][0]}


def _webwalker() -> Iterator[dict]:
    from datasets import load_dataset

    buckets: dict[str, list[dict]] = {"easy": [], "medium": [], "hard": []}
    for r in load_dataset("callanwu/WebWalkerQA", split="main"):
        buckets.setdefault(r["info"]["difficulty_level"], []).append(r)
    rng = random.Random(42)
    for rows in buckets.values():
        rng.shuffle(rows)
    # Interleave 4:7:6 (easy:medium:hard) so that every prefix keeps the benchmark's mix.
    pattern = ["easy"] * 4 + ["medium"] * 7 + ["hard"] * 6
    while any(buckets.values()):
        for level in pattern:
            if buckets[level]:
                r = buckets[level].pop()
                yield {
                    "question": r["question"],
                    "answer": r["answer"],
                    "level": level,
                    "meta": {"root_url": r.get("root_url")},
                }


HUB_SETS: dict[str, Callable[[], Iterator[dict]]] = {
    "DAPO-Math-17k": _dapo,
    "AFM_web_RL": _afm,
    "WebWalkerQA": _webwalker,
}


def load_from_hub(name: str) -> list[DatasetLine]:
    try:
        import datasets  # noqa: F401
    except ImportError as e:
        raise DataError("--from-hub needs the `datasets` package: .venv/bin/pip install datasets") from e
    try:
        return [DatasetLine.model_validate({"dataset": name, **row}) for row in HUB_SETS[name]()]
    except Exception as e:  # the hub raises many kinds of network errors
        raise DataError(
            f"{name}: could not load from the Hugging Face hub ({type(e).__name__}: {e}); "
            "check the network, or use the bundled sets in dataset/"
        ) from e


async def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="*", help="names to load (default: every bundled set)")
    parser.add_argument("--from-hub", action="store_true", help="also load DAPO-Math-17k, AFM_web_RL, WebWalkerQA")
    parser.add_argument("--replace", action="store_true", help="reload sets already in the database")
    parser.add_argument("--convert-from", type=Path, help="(maintainers) regenerate dataset/ from the public files")
    parser.add_argument("--db_url", help="SQLAlchemy URL (default: UTU_DB_URL, else ./utu.db)")
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
    if args.from_hub:
        wanted += [n for n in HUB_SETS if n not in wanted]
    db = Database(args.db_url)
    try:
        await db.create_tables()
        for name in wanted:
            if not args.replace and await dataset_size(db, name):
                log.info("%s: already loaded, skipped", name)
                continue
            rows = parse_dataset_file(bundled[name], name)[1] if name in bundled else load_from_hub(name)
            written = await store_dataset(db, name, rows, "replace" if args.replace else "new")
            log.info("%s: loaded %d rows", name, written)
    finally:
        await db.dispose()
    return 0


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
