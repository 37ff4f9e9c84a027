"""The bundled headroom tasks are what their generator writes, and each answer is right for its question."""

import json
import math
import re
import runpy

from tests.conftest import ROOT

GENERATOR = runpy.run_path(str(ROOT / "scripts/data/make_headroom_tasks.py"))


def bundled(name: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / f"dataset/{name}.jsonl").read_text().splitlines()]


def test_the_bundled_files_are_the_generators_output():
    for name in GENERATOR["TASKS"]:
        assert bundled(name) == GENERATOR["rows"](name), f"run: python scripts/data/make_headroom_tasks.py ({name})"


def test_whole_items_answers_round_the_quotient_the_way_the_question_asks():
    for row in bundled("WholeItems"):
        n, k = (int(x) for x in re.findall(r"\d+", row["question"])[:2])  # every template names n before k
        exact = n / k
        assert exact != int(exact), row  # always a remainder: the task is the rounding
        expected = math.ceil(exact) if row["level"] == "round_up" else math.floor(exact)
        assert row["answer"] == str(expected), row


def test_percent_answers_are_the_percent_and_a_decrease_is_positive():
    for row in bundled("PercentOf"):
        a, b = (int(n) for n in re.findall(r"\d+", row["question"])[:2])
        percent = (
            abs(b - a) / a * 100
            if row["level"] == "change"
            else (b / a * 100 if "Of the" in row["question"] else a / b * 100)
        )
        assert row["answer"] == f"{percent:g}" and percent > 0, row
