"""What became of a proposal: applied, or refused for a reason of a kind.

The kind is what the code decides by (the learner's second look, the step's statistics, queries of the database's
`experience_operations.refusal` column); the detail is for people. The text a user reads in the operation log is
rendered from the two, with the prefixes the log has always had ("junk: ", "validation: ", "validation: alone, ").
"""

from dataclasses import dataclass
from enum import StrEnum


class Refusal(StrEnum):
    NO_CONTENT = "no_content"  # an ADD or UPDATE without text
    SCREENED = "screened"  # the screening: not a general rule (its shape, its question's particulars, a fact)
    ANSWER_IN_TEXT = "answer_in_text"  # the screening: it gives its question's answer
    REPEATS_LIBRARY = "repeats_library"  # the screening: it says what the library (or the update) already holds
    REFUSED_AGAIN = "refused_again"  # a second look proposed a text refused earlier in the step
    DUPLICATE = "duplicate"  # the very text is in the library
    LIBRARY_FULL = "library_full"  # max_experiences reached
    UNKNOWN_ID = "unknown_id"  # a DELETE or UPDATE of an id the library does not hold
    DELETE_WINS = "delete_wins"  # an UPDATE of an id the same update deletes
    GATE = "gate"  # the validation gate refused the update it was part of
    GATE_ALONE = "gate_alone"  # validated alone (`validation.one_by_one`), it did not pass

    @property
    def by_screening(self) -> bool:
        """Refused by the library's screening, before any validation (a step's `operations_junk`)."""
        return self in SCREENING

    @property
    def for_what_it_says(self) -> bool:
        """Refused for its text, not for the library's state or another operation: a second look that proposes
        it again is refused before validation."""
        return self in (Refusal.SCREENED, Refusal.ANSWER_IN_TEXT, Refusal.REFUSED_AGAIN, Refusal.GATE_ALONE)


SCREENING = frozenset({Refusal.SCREENED, Refusal.ANSWER_IN_TEXT, Refusal.REPEATS_LIBRARY, Refusal.REFUSED_AGAIN})
JUNK = "junk: "
GATE_PREFIX = "validation: "
_PREFIX = {Refusal.GATE: GATE_PREFIX, Refusal.GATE_ALONE: GATE_PREFIX + "alone, "} | {k: JUNK for k in SCREENING}


@dataclass(frozen=True)
class Refused:
    kind: Refusal
    detail: str

    def render(self) -> str:
        """The reason as the operation log states it."""
        return _PREFIX.get(self.kind, "") + self.detail

    @classmethod
    def stored(cls, kind: str, reason: str | None) -> "Refused":
        """A refusal as the database holds it: its kind, and the reason rendered from it."""
        refusal = Refusal(kind)
        return cls(refusal, (reason or "").removeprefix(_PREFIX.get(refusal, "")))
