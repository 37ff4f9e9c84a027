"""The experiment lease: one run per exp_id, and a run whose lease was taken over while it lived stops."""

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, func, select

from utu.db import leases
from utu.db.leases import experiment_lease
from utu.db.models import ExperimentLease
from utu.errors import ConfigError


async def take_over(db, exp_id: str, pid: int) -> None:
    """What another run does to a lease it finds expired: delete it and insert its own."""
    async with db.transaction() as s:
        await s.execute(delete(ExperimentLease).where(ExperimentLease.exp_id == exp_id))
        now = datetime.now(UTC)
        s.add(ExperimentLease(exp_id=exp_id, holder="other", host="elsewhere", pid=pid, since=now, expires_at=now))


async def leases_held(db) -> list[tuple[str, str]]:
    async with db.sessions() as s:
        return [tuple(r) for r in (await s.execute(select(ExperimentLease.exp_id, ExperimentLease.holder))).all()]


@pytest.mark.parametrize("any_db", ["sqlite", "postgres"], indirect=True)
async def test_a_run_whose_lease_was_taken_over_stops_in_one_line_and_leaves_the_new_holder_s_lease(
    any_db, monkeypatch
):
    monkeypatch.setattr(leases, "RENEW_EVERY", 0.05)
    steps = []
    with pytest.raises(ConfigError, match=r"'e1': stopped, its lease was taken over by pid 4242 on elsewhere"):
        async with experiment_lease(any_db, "e1"):
            await take_over(any_db, "e1", 4242)
            for step in range(100):  # a run's steps: the next renewal stops it
                await asyncio.sleep(0.01)
                steps.append(step)
    assert len(steps) < 30
    assert await leases_held(any_db) == [("e1", "other")]  # the other run's lease is not released by this one
    assert asyncio.current_task().cancelling() == 0  # the stop is an error, not a cancellation left pending


async def test_a_lease_held_throughout_is_renewed_and_released(sqlite_db, monkeypatch):
    monkeypatch.setattr(leases, "RENEW_EVERY", 0.05)
    async with experiment_lease(sqlite_db, "e1"):
        async with sqlite_db.sessions() as s:
            first = (await s.get(ExperimentLease, "e1")).expires_at
        await asyncio.sleep(0.2)
        async with sqlite_db.sessions() as s:
            assert (await s.get(ExperimentLease, "e1")).expires_at > first
    async with sqlite_db.sessions() as s:
        assert await s.scalar(select(func.count()).select_from(ExperimentLease)) == 0


async def test_a_lease_taken_over_and_released_again_still_stops_the_run(sqlite_db, monkeypatch):
    monkeypatch.setattr(leases, "RENEW_EVERY", 0.05)
    with pytest.raises(ConfigError, match="taken over by another run, since finished"):
        async with experiment_lease(sqlite_db, "e1"):
            await take_over(sqlite_db, "e1", 1)
            async with sqlite_db.transaction() as s:
                await s.execute(delete(ExperimentLease))
            await asyncio.sleep(5)


async def test_a_cancelled_run_is_still_a_cancellation_and_releases_its_lease(sqlite_db):
    async def run():
        async with experiment_lease(sqlite_db, "e1"):
            await asyncio.sleep(5)

    task = asyncio.create_task(run())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await leases_held(sqlite_db) == []


async def test_a_run_that_absorbs_one_cancellation_is_stopped_at_the_next_renewal(sqlite_db, monkeypatch):
    """asyncio.wait_for can return its result when a cancellation arrives as it finishes: the stop is said again."""
    monkeypatch.setattr(leases, "RENEW_EVERY", 0.05)
    absorbed, steps = 0, 0
    with pytest.raises(ConfigError, match="taken over by pid 7"):
        async with experiment_lease(sqlite_db, "e1"):
            await take_over(sqlite_db, "e1", 7)
            for steps in range(1000):  # noqa: B007 - how far it got
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if absorbed:
                        raise
                    absorbed += 1  # as a body that swallowed it would
    assert absorbed == 1 and steps < 100  # stopped at a renewal soon after, not after its 1000 steps
    assert asyncio.current_task().cancelling() == 0
