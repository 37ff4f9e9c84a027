"""Combine libraries learned on different data into one, stored as a new experiment.

Every experience of the given libraries becomes an ADD (its provenance: experiment, step, old id); the
learner consolidates them as it consolidates a practice step's operations (same prompt and schema: ADDs that
say the same thing become one); then they are applied to an empty library: a source's text as its run kept it
(with the screening's duplicate check only, so a near-duplicate the learner kept is still refused), and a text
the learner wrote in merging screened as a learned one is. New ids are G0, G1, ... The result is stored as step 0
of experiment `name`, with one operation row per experience saying where it came from.
"""

import time

from utu.app import Claim, claim_experiment
from utu.config.models import PracticeArguments
from utu.db import Database
from utu.errors import ConfigError, RunFailed
from utu.llm.client import LLMClient
from utu.practice.experience_updater import ExperienceUpdater
from utu.practice.initial import library_at
from utu.practice.library import Library, Operation, ProposedOp, apply_operations
from utu.practice.outcomes import Refusal, Refused
from utu.practice.screening import Source, repeated, verdict
from utu.practice.store import PracticeStore
from utu.practice.types import GroupOutcome, LearnerFailure, StepStats

MERGE_OBJECTIVES = PracticeArguments(
    agent_objective="Answer the questions of both source tasks correctly.",
    learning_objective="Keep every distinct strategy; merge the ones that say the same thing into one.",
)


async def merge(
    db: Database, refs: list[tuple[str, str | int]], name: str, learner: LLMClient | None, stack
) -> tuple[Library, int]:
    """The merged library and how many of the sources' experiences it dropped as duplicates."""
    if await PracticeStore(db, name).steps():
        raise ConfigError(f"merge --to {name}: experiment {name!r} exists already; choose another name")
    await claim_experiment(stack, db, Claim(name, "practice", {"merge": [f"{e}@{s}" for e, s in refs]}))
    origins, proposed = [], []
    for exp_id, which in refs:
        library, step = await library_at(db, exp_id, which, f"merge {exp_id}@{which}")
        for key, text in library.experiences.items():
            origins.append(f"{exp_id}@{step} {key}")
            op = Operation(operation="ADD", content=text, rationale=f"from {origins[-1]}")
            proposed.append(ProposedOp(op, [len(origins) - 1]))  # the index of its origin
    sources = {(p.op.content or "").strip() for p in proposed}  # (as the check sees them)
    start = time.perf_counter()
    failures: list[LearnerFailure] = []
    if learner is not None and len(proposed) > 1:
        updater = ExperienceUpdater(learner, MERGE_OBJECTIVES)
        groups = [GroupOutcome(dataset_index=i, used=True, proposed=[p]) for i, p in enumerate(proposed)]
        proposed = await updater.consolidate(Library(), groups, failures)
        if failures:  # not the merge that was asked for: store nothing rather than the sources unmerged
            raise RunFailed(
                f"merge --to {name}: the learner could not consolidate ({failures[0].error[:200]}); nothing was "
                "stored: run it again, or pass --no_llm to drop exact and near duplicates by rule only"
            )
    for p in proposed:  # provenance from the origins each (possibly merged) ADD came from
        p.op.rationale = "from " + " + ".join(origins[i] for i in p.source_questions if 0 <= i < len(origins))
        p.source_questions = []

    def check(text: str, _: list[int], others: list[str]) -> Refused | None:
        if text not in sources:  # the learner's own words: no run's screening has seen them
            return verdict(text, Source(), others)
        reason = repeated(text, others)
        return Refused(Refusal.REPEATS_LIBRARY, reason) if reason else None

    merged, records = apply_operations(Library(), proposed, screen=check)
    stats = StepStats(
        step=0,
        epoch=0,
        batch=0,
        group_size=0,
        questions=0,
        attempts=0,
        attempts_failed=0,
        mean_at_g=0.0,
        pass_at_g=0.0,
        groups_used=0,
        groups_skipped=0,
        library_size=len(merged.experiences),
        operations={"ADD": len(merged.experiences), "UPDATE": 0, "DELETE": 0},
        operations_refused=sum(r.status == "refused" for r in records),
        learner_errors=len(failures),
        usage={},
        wall_time=time.perf_counter() - start,
    )
    await PracticeStore(db, name).save_step(0, 0, 0, merged, records, failures, stats)
    return merged, len(origins) - len(merged.experiences)
