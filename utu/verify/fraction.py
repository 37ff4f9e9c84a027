"""Exact fractions: the answer is a fraction in lowest terms, boxed (\\boxed{3/8}, \\boxed{\\frac{3}{8}}).

A decimal (0.375), a percent or an unreduced fraction (6/16) is not the form the question's house rule asks
for, even when its value is right; the reasoning says which it was.
"""

import math
import re

from utu.verify import needs_answer
from utu.verify.str_match import BOXED

_FRACTION = re.compile(r"^\s*-?\s*(?:\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d+)\s*/\s*(\d+))\s*$")


def boxed_fraction(response: str) -> tuple[int, int] | None:
    """(numerator, denominator) of the response's last \\boxed{} if it holds a fraction, else None."""
    boxed = BOXED.findall(response)
    match = _FRACTION.match(boxed[-1]) if boxed else None
    if not match:
        return None
    top, bottom = (int(g) for g in (match[1] or match[3], match[2] or match[4]))
    return (top, bottom) if bottom else None


@needs_answer
async def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    if sample.correct_answer is None:
        raise ValueError("the fraction verifier needs a gold fraction (the question has answer: null)")
    gold_top, _, gold_bottom = str(sample.correct_answer).partition("/")
    gold = (int(gold_top), int(gold_bottom or 1))
    got = boxed_fraction(sample.response or "")
    if got is None:
        return {"reward": 0.0, "reasoning": "the boxed answer is not a fraction a/b"}
    if got[0] * gold[1] != gold[0] * got[1]:
        return {"reward": 0.0, "reasoning": f"{got[0]}/{got[1]} is not {gold[0]}/{gold[1]}"}
    if math.gcd(*got) != 1:
        return {"reward": 0.0, "reasoning": f"{got[0]}/{got[1]} is not in lowest terms"}
    return {"reward": 1.0, "reasoning": None}
