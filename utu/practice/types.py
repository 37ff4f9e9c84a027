"""What the practice modules hand each other: the learner's view of an attempt and of a group's outcome."""

from dataclasses import dataclass, field
from typing import Any

from utu.practice.library import ProposedOp


@dataclass
class Attempt:
    """One judged attempt, as the learner sees it."""

    dataset_index: int
    question: str
    answer: str | None
    response: str | None
    trajectory: list[dict[str, Any]]
    reward: float | None  # None: the attempt failed (no response)
    critique: str | None = None


@dataclass
class LearnerFailure:
    stage: str
    dataset_index: int | None
    error: str
    raw_reply: str | None = None


@dataclass
class GroupOutcome:
    dataset_index: int
    used: bool
    skip_reason: str | None = None
    proposed: list[ProposedOp] = field(default_factory=list)
    failures: list[LearnerFailure] = field(default_factory=list)
