"""Running many attempts at once, stopping them all when one hits an error that dooms the run."""

import asyncio
from collections.abc import Awaitable
from typing import Any


async def gather_or_cancel(*awaitables: Awaitable[Any]) -> list[Any]:
    """`asyncio.gather`, but the first exception cancels the others (and waits for them to unwind) before it
    propagates: after a fatal error (a refused key) no further requests go out while the run shuts down."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
