"""The experience library and how learner operations change it.

Ids are "G<n>" with n from a counter that only grows, so an id means the same experience for the whole
experiment (the reference renumbered every step). The code, not the LLM, decides what is applied:
an UPDATE naming no existing experience is applied as an ADD (recorded as such); a DELETE of an unknown id
is refused and recorded; a DELETE needs only its id; DELETE wins over UPDATE for the same id; ADDs beyond
`max_experiences` are refused; and every new text must pass the screening (`Screen`). Each refusal is recorded
with its kind and detail (utu.practice.outcomes).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from utu.practice.outcomes import Refusal, Refused

OpKind = Literal["ADD", "UPDATE", "DELETE", "NONE"]
# (text, source questions, experiences it must not repeat) -> why the screening refuses it, or None
Screen = Callable[[str, list[int], list[str]], Refused | None]
# (text, source questions) -> why the screening refuses it only for its question's story, or None
StoryCheck = Callable[[str, list[int]], str | None]


def clean_id(v: object) -> object:
    """Models write "[G3]", "G3." or 3; the library's ids are "G3"."""
    if isinstance(v, int):
        return f"G{v}"
    return v.strip().strip("[]().").strip() if isinstance(v, str) else v


class Operation(BaseModel):
    """An operation on the library, whatever shape the learner proposed it in (utu.practice.schemas)."""

    operation: OpKind
    id: str | None = Field(default=None, description="the existing experience id for UPDATE and DELETE, else null")
    content: str | None = Field(default=None, description='the experience text for ADD and UPDATE, else ""')
    rationale: str | None = Field(default=None, description="why, in one sentence")

    @field_validator("operation", mode="before")
    @classmethod
    def _upper(cls, v: object) -> object:
        return v.strip().upper() if isinstance(v, str) else v

    @field_validator("id", mode="before")
    @classmethod
    def _clean_id(cls, v: object) -> object:
        return clean_id(v) or None


@dataclass
class ProposedOp:
    """An operation with where it came from."""

    op: Operation
    source_questions: list[int] = field(default_factory=list)


@dataclass
class OpRecord:
    kind: str
    experience_id: str | None
    old_text: str | None
    new_text: str | None
    source_questions: list[int]
    rationale: str | None
    status: Literal["applied", "refused"]
    refusal: Refused | None = None
    note: str | None = None  # of an applied operation: how it was applied
    learner_try: int = 0  # n: proposed in the learner's n-th second look at the step (`learner_retries`)

    def refuse(self, kind: Refusal, detail: str) -> None:
        self.status, self.refusal = "refused", Refused(kind, detail)

    @property
    def reason(self) -> str | None:
        """What the operation log says of it: why it was refused, or how it was applied."""
        return self.refusal.render() if self.refusal else self.note


@dataclass
class Library:
    experiences: dict[str, str] = field(default_factory=dict)
    next_id: int = 0

    def copy(self) -> "Library":
        return Library(dict(self.experiences), self.next_id)

    def render(self) -> str:
        if not self.experiences:
            return "(empty)"
        return "\n".join(f"[{key}] {text}" for key, text in self.experiences.items())


def apply_operations(
    library: Library, proposed: list[ProposedOp], max_experiences: int | None = None, screen: Screen | None = None
) -> tuple[Library, list[OpRecord]]:
    """Apply operations in order to a copy of the library; every operation but NONE yields a record."""
    new = library.copy()
    deleted_ids = {p.op.id for p in proposed if p.op.operation == "DELETE" and p.op.id}
    records = [_apply_one(new, p, deleted_ids, max_experiences, screen) for p in proposed if p.op.operation != "NONE"]
    return new, records


def _apply_one(
    lib: Library, p: ProposedOp, deleted_ids: set[str], max_experiences: int | None, screen: Screen | None
) -> OpRecord:
    op = p.op
    content = (op.content or "").strip() or None
    record = OpRecord(op.operation, op.id, None, content, p.source_questions, op.rationale, "refused")
    if op.operation == "UPDATE" and op.id not in lib.experiences:
        record.kind, record.experience_id = "ADD", None  # applied as the ADD it is, if it passes
        note = f"proposed as UPDATE of {op.id!r}, which is not in the library" if op.id else "UPDATE without an id"
    else:
        note = None
    if record.kind != "DELETE":
        if content is None:
            record.refuse(Refusal.NO_CONTENT, f"{record.kind} without content")
            return record
        if screen is not None:
            others = [text for key, text in lib.experiences.items() if key != op.id]
            refused = screen(content, p.source_questions, others)
            if refused:
                record.refuse(refused.kind, refused.detail)
                return record
    if record.kind == "ADD":
        assert content is not None  # refused above when missing
        if content in lib.experiences.values():
            record.refuse(Refusal.DUPLICATE, "duplicate of an existing experience")
        elif max_experiences is not None and len(lib.experiences) >= max_experiences:
            record.refuse(Refusal.LIBRARY_FULL, f"library full (max_experiences={max_experiences})")
        else:
            record.experience_id, record.status, record.note = f"G{lib.next_id}", "applied", note
            lib.experiences[record.experience_id] = content
            lib.next_id += 1
        return record
    if op.id not in lib.experiences:
        record.refuse(Refusal.UNKNOWN_ID, f"unknown id {op.id!r}" if op.id else "DELETE without an id")
        return record
    record.old_text = lib.experiences[op.id]
    if op.operation == "DELETE":
        del lib.experiences[op.id]
        record.new_text, record.status = None, "applied"
    elif op.id in deleted_ids:
        record.refuse(Refusal.DELETE_WINS, "a DELETE of the same id wins over UPDATE")
    else:
        assert content is not None  # an UPDATE: refused above when missing
        lib.experiences[op.id] = content
        record.status = "applied"
    return record


def with_additions(library: Library, additions: list[OpRecord], next_id: int) -> Library:
    """`library` with some of one update's applied ADDs (`apply_operations`' records), under the ids that update
    gave them; `next_id` is the update's, so an id it gave is never given again."""
    new = Library(dict(library.experiences), max(library.next_id, next_id))
    for r in additions:
        assert r.kind == "ADD" and r.experience_id and r.new_text, r
        new.experiences[r.experience_id] = r.new_text
    return new
