"""AttemptWriter.save: group commit that loses nothing and fails only the bad row."""

import asyncio

import pytest
from sqlalchemy import select

from utu.db import EvaluationSample
from utu.db.attempts import AttemptWriter


async def stored_rows(db, n: int) -> list[EvaluationSample]:
    async with db.transaction() as s:
        rows = [
            EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=i, raw_question=f"q{i}")
            for i in range(n)
        ]
        s.add_all(rows)
    return rows


async def rewards(db) -> dict[int, float | None]:
    async with db.sessions() as s:
        return dict((await s.execute(select(EvaluationSample.dataset_index, EvaluationSample.reward))).all())


def count_transactions(db) -> list[int]:
    calls = [0]
    original = db.transaction

    def counted():
        calls[0] += 1
        return original()

    db.transaction = counted
    return calls


async def test_concurrent_saves_all_land_in_fewer_transactions(any_db):
    rows = await stored_rows(any_db, 100)
    writer, transactions = AttemptWriter(any_db), count_transactions(any_db)
    saves = (writer.save(r, {"reward": r.dataset_index / 100, "stage": "judged"}) for r in rows)
    await asyncio.gather(*saves)
    assert await rewards(any_db) == {i: i / 100 for i in range(100)}
    assert all(r.stage == "judged" and r.reward == r.dataset_index / 100 for r in rows)  # row objects in step
    assert transactions[0] < 20


async def test_a_row_saved_twice_in_one_batch_keeps_the_later_values(any_db):
    (row,) = await stored_rows(any_db, 1)
    writer = AttemptWriter(any_db)
    await asyncio.gather(
        writer.save(row, {"reward": 0.0, "stage": "rollout"}),
        writer.save(row, {"reward": 1.0}),
    )
    assert await rewards(any_db) == {0: 1.0} and row.stage == "rollout"


async def test_a_bad_row_fails_alone(any_db):
    rows = await stored_rows(any_db, 10)
    writer = AttemptWriter(any_db)
    values = [{"reward": 1.0, "trajectories": {1, 2} if r.dataset_index == 3 else []} for r in rows]  # a set: no JSON
    saves = (writer.save(r, v) for r, v in zip(rows, values, strict=True))
    results = await asyncio.gather(*saves, return_exceptions=True)
    assert [i for i, res in enumerate(results) if isinstance(res, Exception)] == [3]
    assert await rewards(any_db) == {i: (None if i == 3 else 1.0) for i in range(10)}


async def test_a_cancelled_caller_still_gets_its_values_stored(sqlite_db):
    rows = await stored_rows(sqlite_db, 2)
    writer = AttemptWriter(sqlite_db)
    first = asyncio.create_task(writer.save(rows[0], {"reward": 0.5}))
    second = asyncio.create_task(writer.save(rows[1], {"reward": 0.25}))
    await asyncio.sleep(0)  # both queued
    first.cancel()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await rewards(sqlite_db) == {0: 0.5, 1: 0.25} and rows[0].reward == 0.5
