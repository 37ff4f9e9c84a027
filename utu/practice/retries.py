"""The learner's second look (`practice.learner_retries`): when every proposal of a step was refused, the learner
compares the step's groups again; what it is shown of the refusals, and which texts are refused again before
validation."""

import re
from collections.abc import Sequence

from utu.config.models import PracticeArguments, ScreeningConfig
from utu.practice.library import OpRecord
from utu.practice.outcomes import Refusal, Refused
from utu.practice.screening import ANSWER_REFUSED, similarity

LEARNER_RETRY = "learner retry"  # how a second look's proposals' rationale begins, for people
REFUSED_AGAIN = "proposed again after its refusal earlier in this step"


def look_again(tries: int, latest: list[OpRecord], p: PracticeArguments, over_budget: bool) -> bool:
    """Whether the learner compares the step's groups again: in its latest try it proposed changes and every one
    was refused, and retries and budget are left."""
    refused = bool(latest) and all(r.status == "refused" for r in latest)
    return refused and tries <= p.learner_retries and not over_budget


def mark_second_look(records: list[OpRecord], tries: int) -> None:
    for r in records:
        r.learner_try = tries
        r.rationale = f"{LEARNER_RETRY} {tries}" + (f": {r.rationale}" if r.rationale else "")


def refusals_for_learner(records: list[OpRecord], answers_shown: bool) -> list[str]:
    """The step's refused proposals, each with why, for the learner's second look. A text proposed twice is shown
    once, with its first reason (later copies were refused as its repeats). A learner practising without the
    ground truth is not shown a text refused for giving its question's answer: that would tell it the answer."""
    why: dict[str, Refused] = {}
    for r in records:
        if r.status == "refused" and r.new_text and r.refusal and r.new_text not in why:
            why[r.new_text] = r.refusal
    return [
        f"{text} (refused: {for_learner(refused)})"
        for text, refused in why.items()
        if answers_shown or refused.kind != Refusal.ANSWER_IN_TEXT
    ]


# The config knob or word list a screening reason names: for the user, not the learner.
_KNOB_NOTE = re.compile(r"\s*\([^()]*(?:practice\.|\.yaml)[^()]*\)")


def for_learner(refused: Refused) -> str:
    """Why, as the learner is told: not the answer itself (a learner practising without the ground truth never
    sees it), nor an earlier text it quotes (which may be one not shown), nor the config's knobs."""
    if refused.kind == Refusal.GATE_ALONE:
        return "it did not raise the agent's score on the validation questions enough"
    if refused.kind == Refusal.GATE:  # the gate judges a step's update as a whole
        return "the update it was part of did not raise the agent's score on the validation questions enough"
    if refused.kind == Refusal.ANSWER_IN_TEXT:
        return ANSWER_REFUSED
    if refused.kind == Refusal.REFUSED_AGAIN:
        return REFUSED_AGAIN
    return _KNOB_NOTE.sub("", refused.detail) or "refused"


def refused_for_what_they_say(records: list[OpRecord]) -> list[str]:
    """The texts of one try's update refused for what they say: by the screening (not for repeating what the
    library or the update already held), or by the gate as the update's only text or alone. Not a text the gate
    refused with others (it may be the good one of them), nor one refused for the library's state or another
    operation (library full; a DELETE of the same id), which may pass alone or as an UPDATE."""
    gated = [r for r in records if r.refusal and r.refusal.kind in (Refusal.GATE, Refusal.GATE_ALONE)]
    said = []
    for r in records:
        for_the_text = r.refusal is not None and r.refusal.kind.for_what_it_says
        if r.status == "refused" and r.new_text and (for_the_text or gated == [r]):
            said.append(r.new_text)
    return said


def refused_again(text: str, refused_before: Sequence[str], config: ScreeningConfig) -> Refused | None:
    """Why a second look's proposal is refused without validation: it repeats a text refused earlier in its step
    for what it says (`refused_for_what_they_say`), word for word or, with the screening on, nearly. The small
    learner, shown its refusals, has proposed one again word for word; a fresh sample, too, can repeat itself."""
    for earlier in refused_before:
        if text == earlier or (config.enabled and similarity(text, earlier) >= config.near_duplicate):
            return Refused(Refusal.REFUSED_AGAIN, f"{REFUSED_AGAIN} ({earlier[:60]!r})")
    return None
