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
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

from pebble import ProcessExpired, ProcessPool

from utu.verify import needs_answer

DEFAULT_TIMEOUT = 10.0

_pool: ProcessPool | None = None
_running: ProcessPool | None = None  # the pool whose workers are known to be up
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


def _warm_worker() -> None:
    """A first judgement: it loads math-verify, sympy and the LaTeX parser (most of a cold worker's first task)."""
    _grade("1", "\\boxed{1}")


def _context() -> multiprocessing.context.BaseContext:
    """Where the OS has one, a fork server: it imports math-verify once and every worker is a fork of it,
    so starting a worker, or replacing one a timeout killed, takes milliseconds instead of a new interpreter
    importing sympy (spawn re-runs the main module in each worker too). Never plain fork: forking a process
    that runs threads (event loop, servers) can deadlock the child; the fork server runs none."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # "__main__" once in the server, not in every worker; utu.verify.math_warm runs one judgement there
    context.set_forkserver_preload(["__main__", "utu.verify.math_warm"])
    return context


def warm_up() -> None:
    """Start the workers now, in a background thread, so the first judgement of a run does not wait for them
    (the fork server loads math-verify first: about 0.3 s; spawned workers, a second each)."""
    threading.Thread(target=_start_workers, name="math-verify start", daemon=True).start()


def _start_workers() -> None:
    global _running
    try:
        workers = pool()
        for _ in range(max(1, os.cpu_count() or 1)):
            workers.schedule(_warm_worker)
    except Exception:  # only a head start: the first judgement meets the same error and reports it
        return
    _running = workers


def _submit(workers: ProcessPool, *args) -> Future:
    """The first task of a pool starts its workers, which blocks until they are up."""
    global _running
    future = workers.submit(_grade, *args)
    _running = workers
    return future


def pool(broken: ProcessPool | None = None) -> ProcessPool:
    """The shared worker pool, replacing `broken` if it is still the current one (a worker killed by the OS
    can break a pebble pool; concurrent callers that saw the same breakage replace it once)."""
    global _pool
    with _pool_lock:
        if broken is not None and broken is _pool:
            _pool.stop()
        # (`active` would start a pool's workers, and wait for them, on the caller's thread: the event loop's)
        starting = _pool is not None and _pool is not _running
        if _pool is None or broken is _pool or not (starting or _pool.active):
            _pool = ProcessPool(max_workers=max(1, os.cpu_count() or 1), initializer=_quiet_worker, context=_context())
        return _pool


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.stop()
        _pool.join(timeout=5)


@needs_answer
async def verify_func(sample, timeout_score: float = 0, timeout: float = DEFAULT_TIMEOUT, **kwargs) -> dict:
    """Reward 1.0 if the response's final answer equals the gold answer mathematically, else 0.0."""
    if sample.correct_answer is None:
        raise ValueError("the math verifier needs a gold answer (the question has answer: null)")
    broken = None
    for last_try in (False, True):
        workers = pool(broken)
        args = (timeout, str(sample.correct_answer), sample.response or "")
        # until the workers are up, submitting waits for them: off the event loop
        future = _submit(workers, *args) if workers is _running else await asyncio.to_thread(_submit, workers, *args)
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
