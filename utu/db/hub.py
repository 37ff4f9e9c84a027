"""The paper's data sets from the Hugging Face hub (the `hub` extra installs the `datasets` package).

    pip install 'utu[hub]'
    python scripts/data/process_training_free_GRPO_data.py --from-hub [--datasets DAPO-Math-17k]

Each set is read from its hub repository, or with `hub_dir` from local copies of its rows, one file per
split: `<hub_dir>/<owner>__<name>/<split>.jsonl` (for machines without network, and for tests).
"""

import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from utu.db.dataset_io import DatasetLine, validated_line
from utu.db.hub_sets import HUB_SET_NAMES, INSTALL
from utu.errors import DataError

Rows = Callable[[str, str], Iterator[dict]]  # (hub repository, split) -> its rows


def _dapo(rows: Rows) -> Iterator[dict]:
    seen: dict[str, str] = {}
    for row in rows("BytedTsinghua-SIA/DAPO-Math-17k", "train"):
        prompt = row["prompt"][0]["content"]
        prompt = re.sub(r"^Solve the following math problem.*?\n\n", "", prompt, flags=re.DOTALL)
        prompt = re.sub(r"\n\nRemember to put your answer.*$", "", prompt, flags=re.DOTALL)
        seen.setdefault(prompt, str(row["reward_model"]["ground_truth"]))
    items = list(seen.items())
    random.Random(42).shuffle(items)
    for question, answer in items:
        yield {"question": question, "answer": answer}


def _afm(rows: Rows) -> Iterator[dict]:
    kept = [r for r in rows("PersonalAILab/AFM-WebAgent-RL-Dataset", "train") if len(r["extra_info"]["answer"]) == 1]
    random.Random(42).shuffle(kept)
    for r in kept:
        yield {"question": r["extra_info"]["question"], "answer": r["extra_info"]["answer"][0]}


def _webwalker(rows: Rows) -> Iterator[dict]:
    buckets: dict[str, list[dict]] = {"easy": [], "medium": [], "hard": []}
    for r in rows("callanwu/WebWalkerQA", "main"):
        buckets.setdefault(r["info"]["difficulty_level"], []).append(r)
    rng = random.Random(42)
    for bucket in buckets.values():
        rng.shuffle(bucket)
    # Interleave 4:7:6 (easy:medium:hard) so that every prefix keeps the benchmark's mix.
    pattern = ["easy"] * 4 + ["medium"] * 7 + ["hard"] * 6
    while any(buckets.values()):
        for level in pattern:
            if buckets.get(level):
                r = buckets[level].pop()
                yield {
                    "question": r["question"],
                    "answer": r["answer"],
                    "level": level,
                    "meta": {"root_url": r.get("root_url")},
                }


HUB_SETS: dict[str, Callable[[Rows], Iterator[dict]]] = dict(zip(HUB_SET_NAMES, (_dapo, _afm, _webwalker), strict=True))


def load_from_hub(name: str, hub_dir: Path | None = None) -> list[DatasetLine]:
    try:
        from datasets import load_dataset
    except ImportError as e:
        raise DataError(f"--from-hub needs the `datasets` package: {INSTALL}") from e

    def rows(repo: str, split: str) -> Iterator[dict]:
        if hub_dir is None:
            return iter(load_dataset(repo, split=split))
        path = hub_dir / repo.replace("/", "__") / f"{split}.jsonl"
        if not path.is_file():
            raise DataError(
                f"{name}: {path} not found (--hub_dir holds <owner>__<name>/<split>.jsonl; name the sets it has"
                " copies of with --datasets)"
            )
        return iter(load_dataset("json", data_files={split: str(path)}, split=split))

    try:
        return [_line(name, number, row) for number, row in enumerate(HUB_SETS[name](rows), start=1)]
    except DataError:
        raise
    except Exception as e:  # the hub raises many kinds of network errors; a local copy, a row of another shape
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        if hub_dir:
            raise DataError(
                f"{name}: could not load from {hub_dir} ({why}); its rows must have the hub's fields, as the hub "
                "serves them"
            ) from e
        raise DataError(
            f"{name}: could not load from the Hugging Face hub ({why}); check the network (or --hub_dir), or use "
            "the bundled sets in dataset/"
        ) from e


def _line(name: str, number: int, row: dict) -> DatasetLine:
    try:
        return validated_line({"dataset": name, **row})
    except ValueError as e:  # the hub's text is not ours: say which row, not "check the network"
        raise DataError(f"{name}: row {number}, {e}; nothing of the set was stored") from None
