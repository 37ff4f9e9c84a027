"""Math verifier: math-verify against the gold answer wrapped as \\boxed{...}.

math-verify times out with SIGALRM, which only works in a process's main thread, and sympy can hang on
pathological input. So grading runs in a pool of worker processes (pebble), each task with a hard
timeout that kills its worker; a timeout gives `timeout_score`.
"""

import asyncio
import atexit
import multiprocessing
import os
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

from pebble import ProcessExpired, ProcessPool

DEFAULT_TIMEOUT = 10.0

_pool: ProcessPool | None = None
_pool_lock = threading.Lock()


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


def _quiet_worker() -> None:
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)


def _import_grader() -> None:
    import math_verify  # noqa: F401  (sympy and the LaTeX parser: the slow part of a worker's first task)


def warm_up() -> None:
    """Start the worker processes and their imports now, in the background, so the first judgement of a
    run does not wait for them (spawn + importing math-verify take about a second each on 2 cores)."""
    workers = pool()
    for _ in range(max(1, os.cpu_count() or 1)):
        workers.schedule(_import_grader)


def pool(broken: ProcessPool | None = None) -> ProcessPool:
    """The shared worker pool, replacing `broken` if it is still the current one (a worker killed by the OS
    can break a pebble pool; concurrent callers that saw the same breakage replace it once)."""
    global _pool
    with _pool_lock:
        if broken is not None and broken is _pool:
            _pool.stop()
        if _pool is None or not _pool.active or broken is _pool:
            # spawn: forking a process that runs threads (event loop, servers) can deadlock the child.
            _pool = ProcessPool(
                max_workers=max(1, os.cpu_count() or 1),
                initializer=_quiet_worker,
                context=multiprocessing.get_context("spawn"),
            )
        return _pool


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.stop()
        _pool.join(timeout=5)


async def verify_func(sample, timeout_score: float = 0, timeout: float = DEFAULT_TIMEOUT, **kwargs) -> dict:
    """Reward 1.0 if the response's final answer equals the gold answer mathematically, else 0.0."""
    if sample.correct_answer is None:
        raise ValueError("the math verifier needs a gold answer (the question has answer: null)")
    broken = None
    for last_try in (False, True):
        workers = pool(broken)
        future = workers.submit(_grade, timeout, str(sample.correct_answer), sample.response or "")
        try:
            ok, reasoning, extracted = await asyncio.wrap_future(future)
            return {"reward": 1.0 if ok else 0.0, "reasoning": reasoning, "extracted_final_answer": extracted}
        except (FutureTimeout, TimeoutError):
            return {
                "reward": timeout_score,
                "reasoning": f"verification timed out after {timeout:g}s",
                "timed_out": True,
            }
        except (ProcessExpired, BrokenProcessPool) as e:  # a worker died (OOM killer, a signal): once more
            # pebble replaces a dead worker itself; a pool it declared broken is replaced here
            broken = workers if isinstance(e, BrokenProcessPool) else None
            if last_try:
                raise RuntimeError(
                    f"the math-verify worker process died twice ({type(e).__name__}: {e}); if your script starts"
                    " the run, it needs `if __name__ == '__main__':` (worker processes re-import it)"
                ) from e
    raise AssertionError("unreachable")
