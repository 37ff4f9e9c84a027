"""Where a library's experiences come from, and what changed between two libraries.

Read from the operation log (`experience_operations`): the applied operations of an experiment, in order,
give each experience its origin (step, source questions, the learner's rationale) and its later updates.
`operation_log` reads the whole log (refused proposals too, with why) for the demo and the benchmarks.
"""

from dataclasses import dataclass, field
from typing import Literal, cast

from sqlalchemy import select

from utu.db import Database
from utu.db.models import ExperienceOperation
from utu.practice.library import Library, OpRecord
from utu.practice.outcomes import Refused


@dataclass
class Change:
    step: int
    kind: str
    old_text: str | None
    new_text: str | None
    source_questions: list[int]
    rationale: str | None


@dataclass
class Provenance:
    """One experience: its text now, where it came from and how it changed."""

    id: str
    text: str
    origin: Change | None = None  # the ADD (None: it was in the library practice started from)
    updates: list[Change] = field(default_factory=list)


@dataclass
class Diff:
    added: dict[str, str] = field(default_factory=dict)
    updated: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (old, new)
    deleted: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, list[Change]] = field(default_factory=dict)  # id -> the operations between the two


async def operation_log(
    db: Database, exp_id: str, *, status: str | None = None, step: int | None = None, up_to: int | None = None
) -> list[ExperienceOperation]:
    """An experiment's operation log in the order it was written, optionally one status, one step or up to one."""
    query = select(ExperienceOperation).where(ExperienceOperation.exp_id == exp_id)
    if status is not None:
        query = query.where(ExperienceOperation.status == status)
    if step is not None:
        query = query.where(ExperienceOperation.step == step)
    if up_to is not None:
        query = query.where(ExperienceOperation.step <= up_to)
    async with db.sessions() as s:
        return list(await s.scalars(query.order_by(ExperienceOperation.step, ExperienceOperation.id)))


async def applied_operations(db: Database, exp_id: str, up_to: int | None = None) -> list[ExperienceOperation]:
    """The operations that changed the library, in order (up to step `up_to`)."""
    return await operation_log(db, exp_id, status="applied", up_to=up_to)


def as_record(op: ExperienceOperation) -> OpRecord:
    """A logged operation as the loop's record of it."""
    refusal = Refused.stored(op.refusal, op.reason) if op.status == "refused" and op.refusal is not None else None
    return OpRecord(
        op.kind,
        op.experience_id,
        op.old_text,
        op.new_text,
        op.source_questions or [],
        op.rationale,
        cast(Literal["applied", "refused"], op.status),  # the column holds one of the two
        refusal=refusal,
        note=None if refusal is not None else op.reason,
        learner_try=op.learner_try or 0,
    )


def provenance(library: Library, operations: list[ExperienceOperation]) -> list[Provenance]:
    by_id = {key: Provenance(key, text) for key, text in library.experiences.items()}
    for op in operations:
        entry = by_id.get(op.experience_id or "")
        if entry is None:
            continue  # deleted later: not in this library
        change = _change(op)
        if op.kind == "ADD":
            entry.origin = change
        elif op.kind == "UPDATE":
            entry.updates.append(change)
    return list(by_id.values())


def diff(
    before: Library, after: Library, operations: list[ExperienceOperation], steps: range, same_ids: bool = True
) -> Diff:
    """What `after` adds, updates and deletes relative to `before`; with the operations of `steps` (the log
    of one experiment between the two) as the reasons. `same_ids=False` (two experiments, whose ids say
    nothing of each other): experiences are matched by their text, and nothing is an update."""
    out = Diff()
    old, new = before.experiences, after.experiences
    if not same_ids:
        out.added = {key: text for key, text in new.items() if text not in old.values()}
        out.deleted = {key: text for key, text in old.items() if text not in new.values()}
        return out
    for key, text in new.items():
        if key not in old:
            out.added[key] = text
        elif old[key] != text:
            out.updated[key] = (old[key], text)
    out.deleted = {key: text for key, text in old.items() if key not in new}
    changed = set(out.added) | set(out.updated) | set(out.deleted)
    for op in operations:
        if op.step in steps and op.experience_id in changed:
            out.reasons.setdefault(op.experience_id, []).append(_change(op))
    return out


def _change(op: ExperienceOperation) -> Change:
    return Change(op.step, op.kind, op.old_text, op.new_text, list(op.source_questions or []), op.rationale)
