"""Math verifier: math-verify against the gold answer wrapped as \\boxed{...}.

Grading runs in verification worker processes (`utu.verify.workers`): math-verify's own timeout needs a
process's main thread, and sympy can hang on pathological input; a hard timeout gives `timeout_score`.
"""

from utu.verify import needs_answer, workers

DEFAULT_TIMEOUT = 10.0


def _grade(gold: str, response: str) -> tuple[bool, str, str | None]:
    """Runs in a worker process. Internal timeouts are off: the pool's hard timeout is the only one."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_parsed = parse("\\boxed{" + gold + "}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    if not gold_parsed:
        gold_parsed = parse(gold, parsing_timeout=None)
    pred = parse(response, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=None)
    if not pred:
        return False, "no answer found in the response", None
    ok = bool(gold_parsed) and verify(gold_parsed, pred, timeout_seconds=None)
    return ok, f"extracted {pred[-1]!s}; gold {gold}", str(pred[-1])


def warm_up() -> None:
    """Start the worker processes now (see `utu.verify.workers.warm_up`)."""
    workers.warm_up(_first_judgement)


def _first_judgement() -> None:
    """It loads math-verify, sympy and the LaTeX parser: most of a cold worker's first task."""
    _grade("1", "\\boxed{1}")


@needs_answer
async def verify_func(sample, timeout_score: float = 0, timeout: float = DEFAULT_TIMEOUT, **kwargs) -> dict:
    """Reward 1.0 if the response's final answer equals the gold answer mathematically, else 0.0."""
    if sample.correct_answer is None:
        raise ValueError("the math verifier needs a gold answer (the question has answer: null)")
    try:
        ok, reasoning, extracted = await workers.run(
            _grade, str(sample.correct_answer), sample.response or "", timeout=timeout
        )
    except workers.WorkerTimeout:
        return {"reward": timeout_score, "reasoning": f"verification timed out after {timeout:g}s", "timed_out": True}
    return {"reward": 1.0 if ok else 0.0, "reasoning": reasoning, "extracted_final_answer": extracted}
