"""A concurrency limit that hands free slots out by priority (lower first), first come first served within one.

The practice loop shares one client between rollouts and the learner. With a plain FIFO semaphore, learner
calls of early groups queue among the rest of the batch's rollouts and push the last rollout, and so the
whole step, later. Serving rollouts first keeps them as fast as in a batch-synchronous step, while learner
calls still fill every slot the rollouts leave idle (stragglers, retries, a batch tail).
"""

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PrioritySlots:
    def __init__(self, limit: int):
        self._free = limit
        self._waiting: list[tuple[int, int, asyncio.Future]] = []  # a heap of (priority, arrival, future)
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def hold(self, priority: int = 0) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # handed a slot just as we were cancelled: pass it on
                self._release()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():  # skip waiters that were cancelled meanwhile
                granted.set_result(None)
                return
        self._free += 1
