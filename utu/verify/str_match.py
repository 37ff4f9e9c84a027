"""Normalised exact match: case, surrounding whitespace, quotes and a final period do not matter.

The answer compared is the last \\boxed{...} of the response if there is one, else the whole response.
It is `async` although it never awaits: a few microseconds of linear-time string work run inline on the
event loop, where a sync verifier's worker-thread hop would cost a hundred times more.
"""

import re
import unicodedata

from utu.verify import needs_answer

BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).strip().lower()
    text = re.sub(r"\s+", " ", text)
    return text.strip(" \"'`").rstrip(".").strip()


def final_answer(response: str) -> str:
    boxed = BOXED.findall(response)
    return boxed[-1] if boxed else response


@needs_answer
async def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    if sample.correct_answer is None:
        raise ValueError("string matching needs a gold answer (the question has answer: null)")
    got = normalize(final_answer(sample.response or ""))
    ok = got == normalize(str(sample.correct_answer))
    return {"reward": 1.0 if ok else 0.0, "reasoning": None if ok else f"got {got!r}"}
