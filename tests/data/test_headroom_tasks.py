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


def test_decimal_answers_are_a_third_to_two_places():
    for row in bundled("Decimals"):
        n, k = (int(x) for x in re.findall(r"\d+", row["question"])[:2])
        assert k == 3 and n % 3, row  # never whole, never a short decimal: the rounding always decides
        assert row["answer"] == f"{round(n / 3, 2):.2f}", row


def test_average_answers_are_the_nearest_whole_number_of_a_mean_that_is_not_whole():
    for row in bundled("Averages"):
        values = [int(x) for x in re.findall(r"\d+", row["question"])[:3]]
        assert sum(values) % 3, row
        assert row["answer"] == str(round(sum(values) / 3)), row


def test_remainder_answers_are_what_is_left_after_the_most_equal_shares():
    for row in bundled("Remainders"):
        n, k = (int(x) for x in re.findall(r"\d+", row["question"])[:2])  # both templates name n before k
        assert n % k, row  # always something left over
        assert row["answer"] == str(n % k), row


def test_mixed_units_answers_convert_the_amount_before_dividing():
    per = {"length": 100, "mass": 1000, "volume": 1000}  # small units in one large unit
    for row in bundled("MixedUnits") + bundled("Portions"):
        amount, size = (int(x) for x in re.findall(r"\d+", row["question"])[:2])  # the amount comes first
        assert amount * per[row["level"]] % size == 0, row  # a whole count: converting is all there is to it
        assert row["answer"] == str(amount * per[row["level"]] // size), row


def test_portions_are_mixed_units_without_the_ropes_and_none_twice():
    portions = bundled("Portions")
    assert {row["level"] for row in portions} == {"mass", "volume"}
    assert {row["dataset"] for row in portions} == {"Portions"}
    assert len({row["question"] for row in portions}) == len(portions)  # practice, validation, held-out disjoint
    assert not {row["question"] for row in portions} & {row["question"] for row in bundled("MixedUnits")[200:]}
