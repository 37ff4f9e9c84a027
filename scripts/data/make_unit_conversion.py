"""Write the bundled tool-selection data set, dataset/UnitConversion.jsonl (deterministic: seed 0).

    python scripts/data/make_unit_conversion.py

120 questions "Convert V <unit> to <unit>, rounded to 2 decimals." Level `trap`: pairs where the trap tool
`quick_convert` (utu/tools/unit_tools.py) is wrong; level `metric`: pairs where it happens to be right.
"""

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from utu.tools.unit_tools import UnitTools, convert  # noqa: E402

NAMES = {
    "mi": "miles",
    "km": "kilometres",
    "lb": "pounds",
    "kg": "kilograms",
    "in": "inches",
    "cm": "centimetres",
    "ft": "feet",
    "m": "metres",
    "gal": "gallons",
    "l": "litres",
    "oz": "ounces",
    "g": "grams",
    "yd": "yards",
    "qt": "quarts",
    "F": "degrees Fahrenheit",
    "C": "degrees Celsius",
    "mm": "millimetres",
    "ml": "millilitres",
}
PAIRS = [
    ("mi", "km"),
    ("km", "mi"),
    ("lb", "kg"),
    ("kg", "lb"),
    ("in", "cm"),
    ("ft", "m"),
    ("gal", "l"),
    ("oz", "g"),
    ("yd", "m"),
    ("qt", "l"),
    ("F", "C"),
    ("C", "F"),
    ("km", "m"),
    ("g", "kg"),
    ("ml", "l"),
    ("cm", "mm"),
]
ROWS = 120


def rows() -> list[dict]:
    rng, out, tools = random.Random(0), [], UnitTools()
    while len(out) < ROWS:
        a, b = PAIRS[len(out) % len(PAIRS)]
        value = round(rng.uniform(1, 500), 1) if a not in "FC" else round(rng.uniform(-20, 110), 1)
        gold = round(convert(value, a, b), 2)
        trap = tools.quick_convert(value, a, b)["value"]
        wrong = abs(trap - gold) > max(0.01, 0.002 * abs(gold))
        out.append(
            {
                "dataset": "UnitConversion",
                "source": "utu",
                "question": f"Convert {value:g} {NAMES[a]} to {NAMES[b]}, rounded to 2 decimals.",
                "answer": f"{gold:.2f}",
                "level": "trap" if wrong else "metric",
                "meta": {"right_tool": "convert_units", "trap_tool": "quick_convert", "trap_answer": f"{trap:.2f}"},
            }
        )
    return out


if __name__ == "__main__":
    path = ROOT / "dataset/UnitConversion.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    levels = [r["level"] for r in rows()]
    print(f"{path}: {len(levels)} rows, {levels.count('trap')} where the trap tool is wrong")
