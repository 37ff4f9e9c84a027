"""The watchdog of async verify functions: one that computes instead of awaiting holds the run's event loop."""

import contextlib
import ctypes
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class LoopHeld(BaseException):
    """Raised inside an async verify function that held the event loop past its timeout (`Watchdog`). Not an
    `Exception`, so that a verifier's own `except Exception` around its work does not take it for its own error."""


@dataclass
class _Watch:
    """One async verify call in progress: its coroutine's frame (where the loop's thread is while it runs), and
    when it is past its time."""

    frame: Any
    thread: int
    deadline: float
    fired: bool = False


class Watchdog:
    """An async verifier that computes instead of awaiting holds the event loop, where its timeout cannot fire: a
    loop forever would hang the run, Ctrl-C's first press included. One daemon thread (started at the first call)
    looks at the calls in progress twice a second: while one past its deadline is running in its thread (its own
    frame on that thread's stack, not another call's, nor other work holding the loop) it raises `LoopHeld` there,
    again each `again_after` seconds while it holds on; its judgement fails like a timeout and the run goes on. A
    call's start and end cost a dict update under a lock, not a thread. Only Python code is interrupted: a call
    blocked in C (a sleep, a socket without a timeout) is left to end. (Between the look at the stack and the
    raise, the thread could in principle leave the call: it would have to end within microseconds of being seen
    running seconds past its deadline.)"""

    def __init__(self, again_after: float = 5.0) -> None:
        self.again_after = again_after
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[int, _Watch] = {}
        self.ids = itertools.count()
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, coroutine: Any, seconds: float) -> Iterator[_Watch]:
        frame = getattr(coroutine, "cr_frame", None)  # (None: an awaitable of another kind, not watched)
        call, watch = next(self.ids), _Watch(frame, threading.get_ident(), time.monotonic() + seconds)
        with self.lock:
            self.calls[call] = watch
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="verify watchdog", daemon=True)
                self.thread.start()
        try:
            yield watch
        finally:
            with self.lock:  # once ended, a call is never interrupted
                del self.calls[call]

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                now, stacks = time.monotonic(), None
                for watch in self.calls.values():
                    if now < watch.deadline:
                        continue
                    stacks = stacks or sys._current_frames()
                    frame = stacks.get(watch.thread)
                    while frame is not None and frame is not watch.frame:
                        frame = frame.f_back
                    if frame is not None:
                        watch.fired, watch.deadline = True, now + self.again_after
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(watch.thread), ctypes.py_object(LoopHeld)
                        )


watchdog = Watchdog()
os.register_at_fork(after_in_child=watchdog.reset)  # a forked child has no watchdog thread: it starts its own
