"""Exact fractions: the answer is a fraction in lowest terms, boxed (\\boxed{3/8}, \\boxed{\\frac{3}{8}}, -3/8).

A decimal (0.375), a percent or an unreduced fraction (6/16) is not the form the question's house rule asks
for, even when its value is right; the reasoning says which it was.
"""

import math
import re
from typing import Any, cast

from utu.verify import needs_answer
from utu.verify.str_match import BOXED

_NUMBER = r"(-?[1-9][0-9]{0,17}|0)"  # ASCII digits, no leading zero, short enough for exact integers
_FRACTION = re.compile(
    rf"^\s*(-?)\s*(?:\\[dt]?frac\s*\{{\s*{_NUMBER}\s*\}}\s*\{{\s*{_NUMBER}\s*\}}|{_NUMBER}\s*/\s*{_NUMBER})\s*$"
)


def parse_fraction(text: str) -> tuple[int, int] | None:
    """(numerator, denominator > 0) of `a/b` or `\\frac{a}{b}`, the sign on the numerator; None otherwise."""
    match = _FRACTION.match(text)
    if not match:
        return None
    sign, top, bottom = match[1], int(match[2] or match[4]), int(match[3] or match[5])
    if bottom == 0:
        return None
    if sign:
        top = -top
    return (-top, -bottom) if bottom < 0 else (top, bottom)


@needs_answer
async def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    gold = parse_fraction(str(sample.correct_answer)) if sample.correct_answer is not None else None
    if gold is None:
        raise ValueError(f"the fraction verifier needs a gold fraction a/b, got {sample.correct_answer!r}")
    boxed = BOXED.findall(sample.response or "")
    got = parse_fraction(boxed[-1]) if boxed else None
    if got is None:
        return {"reward": 0.0, "reasoning": "the boxed answer is not a fraction a/b"}
    if got[0] * gold[1] != gold[0] * got[1]:
        return {"reward": 0.0, "reasoning": f"{got[0]}/{got[1]} is not {gold[0]}/{gold[1]}"}
    if math.gcd(*got) != 1:
        return {"reward": 0.0, "reasoning": f"{got[0]}/{got[1]} is not in lowest terms"}
    return {"reward": 1.0, "reasoning": None}


def _answer_problem(answer: str) -> str | None:
    return None if parse_fraction(answer) else f"{answer!r} is not a fraction a/b"


cast(Any, verify_func).answer_problem = _answer_problem  # checked on the whole data set before any work (check_answers)
