"""Time and memory of storing an uploaded data set: batched Core inserts against ORM objects, in the same run.

    python benchmarks/speed/upload.py [--rows 200000] [--rounds 2] [--out upload]

A generated JSONL file (questions of about 110 characters, an answer, a level, a small meta) is stored into a fresh
SQLite file by each way in its own process, alternating over rounds: `store_dataset` as uploads run it, and the way
it stored rows before (one ORM object per row, all added to the session). The file is parsed the same way by both,
and a third process only parses it (the floor both stand on). Reported: seconds and peak memory of each, their
ratios, and peak memory per row above the floor's.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import at_least, result_name, write_result  # noqa: E402

WAYS = ("parse_only", "core_batches", "orm_objects")


def write_data(path: Path, rows: int) -> None:
    with path.open("w") as f:
        for i in range(rows):
            question = f"A shop sells {i % 97 + 2} boxes of {i % 13 + 3} pens each. How many pens are there? (#{i})"
            line = {"question": question, "answer": str((i % 97 + 2) * (i % 13 + 3)), "level": "1", "meta": {"i": i}}
            f.write(json.dumps(line) + "\n")


async def store(way: str, data: Path, db_file: Path) -> None:
    from utu.db import Database, DatasetSample
    from utu.db.dataset_io import answer_text, parse_dataset_file, store_dataset

    name, rows = parse_dataset_file(data, "Bench")
    if way == "parse_only":
        return
    async with Database(f"sqlite:///{db_file}") as db:
        await db.create_tables()
        if way == "core_batches":
            await store_dataset(db, name, rows)
            return
        async with db.transaction() as session:  # how store_dataset wrote rows before batching
            session.add_all(
                DatasetSample(
                    dataset=name,
                    index=i,
                    source=row.source,
                    question=row.question,
                    answer=answer_text(row.answer),
                    level=None if row.level is None else str(row.level),
                    topic=row.topic,
                    meta=row.meta,
                    source_index=row.source_index,
                    file_name=row.file_name,
                )
                for i, row in enumerate(rows)
            )


def measured(way: str, data: Path, workdir: Path) -> tuple[float, int]:
    """Seconds and peak resident bytes of one way, in a process of its own."""
    db_file = workdir / f"{way}.db"
    db_file.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", way, str(data), str(db_file)])
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{way} failed with exit code {proc.returncode}")
    return seconds, usage.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=at_least(1000), default=200_000)
    parser.add_argument("--rounds", type=at_least(1), default=2)
    parser.add_argument("--out", type=result_name, default="upload", help="the result's name in benchmarks/results")
    parser.add_argument("--child", nargs=3, metavar=("WAY", "DATA", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        way, data, db_file = args.child
        asyncio.run(store(way, Path(data), Path(db_file)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data = workdir / "data.jsonl"
        write_data(data, args.rows)
        runs: dict[str, list[tuple[float, int]]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                runs[way].append(measured(way, data, workdir))
        file_bytes = data.stat().st_size
    seconds = {way: statistics.median(s for s, _ in runs[way]) for way in WAYS}
    peak = {way: max(b for _, b in runs[way]) for way in WAYS}
    above_floor = {way: (peak[way] - peak["parse_only"]) / args.rows for way in WAYS[1:]}
    write_result(
        args.out,
        {
            "rows": args.rows,
            "file_bytes": file_bytes,
            "rounds": args.rounds,
            "median_seconds": {way: round(s, 2) for way, s in seconds.items()},
            "peak_rss_mib": {way: round(b / 2**20) for way, b in peak.items()},
            "store_seconds_above_parse": {way: round(seconds[way] - seconds["parse_only"], 2) for way in WAYS[1:]},
            "peak_bytes_per_row_above_parse": {way: round(b) for way, b in above_floor.items()},
            "orm_over_core_seconds": round(seconds["orm_objects"] / seconds["core_batches"], 2),
            "orm_over_core_peak_memory": round(peak["orm_objects"] / peak["core_batches"], 2),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
