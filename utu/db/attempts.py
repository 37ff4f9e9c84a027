"""The attempt writer: every update of an `evaluation_data` row, by group commit. Secrets are masked first."""

import asyncio
from collections import defaultdict
from typing import Any, cast

from sqlalchemy import Table, bindparam

from utu.db.engine import Database
from utu.db.models import EvaluationSample
from utu.tracing.redact import Redactor

_table = cast(Table, EvaluationSample.__table__)  # a mapped class's table: typed as the wider FromClause
_UPDATE_BY_ID = _table.update().where(_table.c.id == bindparam("row_id"))


JUDGED = "response"  # the reply the verifier judges: masked of the known secrets only (utu/tracing/redact.py)


def _masked(values: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    return {k: redactor.value(v, formats=k != JUDGED) for k, v in values.items()}


class AttemptWriter:
    def __init__(self, db: Database):
        self.db = db
        self._pending: list[tuple[EvaluationSample, dict[str, Any], asyncio.Future]] = []
        self._writer: asyncio.Task | None = None

    async def save(self, row: EvaluationSample, values: dict[str, Any]) -> None:
        """Write an attempt's new column values atomically and keep the row object in step.

        Returns once they are committed. Attempts saved while a commit is under way go together in the
        next transaction (group commit): one transaction per attempt cost more CPU than the attempt itself.
        """
        done = asyncio.get_running_loop().create_future()
        self._pending.append((row, values, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending())
        await done

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self._commit(batch)
            except Exception:  # a bad row must fail only its own attempt: write the batch row by row
                for item in batch:
                    try:
                        await self._commit([item])
                    except Exception as e:
                        if not item[2].done():
                            item[2].set_exception(e)

    async def _commit(self, batch: list[tuple[EvaluationSample, dict[str, Any], asyncio.Future]]) -> None:
        redactor = Redactor()  # reads the secrets once per batch
        batch = [(row, _masked(values, redactor), done) for row, values, done in batch]
        by_row: dict[int, dict[str, Any]] = {}  # one row saved twice in a batch: the later values win
        for row, values, _ in batch:
            by_row.setdefault(row.id, {}).update(values)
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        for row_id, values in by_row.items():
            by_columns[tuple(sorted(values))].append({"row_id": row_id, **values})
        async with self.db.transaction() as s:  # Core executemany, one per set of columns
            for params in by_columns.values():
                await s.execute(_UPDATE_BY_ID, params)  # SET takes the columns named in the parameters
        for row, values, done in batch:  # here, not in the caller: a caller cancelled meanwhile still gets it
            for key, value in values.items():
                setattr(row, key, value)
            if not done.done():
                done.set_result(None)
