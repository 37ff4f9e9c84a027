"""The validation gate (`practice.validation`): a step's update replaces the library only if, on the same
validation questions, it does not score worse than the current library by more than `max_drop` and, if it grows
the library, scores better by more than `min_gain_to_grow`; when it refuses an update, the additions are tried
alone (`one_by_one`), so a right rule is not lost beside a bad or trivial one."""

import hashlib
import json
import logging
import statistics

from utu.agents.agent import Agent
from utu.config.models import DataConfig, TrainingFreeGRPOConfig, ValidationConfig
from utu.db.engine import Database
from utu.eval.metrics import ScoredAttempt, compare
from utu.eval.outcome import check_attempts
from utu.eval.runner import evaluate_inside
from utu.practice.library import Library, OpRecord, with_additions
from utu.practice.outcomes import Refusal
from utu.practice.store import VALIDATION_INFIX
from utu.practice.types import StepValidation
from utu.tracing.spans import CHAIN, span
from utu.verify import Verifier

log = logging.getLogger(__name__)


class ValidationGate:
    def __init__(self, config: TrainingFreeGRPOConfig, db: Database, agent: Agent, verifier: Verifier):
        assert config.practice.validation is not None
        self.config, self.v, self.db, self.agent, self.verifier = (
            config,
            config.practice.validation,
            db,
            agent,
            verifier,
        )
        self.cap = config.practice.max_experiences

    async def decide(
        self, current: Library, proposed: Library, records: list[OpRecord], alone_left: int
    ) -> tuple[Library, StepValidation, int]:
        """The library kept, the validation that decided, and how many additions are left to try alone this
        step; marks each record the gate refused."""
        validation = await self.validate(current, proposed)
        if validation.accepted:
            return proposed, validation, alone_left
        return await self.one_by_one(current, proposed, records, validation, alone_left)

    async def one_by_one(
        self, current: Library, proposed: Library, records: list[OpRecord], refused: StepValidation, alone_left: int
    ) -> tuple[Library, StepValidation, int]:
        """After the gate refused `proposed` whole: the experiences it adds validated alone against `current`, as
        many as the step has left (`alone_left`) and the library has room for; those that pass are kept together if
        together they pass, else the one that gained most. Its UPDATEs and DELETEs stay refused with the whole
        (alone, a rewrite or a deletion passes on a tie). A right rule refused beside trivial ones was lost that way
        (docs/results.md)."""
        changes = [r for r in records if r.status == "applied"]
        # no room when an initial library is already over the cap
        room = len(changes) if self.cap is None else max(0, self.cap - len(current.experiences))
        adds = [r for r in changes if r.kind == "ADD"][: min(alone_left, room)] if len(changes) > 1 else []
        for r in changes:
            if not any(r is a for a in adds):
                r.refuse(Refusal.GATE, refused.reason)
        passed: list[tuple[OpRecord, StepValidation]] = []
        for r in adds:
            alone = await self.validate(current, with_additions(current, [r], proposed.next_id))
            if alone.accepted:
                passed.append((r, alone))
            else:
                r.refuse(Refusal.GATE_ALONE, alone.reason)
        if not passed:
            return current, refused, alone_left - len(adds)
        kept, decided = [passed[0][0]], passed[0][1]
        if len(passed) > 1:
            together = await self.validate(current, with_additions(current, [r for r, _ in passed], proposed.next_id))
            if together.accepted:
                kept, decided = [r for r, _ in passed], together
            else:
                best, decided = max(passed, key=lambda p: p[1].difference)
                kept = [best]
                for r, _ in passed:
                    if r is not best:
                        r.refuse(Refusal.GATE, f"passed alone, not with the others: {together.reason}")
        how = f"kept {len(kept)} of {len(adds)} additions tried alone; the whole update: {refused.difference:+.3f}"
        decided = decided.model_copy(update={"reason": f"{decided.reason}; {how}"})
        return with_additions(current, kept, proposed.next_id), decided, alone_left - len(adds)

    async def validate(self, current: Library, proposed: Library) -> StepValidation:
        """Both libraries on the same validation questions; `gate` decides."""
        v = self.v
        with span("validation", CHAIN, **{"questions": v.size, "pass_k": v.pass_k}):
            before = await self._validation_rows(current)
            after = await self._validation_rows(proposed)
        result = compare(before, after)
        current_mean = statistics.fmean(a for _, a, _ in result.rows) if result.rows else 0.0
        accepted, rule = gate(result.mean_diff, len(current.experiences), len(proposed.experiences), v)
        difference = round(result.mean_diff, 9)
        reason = (
            f"Mean@{v.pass_k} {current_mean:.3f} -> {current_mean + difference:.3f} on {len(result.rows)} "
            f"validation questions (paired difference {difference:+.3f}, {rule})"
        )
        log.info("validation: %s: update %s", reason, "applied" if accepted else "rejected")
        return StepValidation(
            k=v.pass_k,
            questions=len(result.rows),
            current=current_mean,
            proposed=current_mean + difference,
            difference=difference,
            difference_ci95=result.ci95,
            accepted=accepted,
            reason=reason,
        )

    async def _validation_rows(self, library: Library) -> list[ScoredAttempt]:
        """A library's attempts at the validation questions, kept under an exp_id named by its content, so the
        current library (usually the last step's proposal) is never evaluated twice."""
        v = self.v
        digest = hashlib.sha256(json.dumps(sorted(library.experiences.items())).encode()).hexdigest()[:12]
        config = self.config.evaluation.model_copy(
            update={
                "exp_id": f"{self.config.exp_id}{VALIDATION_INFIX}{digest}",
                "pass_k": v.pass_k,
                "data": DataConfig(dataset=v.dataset, offset=v.offset, limit=v.size),
            }
        )
        rows = await evaluate_inside(
            config, self.db, self.agent, self.verifier, library.experiences, self.config.exp_id, tag="validation"
        )
        check_attempts(rows, self.config.evaluation.max_failed_share, "validation")
        return [ScoredAttempt.from_row(r) for r in rows]


def gate(mean_diff: float, size_before: int, size_after: int, v: ValidationConfig) -> tuple[bool, str]:
    """Whether a proposed library replaces the current one, and the rule that decided. The difference is
    rounded first: a mean of per-question differences at K=3 leaves a tie as +-5e-17."""
    difference = round(mean_diff, 9)
    if size_after > size_before and v.min_gain_to_grow is not None:
        rule = f"{size_before} -> {size_after} experiences must gain more than {v.min_gain_to_grow:g}"
        return difference >= -v.max_drop and difference > v.min_gain_to_grow, rule
    return difference >= -v.max_drop, f"allowed drop {v.max_drop:g}"
