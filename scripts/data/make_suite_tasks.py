"""Write the learning suite's three new tasks (deterministic: seed 0); each row is a problem no other row repeats.

    python scripts/data/make_suite_tasks.py

Written for benchmarks/learning/suite.py before any of its runs, for habits other than units and rounding:

- dataset/ElapsedTime.jsonl: how many minutes pass between two clock times that cross an hour (9:45 to 11:20 is
  95 minutes); a small model subtracts the times as decimals (11.20 - 9.45). Level `trip`, `event` or `oven`.
- dataset/SignedChange.jsonl: by how much a quantity that passes below zero rose or fell (-8 degrees to 5 degrees
  is a rise of 13), answered as a positive amount; a small model subtracts the wrong way or drops a sign. Level
  `temperature`, `depth` or `balance`.
- dataset/PercentChain.jsonl: two percent changes in a row, the second of the new amount (80 up 25% then down 20%
  is 80, not 84); a small model adds the percents. Level `up_down`, `down_down` or `up_up`.

`meta.problem` is what decides the answer (the kind and its numbers): two rows with the same one are the same
problem up to names and stories, and no two rows share one, so the held-out questions (200..) are problems the
practice (0..99) and validation (100..199) questions never were (tests/test_learning_suite.py).
"""

import argparse
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = 300
NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lena", "Omar", "Priya", "Jack", "Sofia", "Ravi", "Chloe", "Diego"]


def _clock(minutes: int) -> str:
    """9:05 a.m. style, on a 12-hour clock."""
    hour, minute = divmod(minutes, 60)
    half = "a.m." if hour < 12 else "p.m."
    return f"{(hour - 1) % 12 + 1}:{minute:02d} {half}"


def elapsed_time(rng: random.Random, i: int) -> tuple[dict, tuple]:
    """Two clock times whose minutes need a borrow (the end's minutes are fewer than the start's)."""
    while True:
        start = rng.randrange(6 * 60, 19 * 60, 5)
        duration = rng.randrange(35, 240, 5)
        if (start + duration) % 60 < start % 60:
            break
    begin, end, name = _clock(start), _clock(start + duration), rng.choice(NAMES)
    kind = ("trip", "event", "oven")[i % 3]
    if kind == "trip":
        q = f"{name}'s train leaves at {begin} and arrives at {end} the same day. How many minutes does the trip take?"
    elif kind == "event":
        q = f"A concert starts at {begin} and ends at {end} the same day. How many minutes long is the concert?"
    else:
        q = f"{name} puts a roast in the oven at {begin} and takes it out at {end} the same day. How many minutes did it cook?"  # noqa: E501
    return _row("ElapsedTime", q, duration, kind), (start, duration)


def signed_change(rng: random.Random, i: int) -> tuple[dict, tuple]:
    """A change from a negative value to a positive one or back, asked as a positive amount."""
    low, high = -rng.randint(2, 30), rng.randint(1, 30)
    rises = rng.random() < 0.5
    before, after = (low, high) if rises else (high, low)
    kind, name = ("temperature", "depth", "balance")[i % 3], rng.choice(NAMES)
    if kind == "temperature":
        verb = "rise" if rises else "fall"
        q = (
            f"At 6 a.m. the temperature was {before} degrees. At noon it was {after} degrees. "
            f"By how many degrees did the temperature {verb}?"
        )
    elif kind == "depth":
        where = lambda h: f"{-h} metres below sea level" if h < 0 else f"{h} metres above sea level"  # noqa: E731
        verb = "climb" if rises else "descend"
        q = f"A path goes from {where(before)} to {where(after)}. How many metres does it {verb}?"
    else:
        money = lambda x: f"-{-x} dollars" if x < 0 else f"{x} dollars"  # noqa: E731
        verb = "go up" if rises else "go down"
        q = f"{name}'s bank balance was {money(before)}. A week later it was {money(after)}. By how many dollars did it {verb}?"  # noqa: E501
    return _row("SignedChange", q, high - low, kind), (rises, before, after)


PRICED = [("jacket", "dollars"), ("bike", "dollars"), ("lamp", "dollars"), ("ticket", "dollars")]
COUNTED = [("members of a club", "members"), ("fish in a pond", "fish"), ("visitors to a park", "visitors")]


def percent_chain(rng: random.Random, i: int) -> tuple[dict, tuple]:
    """Two percent changes, the second applied to the changed amount; the numbers make every answer whole."""
    kind = ("up_down", "down_down", "up_up")[i % 3]
    while True:
        base = rng.randrange(40, 1000, 20)
        p1, p2 = rng.choice([10, 20, 25, 50]), rng.choice([10, 20, 25, 50])
        first = base * (100 + (p1 if kind != "down_down" else -p1))
        final = first * (100 + (p2 if kind != "up_down" and kind != "down_down" else -p2))
        if first % 100 == 0 and final % 10_000 == 0:
            break
    answer = final // 10_000
    if kind == "up_up":
        what, unit = rng.choice(COUNTED)
        q = (
            f"There were {base} {what}. The number grew by {p1}% in the first year, and by {p2}% of the new "
            f"number in the second year. How many {unit} are there now?"
        )
    else:
        item, unit = rng.choice(PRICED)
        verb = "rises" if kind == "up_down" else "falls"
        q = (
            f"The price of a {item} is {base} {unit}. It {verb} by {p1}%, and then the new price falls by "
            f"{p2}%. What is the final price, in {unit}?"
        )
    return _row("PercentChain", q, answer, kind), (kind, base, p1, p2)


def _row(dataset: str, question: str, answer: int, level: str) -> dict:
    return {"dataset": dataset, "source": "utu", "question": question, "answer": str(answer), "level": level}


TASKS: dict[str, Callable[[random.Random, int], tuple[dict, tuple]]] = {
    "ElapsedTime": elapsed_time,
    "SignedChange": signed_change,
    "PercentChain": percent_chain,
}


def rows(name: str) -> Iterator[dict]:
    """ROWS rows of one task, no problem twice (a repeat is drawn again)."""
    rng, seen = random.Random(0), set()
    for i in range(ROWS):
        row, problem = TASKS[name](rng, i)
        while problem in seen:
            row, problem = TASKS[name](rng, i)
        seen.add(problem)
        yield {**row, "meta": {"problem": list(problem)}}


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    for name in TASKS:
        path = ROOT / f"dataset/{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(name)))
        print(f"{path}: {ROWS} rows")
