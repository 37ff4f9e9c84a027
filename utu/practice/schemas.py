"""The JSON the learner must reply with, one pydantic model per stage.

Written so that a small model constrained by the schema cannot get them wrong: every string has a length
bound (it cannot ramble past its token budget), an experience written in English must match the
"When <condition>, <strategy>." shape (a `pattern` the endpoint's grammar enforces; one in another script,
Chinese for instance, is free), and each kind of operation has a shape of its own (an ADD has no id to fill
with "ADD"). A learner that is not constrained may also write Youtu-Agent's "Title: strategy" form, which the
screening accepts. Validation is lenient where the
schema is strict: text-mode endpoints get their over-long strings cut, not refused, and the library's
screening (utu.practice.screening) judges the content.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.json_schema import JsonDict

from utu.practice.library import Operation, clean_id

MAX_EXPERIENCE_CHARS = 500  # the screening's default max_chars: capable learners' run to about 370
MAX_OPERATIONS = 8
MAX_EXPERIENCES = 3  # per group, whatever num_experiences_per_query asks
# The shape constrained decoding gives an experience: in English one sentence "When <condition>, <strategy>."
# with no period before the final one (small learners, constrained by a looser pattern, wrote several
# sentences); braces are allowed in the strategy: \boxed{}. A text that starts in another script (Chinese,
# Japanese, Cyrillic ...) is only kept from quotes and line breaks: the screening judges it.
EXPERIENCE_PATTERN = r'^(When [^.,{}"\n]{5,150}, [^."\n]{5,220}\.|[^\x00-\x7f][^"\n]{4,400})$'


def _bounded(limit: int, description: str, pattern: str | None = None) -> tuple[BeforeValidator, Any]:
    """A bounded text's metadata, for `Annotated[str, *_bounded(...)]`: a type alias mypy can read, not a call."""

    def cut(v: object) -> object:
        return v.strip()[:limit] if isinstance(v, str) else v

    # in the schema only: screening, not validation, refuses
    extra: JsonDict | None = {"pattern": pattern} if pattern else None
    return BeforeValidator(cut), Field(max_length=limit, description=description, json_schema_extra=extra)


def _all_required(schema: dict[str, Any]) -> None:
    schema["required"] = list(schema["properties"])


class _Op(BaseModel):
    """The schema shown to the model requires every field, so constrained decoding makes even a small model
    write each one; validation lets a missing rationale (or merged_from) pass."""

    model_config = ConfigDict(json_schema_extra=_all_required)


Experience = Annotated[
    str,
    *_bounded(
        MAX_EXPERIENCE_CHARS,
        'one sentence, in the language of the task: "When <condition>, <strategy>."',
        EXPERIENCE_PATTERN,
    ),
]
Rationale = Annotated[str, *_bounded(200, "why, in one short sentence")]
ExperienceId = Annotated[str, BeforeValidator(clean_id), Field(description="an id of the existing library")]


SUMMARY_MAX_CHARS = 1000


class AttemptSummary(BaseModel):
    summary: Annotated[str, *_bounded(SUMMARY_MAX_CHARS, "step-by-step summary of the attempt, brief")]


class GroupAdvantage(BaseModel):
    # problem_kind comes before the experiences, so a constrained model names the kind of problem in general
    # words before it writes a condition (the 1.5B's conditions otherwise retold their question).
    model_config = ConfigDict(json_schema_extra=_all_required)
    analysis: Annotated[
        str, *_bounded(600, "which attempts were better or worse, and how their methods differed, briefly")
    ]
    problem_kind: Annotated[
        str, *_bounded(150, "the kind of problem, in general words: no name, object or number of the question")
    ] = ""
    experiences: list[Experience] = Field(
        max_length=MAX_EXPERIENCES, description='each "When <condition>, <strategy>." (or "<topic>: <strategy>.")'
    )

    @field_validator("experiences", mode="before")
    @classmethod
    def _at_most(cls, v: object) -> object:
        return v[:MAX_EXPERIENCES] if isinstance(v, list) else v


RESTATED_KIND_CHARS = 120


class Restated(BaseModel):
    """A refused proposal's strategy, restated apart from its kind of problem (asked for one sentence, the 1.5B
    copied the refused one): the experience is Youtu-Agent's "<kind>: <strategy>." form, in any language."""

    model_config = ConfigDict(json_schema_extra=_all_required)
    problem_kind: Annotated[
        str,
        *_bounded(
            RESTATED_KIND_CHARS,
            "the kind of problem, in general words: no name, object or number of the question",
            r'^[^"\n{}:：]+$',
        ),
    ]
    strategy: Annotated[
        str,
        *_bounded(
            MAX_EXPERIENCE_CHARS - RESTATED_KIND_CHARS - 3,  # ": " and the final period: the whole fits max_chars
            "what to do on any problem of that kind: no name, object or number of the question",
            r'^[^"\n]+$',
        ),
    ]

    @property
    def experience(self) -> str:
        """'<Kind>: <strategy>.' on one line, or "" when either part is blank."""
        kind = " ".join(self.problem_kind.split()).rstrip(".:：。")
        strategy = " ".join(self.strategy.split())
        if not kind or not strategy:
            return ""
        end = "" if strategy[-1] in ".!?。！？" else "."
        return f"{kind[0].upper()}{kind[1:]}: {strategy}{end}"


class Add(_Op):
    operation: Literal["ADD"]
    content: Experience
    rationale: Rationale = ""

    def to_operation(self) -> Operation:
        return Operation(operation="ADD", content=self.content, rationale=self.rationale)


class Update(_Op):
    operation: Literal["UPDATE"]
    id: ExperienceId
    content: Experience
    rationale: Rationale = ""

    def to_operation(self) -> Operation:
        return Operation(operation="UPDATE", id=self.id, content=self.content, rationale=self.rationale)


class Delete(_Op):
    operation: Literal["DELETE"]
    id: ExperienceId
    rationale: Rationale = ""

    def to_operation(self) -> Operation:
        return Operation(operation="DELETE", id=self.id, rationale=self.rationale)


class Keep(_Op):
    operation: Literal["NONE"]
    rationale: Rationale = ""

    def to_operation(self) -> Operation:
        return Operation(operation="NONE", rationale=self.rationale)


def _upper_kinds(items: object) -> object:
    """ "add" and " Add" are ADD: the kind decides which shape an item is validated against. Beyond
    `MAX_OPERATIONS` items are dropped (the schema's bound, for endpoints that do not enforce it)."""
    if isinstance(items, list):
        return [
            {**item, "operation": item["operation"].strip().upper()}
            if isinstance(item, dict) and isinstance(item.get("operation"), str)
            else item
            for item in items[:MAX_OPERATIONS]
        ]
    return items


class OperationList(BaseModel):
    operations: list[Add | Update | Delete | Keep] = Field(max_length=MAX_OPERATIONS)

    @field_validator("operations", mode="before")
    @classmethod
    def _kinds(cls, v: object) -> object:
        return _upper_kinds(v)

    def to_operations(self) -> list[Operation]:
        return [op.to_operation() for op in self.operations]


class MergedFrom(_Op):
    merged_from: list[int] = Field(default_factory=list, description="numbers of the proposed operations it covers")


class MergedAdd(Add, MergedFrom):
    pass


class MergedUpdate(Update, MergedFrom):
    pass


class MergedDelete(Delete, MergedFrom):
    pass


class ConsolidatedList(BaseModel):
    operations: list[MergedAdd | MergedUpdate | MergedDelete] = Field(max_length=MAX_OPERATIONS)

    @field_validator("operations", mode="before")
    @classmethod
    def _kinds(cls, v: object) -> object:
        return _upper_kinds(v)
