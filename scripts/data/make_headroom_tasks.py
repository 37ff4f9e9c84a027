"""Write the bundled headroom tasks (deterministic: seed 0), where a reward encodes a habit one sentence teaches.

    python scripts/data/make_headroom_tasks.py

- dataset/WholeItems.jsonl: a division with a remainder whose answer counts whole things: how many can be
  filled or bought (round down, level `round_down`) or how many are needed to hold everyone (round up, level
  `round_up`). The embedded 0.5B often answers the exact quotient (8.33) instead.
- dataset/PercentOf.jsonl: "what percent ..." questions whose answer is the percent (40), not the fraction
  (0.4) the embedded 0.5B often writes; level `part` (a part of a whole) or `change` (an increase or decrease,
  answered as a positive percent).
- dataset/Decimals.jsonl: an equal share of a third, in dollars (level `money`) or metres (`length`), answered
  to two decimal places (11.33); the embedded 0.5B often boxes a whole number (11) or every digit (11.3333).
- dataset/Averages.jsonl: the mean of three whole numbers that is not whole, in points (`points`) or sales
  (`sales`), answered as the nearest whole number; the embedded 0.5B often boxes the exact decimal.
- dataset/Remainders.jsonl: an equal sharing (level `left`) or packing (`unpacked`) with a remainder, where the
  question asks how many are left over; the embedded 0.5B often boxes the quotient (how many each gets).
- dataset/MixedUnits.jsonl: how many pieces, bags or cups of a size in small units (centimetres, grams,
  millilitres) come out of an amount in large units (metres, kilograms, litres); level `length`, `mass` or
  `volume`. The embedded 0.5B often divides before converting (3 kg / 250 g = 3/250 bags).
- dataset/Portions.jsonl: MixedUnits' flour and juice questions only (level `mass` or `volume`), the kinds the
  embedded 0.5B seldom converts; `make demo` runs on it.
The arithmetic is kept easy (divisors 2 to 6 or 10 and small totals; MixedUnits: sizes that divide the amount
exactly), so the habit is what each task tests.

300 rows each: practice on 0-99, validate on 100-199, hold out 200-299 (benchmarks/learning/learning_gain.py).
"""

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = 300
NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lena", "Omar", "Priya", "Jack", "Sofia", "Ravi", "Chloe", "Diego"]
PACK = [
    ("cookies", "tin", "tins"),
    ("eggs", "carton", "cartons"),
    ("apples", "bag", "bags"),
    ("pencils", "box", "boxes"),
    ("photos", "album page", "album pages"),
    ("muffins", "tray", "trays"),
    ("books", "shelf", "shelves"),
    ("cupcakes", "box", "boxes"),
]
BUY = [
    ("notebook", "notebooks"),
    ("ticket", "tickets"),
    ("comic", "comics"),
    ("plant", "plants"),
    ("sticker sheet", "sticker sheets"),
    ("mug", "mugs"),
]
CARRY = [
    ("students", "bus", "buses", "seats"),
    ("guests", "table", "tables", "seats"),
    ("hikers", "tent", "tents", "sleeps"),
    ("campers", "canoe", "canoes", "holds"),
    ("passengers", "van", "vans", "seats"),
    ("players", "car", "cars", "fits"),
]
PARTS = [
    ("students in a class", "wear glasses"),
    ("trees in an orchard", "are apple trees"),
    ("emails in an inbox", "are unread"),
    ("seats in a theatre", "are taken"),
    ("marbles in a jar", "are red"),
    ("days of a trip", "were sunny"),
]
CHANGES = [
    ("price of a bike", "dollars"),
    ("number of members of a club", "members"),
    ("rent of a flat", "dollars"),
    ("number of visitors to a museum", "visitors"),
]


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


def decimals(rng: random.Random, i: int) -> dict:
    """An equal share that is not whole; the house rule is to give it rounded to two decimal places."""
    name, k = rng.choice(NAMES), 3  # a third is never a whole or a short decimal: the rounding always decides
    n = rng.choice([x for x in range(10, 60) if x % k])
    if i % 2 == 0:
        q = f"{name} shares {n} dollars equally among {k} friends. How many dollars does each friend get?"
        level = "money"
    else:
        q, level = f"A {n} metre rope is cut into {k} equal pieces. How long is each piece, in metres?", "length"
    return _row("Decimals", q, f"{n / k:.2f}", level)


def averages(rng: random.Random, i: int) -> dict:
    """The mean of three small whole numbers that is not whole; the house rule is the nearest whole number."""
    name = rng.choice(NAMES)
    while True:
        values = [rng.randint(2, 20) for _ in range(3)]
        if sum(values) % 3:
            break
    a, b, c = values
    if i % 2 == 0:
        q, level = f"{name} scored {a}, {b} and {c} points in three games. What was the average score?", "points"
    else:
        q = f"A shop sold {a}, {b} and {c} umbrellas on three rainy days. How many did it sell per day on average?"
        level = "sales"
    return _row("Averages", q, round(sum(values) / 3), level)


SHARE = [("cookies", "children"), ("marbles", "friends"), ("stickers", "students"), ("apples", "baskets")]


def remainders(rng: random.Random, i: int) -> dict:
    """An equal sharing or packing with a remainder; the question asks how many are left over, which the 0.5B
    often answers with the quotient (how many each gets, how many bags)."""
    name = rng.choice(NAMES)
    k = rng.choice([3, 4, 5, 6])
    while True:
        n = rng.randint(10, 40)
        if n % k:
            break
    things, people = rng.choice(SHARE)
    if i % 2 == 0:
        q = f"{name} shares {n} {things} equally among {k} {people}, giving each as many as possible. How many {things} are left over?"  # noqa: E501
        return _row("Remainders", q, n % k, "left")
    q = f"{n} {things} are packed {k} to a bag. After filling as many bags as possible, how many {things} are not in a bag?"  # noqa: E501
    return _row("Remainders", q, n % k, "unpacked")


MIXED = [  # level, small units in one large unit, piece sizes in small units, the story
    (
        "length",
        100,
        (10, 20, 25, 50),
        "{name} has a rope {m} metres long and cuts it into pieces {c} centimetres "
        "long. How many pieces does {name} get?",
    ),
    (
        "mass",
        1000,
        (100, 200, 250, 500),
        "{name} has {m} kilograms of flour and fills bags with {c} grams each. How many bags does {name} fill?",
    ),
    (
        "volume",
        1000,
        (100, 200, 250, 500),
        "{name} pours {m} litres of juice into cups of {c} millilitres each. How many cups does {name} fill?",
    ),
]


def mixed_units(rng: random.Random, i: int) -> dict:
    """An amount in large units divided into pieces given in small units: the units must be made the same first.
    The sizes divide the amount exactly, so converting is the only thing to get right."""
    return _units_row("MixedUnits", MIXED[i % 3], rng)


def portions(rng: random.Random, i: int) -> dict:
    """MixedUnits without its ropes: flour in kilograms into bags of grams, juice in litres into cups of
    millilitres. Made after MixedUnits' benchmark: the 0.5B converted metres to centimetres most of the time
    (0.575 on its 60 held-out questions) but kilograms and litres seldom (0.225 and 0.025), so here all the
    headroom is one habit."""
    return _units_row("Portions", MIXED[1 + i % 2], rng)


def _units_row(dataset: str, kind: tuple, rng: random.Random) -> dict:
    level, per, sizes, story = kind
    m, c = rng.randint(2, 9), rng.choice(sizes)
    return _row(dataset, story.format(name=rng.choice(NAMES), m=m, c=c), m * per // c, level)


def _row(dataset: str, question: str, answer: int | str, level: str) -> dict:
    return {"dataset": dataset, "source": "utu", "question": question, "answer": str(answer), "level": level}


TASKS = {
    "WholeItems": whole_items,
    "PercentOf": percent_of,
    "Decimals": decimals,
    "Averages": averages,
    "Remainders": remainders,
    "MixedUnits": mixed_units,
    "Portions": portions,
}


HELD_OUT = 200  # questions 200.. are held out by benchmarks/learning/learning_gain.py


def rows(name: str) -> list[dict]:
    if name != "Portions":  # as their benchmarks ran
        rng = random.Random(0)
        return [TASKS[name](rng, i) for i in range(ROWS)]
    # Portions was made after MixedUnits' results on its held-out questions had been seen: its own seed, none of
    # those questions, and no question twice, so that its own splits are disjoint.
    rng, out = random.Random(1), []
    seen = {row["question"] for row in rows("MixedUnits")[HELD_OUT:]}
    for i in range(ROWS):
        row = portions(rng, i)
        while row["question"] in seen:
            row = portions(rng, i)
        seen.add(row["question"])
        out.append(row)
    return out


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    for name in TASKS:
        path = ROOT / f"dataset/{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(name)))
        print(f"{path}: {ROWS} rows")
