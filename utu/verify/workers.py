"""Worker processes for verification: where signal-based timeouts work and a hung call can be killed.

math-verify times out with SIGALRM, which only works in a process's main thread, and sympy can hang on
pathological input. So the math verifier, and every sync verify function loaded from a file or module (a
Youtu-Agent `math.py` built on math-verify, say), runs in a pool of worker processes (pebble): each task runs
in a worker's main thread, with a hard timeout that kills the worker.
"""

import asyncio
import atexit
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from pebble import ProcessExpired, ProcessPool

_pool: ProcessPool | None = None
_running: ProcessPool | None = None  # the pool whose workers are known to be up
_pool_lock = threading.Lock()


class WorkerTimeout(Exception):
    """The task ran past its timeout; its worker was killed."""


def _quiet_worker() -> None:
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)


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


def warm_up(first_task: Callable[[], Any]) -> None:
    """Start the workers now, in a background thread, each with `first_task` (a module-level function: a first
    judgement loads what judging needs), so the first judgement of a run does not wait for them (the fork server
    loads math-verify first: about 0.3 s; spawned workers, a second each)."""
    threading.Thread(target=_start_workers, args=(first_task,), name="verify workers start", daemon=True).start()


def _start_workers(first_task: Callable[[], Any]) -> None:
    global _running
    try:
        workers = pool()
        for _ in range(max(1, os.cpu_count() or 1)):
            workers.schedule(first_task)
    except Exception:  # only a head start: the first judgement meets the same error and reports it
        return
    _running = workers


def _submit(workers: ProcessPool, fn: Callable[..., Any], timeout: float, args: tuple) -> Future:
    """The first task of a pool starts its workers, which blocks until they are up."""
    global _running
    future = workers.submit(fn, timeout, *args)
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


async def run(fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
    """`fn(*args)` in a worker process (fn and args picklable: a module-level function). `WorkerTimeout` past
    `timeout`; a worker that dies (OOM killer, a signal) is replaced and the task tried once more."""
    broken = None
    for last_try in (False, True):
        workers = pool(broken)
        # until the workers are up, submitting waits for them: off the event loop
        if workers is _running:
            future = _submit(workers, fn, timeout, args)
        else:
            future = await asyncio.to_thread(_submit, workers, fn, timeout, args)
        try:
            return await asyncio.wrap_future(future)
        except (FutureTimeout, TimeoutError):
            raise WorkerTimeout(f"timed out after {timeout:g}s") from None
        except (ProcessExpired, BrokenProcessPool) as e:  # pebble replaces a dead worker; a broken pool, we do
            broken = workers if isinstance(e, BrokenProcessPool) else None
            if last_try:
                raise RuntimeError(
                    f"the verifier's worker process died twice ({type(e).__name__}: {e}); if your script starts"
                    " the run, it needs `if __name__ == '__main__':` (worker processes re-import it)"
                ) from e
    raise AssertionError("unreachable")


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.stop()
        _pool.join(timeout=5)
