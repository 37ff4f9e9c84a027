"""Write the bundled headroom tasks (deterministic: seed 0), where a reward encodes a habit one sentence teaches.

    python scripts/data/make_headroom_tasks.py

- dataset/WholeItems.jsonl: a division with a remainder whose answer counts whole things: how many can be
  filled or bought (round down, level `round_down`) or how many are needed to hold everyone (round up, level
  `round_up`). The embedded 0.5B often answers the exact quotient (8.33) instead.
- dataset/PercentOf.jsonl: "what percent ..." questions whose answer is the percent (40), not the fraction
  (0.4) the embedded 0.5B often writes; level `part` (a part of a whole) or `change` (an increase or decrease,
  answered as a positive percent).
The arithmetic is kept easy (divisors 2, 4, 5, 10; totals of 20-200), so the habit is what each task tests.

300 rows each: practice on 0-99, validate on 100-199, hold out 200-299 (benchmarks/learning_gain.py).
"""

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = 300
NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lena", "Omar", "Priya", "Jack", "Sofia", "Ravi", "Chloe", "Diego"]
PACK = [("cookies", "tin", "tins"), ("eggs", "carton", "cartons"), ("apples", "bag", "bags"),
        ("pencils", "box", "boxes"), ("photos", "album page", "album pages"), ("muffins", "tray", "trays"),
        ("books", "shelf", "shelves"), ("cupcakes", "box", "boxes")]  # fmt: skip
BUY = [("notebook", "notebooks"), ("ticket", "tickets"), ("comic", "comics"), ("plant", "plants"),
       ("sticker sheet", "sticker sheets"), ("mug", "mugs")]  # fmt: skip
CARRY = [("students", "bus", "buses", "seats"), ("guests", "table", "tables", "seats"),
         ("hikers", "tent", "tents", "sleeps"), ("campers", "canoe", "canoes", "holds"),
         ("passengers", "van", "vans", "seats"), ("players", "car", "cars", "fits")]  # fmt: skip
PARTS = [("students in a class", "wear glasses"), ("trees in an orchard", "are apple trees"),
         ("emails in an inbox", "are unread"), ("seats in a theatre", "are taken"),
         ("marbles in a jar", "are red"), ("days of a trip", "were sunny")]  # fmt: skip
CHANGES = [("price of a bike", "dollars"), ("number of members of a club", "members"),
           ("rent of a flat", "dollars"), ("number of visitors to a museum", "visitors")]  # fmt: skip


def _quotient(rng: random.Random) -> tuple[int, int]:
    """A division the 0.5B gets right (a divisor of 2, 4, 5 or 10), so the rounding is what the task tests."""
    while True:
        n, k = rng.randint(11, 59), rng.choice([2, 4, 5, 10])
        if n % k:
            return n, k


def whole_items(rng: random.Random, i: int) -> dict:
    n, k = _quotient(rng)
    name = rng.choice(NAMES)
    kind = i % 4
    if kind == 0:
        things, container, containers = rng.choice(PACK)
        q = f"{name} has {n} {things} and puts {k} in each {container}. How many {containers} can {name} fill completely?"  # noqa: E501
        return _row("WholeItems", q, n // k, "round_down")
    if kind == 1:
        item, items = rng.choice(BUY)
        q = f"{name} has {n} dollars. One {item} costs {k} dollars. How many {items} can {name} buy?"
        return _row("WholeItems", q, n // k, "round_down")
    people, one, many, verb = rng.choice(CARRY)
    if kind == 2:
        q = f"{n} {people} are going on an outing. Each {one} {verb} {k}. How many {many} are needed for all of them?"
    else:
        q = f"{name} must find room for {n} {people}, and one {one} {verb} {k} of them. What is the least number of {many} {name} needs?"  # noqa: E501
    return _row("WholeItems", q, -(-n // k), "round_up")


def percent_of(rng: random.Random, i: int) -> dict:
    name = rng.choice(NAMES)
    if i % 4 == 0:
        total = rng.choice([20, 50, 100, 200])
        percent = rng.choice([p for p in range(5, 100, 5) if total * p % 100 == 0])
        part = total * percent // 100
        whole, trait = rng.choice(PARTS)
        if rng.random() < 0.5:
            q = f"Of the {total} {whole}, {part} {trait}. What percent of them {trait}?"
        else:
            q = f"{name} answered {part} of {total} quiz questions correctly. What percentage of the questions did {name} get right?"  # noqa: E501
        return _row("PercentOf", q, percent, "part")
    before = rng.choice([50, 100, 200])
    percent = rng.choice([p for p in range(10, 60, 10) if before * p % 100 == 0])
    up = i % 4 == 1  # a quarter increases, half decreases
    after = before + before * percent // 100 * (1 if up else -1)
    what, unit = rng.choice(CHANGES)
    change = "increase" if up else "decrease"
    q = f"The {what} went from {before} {unit} to {after} {unit}. By what percent did it {change}?"
    return _row("PercentOf", q, percent, "change")


def _row(dataset: str, question: str, answer: int, level: str) -> dict:
    return {"dataset": dataset, "source": "utu", "question": question, "answer": str(answer), "level": level}


TASKS = {"WholeItems": whole_items, "PercentOf": percent_of}


def rows(name: str) -> list[dict]:
    rng = random.Random(0)
    return [TASKS[name](rng, i) for i in range(ROWS)]


if __name__ == "__main__":
    for name in TASKS:
        path = ROOT / f"dataset/{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(name)))
        print(f"{path}: {ROWS} rows")
