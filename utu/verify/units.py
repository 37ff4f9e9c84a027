"""Numeric match for the bundled unit-conversion task: the last \\boxed{...} (else the last number of the
response) within 0.2% (or 0.01) of the gold answer. Tight enough that the task's trap tool, whose rounded
factors are 0.5% or more off, fails; loose enough for rounding to two decimals.
"""

import math
import re
from typing import Any, cast

from utu.verify import needs_answer
from utu.verify.str_match import final_answer

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
RELATIVE, ABSOLUTE = 0.002, 0.01


def last_number(text: str) -> float | None:
    numbers = _NUMBER.findall(final_answer(text))
    return float(numbers[-1].replace(",", "")) if numbers else None


@needs_answer
async def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    if sample.correct_answer is None:
        raise ValueError("the unit-conversion verifier needs a gold answer (the question has answer: null)")
    gold, got = float(sample.correct_answer), last_number(sample.response or "")
    if got is None:
        return {"reward": 0.0, "reasoning": "no number in the response", "extracted_final_answer": None}
    ok = abs(got - gold) <= max(ABSOLUTE, RELATIVE * abs(gold))
    return {
        "reward": 1.0 if ok else 0.0,
        "reasoning": None if ok else f"got {got:g}, gold {gold:g}",
        "extracted_final_answer": f"{got:g}",
    }


def _answer_problem(answer: str) -> str | None:
    try:
        if math.isfinite(float(answer)):
            return None
    except ValueError:
        pass
    return f"{answer!r} is not a plain finite number (write 1000, not '1,000' or '7 km')"


cast(Any, verify_func).answer_problem = _answer_problem  # checked on the whole data set before any work (check_answers)
