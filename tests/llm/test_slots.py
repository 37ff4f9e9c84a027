"""PrioritySlots: a concurrency limit that serves waiting calls by priority and never leaks a slot."""

import asyncio

import pytest

from utu.llm.slots import PrioritySlots


async def test_waiting_calls_are_served_by_priority_then_arrival():
    slots, order = PrioritySlots(1), []
    release = asyncio.Event()

    async def holder():
        async with slots.hold():
            await release.wait()

    async def call(name: str, priority: int):
        async with slots.hold(priority):
            order.append(name)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    arrivals = [("learn-a", 1), ("roll-a", 0), ("learn-b", 1), ("roll-b", 0)]
    waiting = [asyncio.create_task(call(name, priority)) for name, priority in arrivals]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *waiting)
    assert order == ["roll-a", "roll-b", "learn-a", "learn-b"]


async def test_limit_holds_under_load():
    slots, busy, most = PrioritySlots(3), 0, 0

    async def call(i: int):
        nonlocal busy, most
        async with slots.hold(i % 2):
            busy += 1
            most = max(most, busy)
            await asyncio.sleep(0.001)
            busy -= 1

    await asyncio.gather(*(call(i) for i in range(50)))
    assert most == 3


async def test_cancelled_waiters_do_not_leak_slots():
    slots = PrioritySlots(1)
    release = asyncio.Event()

    async def holder():
        async with slots.hold():
            await release.wait()

    async def call():
        async with slots.hold():
            pass

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    doomed = [asyncio.create_task(call()) for _ in range(3)]
    await asyncio.sleep(0)
    for task in doomed:
        task.cancel()
    release.set()
    await first
    for task in doomed:
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.wait_for(call(), 1)  # the one slot is free again
    await asyncio.wait_for(asyncio.gather(call(), call()), 1)


async def test_a_waiter_cancelled_as_it_is_granted_passes_the_slot_on():
    slots = PrioritySlots(1)
    await slots._acquire(0)
    waiter = asyncio.create_task(slots._acquire(0))
    await asyncio.sleep(0)
    slots._release()  # hands the slot to the waiter ...
    waiter.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(slots._acquire(0), 1)  # the slot was passed on, not lost
