"""The TaskRecorder: what evaluation and practice report to. It always writes to the database; when
tracing is on, the same facts go on the current Phoenix span. Secrets are masked before either."""

from typing import Any

from sqlalchemy import update

from utu.db.engine import Database
from utu.db.models import EvaluationSample
from utu.tracing.redact import Redactor
from utu.tracing.spans import set_attributes, trace


class TaskRecorder:
    def __init__(self, db: Database):
        self.db = db

    async def save_attempt(self, row: EvaluationSample, values: dict[str, Any]) -> None:
        """Write an attempt's new column values (one atomic statement) and keep the row object in step."""
        redactor = Redactor()
        values = {k: redactor.value(v) for k, v in values.items()}
        async with self.db.transaction() as s:
            await s.execute(update(EvaluationSample).where(EvaluationSample.id == row.id).values(**values))
        for key, value in values.items():
            setattr(row, key, value)

    def annotate(self, **attributes: Any) -> None:
        """Put facts (step statistics, the library, ...) on the current span."""
        redactor = Redactor()
        set_attributes(trace.get_current_span(), {k: redactor.value(v) for k, v in attributes.items()})
