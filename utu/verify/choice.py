"""Multiple choice: the answer is the letter of an option, boxed (\\boxed{B}, \\boxed{(B)} or \\boxed{B) 21}).

A boxed number, even the right option's value, is not the letter the question's house rule asks for.
"""

import re
from typing import Any, cast

from utu.verify import needs_answer
from utu.verify.str_match import BOXED

_LETTER = re.compile(r"^\(?([A-Za-z])\)?(?:[\s.:)].*)?$", re.DOTALL)
# a second option named after the first ("B and C", "A or (B)", "B, C") is a hedge, not a choice
_HEDGE = re.compile(r"^\(?[A-Za-z]\)?\s*(?:,|/|&|\band\b|\bor\b)\s*\(?[A-Za-z]\)?(?:[\s.:),]|$)", re.I)
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")  # \boxed{\text{B}}


def chosen_letter(response: str) -> str | None:
    """The option letter the response's last \\boxed{} names, or None (a reply that boxes nothing chose nothing:
    its first word could be "A")."""
    boxed = BOXED.findall(response)
    text = _TEXT.sub(r"\1", boxed[-1]).strip() if boxed else ""
    match = _LETTER.match(text) if not _HEDGE.match(text) else None
    return match.group(1).upper() if match else None


@needs_answer
async def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    if sample.correct_answer is None:
        raise ValueError("multiple choice needs a gold letter (the question has answer: null)")
    got = chosen_letter(sample.response or "")
    gold = chosen_letter(f"\\boxed{{{sample.correct_answer}}}")  # a gold "(B)" or "B) 21" is the letter B
    ok = got is not None and got == gold
    return {"reward": 1.0 if ok else 0.0, "reasoning": None if ok else f"chose {got!r}"}


def _answer_problem(answer: str) -> str | None:
    if chosen_letter(f"\\boxed{{{answer}}}") is None:
        return f"{answer!r} is not an option letter (A, (B), B) 21)"
    return None


cast(Any, verify_func).answer_problem = _answer_problem  # checked on the whole data set before any work (check_answers)
