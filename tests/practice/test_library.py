"""Applying learner operations: stable ids, refusals, DELETE over UPDATE, the size cap, id normalisation."""

import pytest

from utu.practice.library import Library, Operation, ProposedOp, apply_operations
from utu.practice.outcomes import Refusal, Refused


def ops(*items: dict) -> list[ProposedOp]:
    return [ProposedOp(Operation(**item), [i]) for i, item in enumerate(items)]


def test_ids_are_never_renumbered():
    lib, _ = apply_operations(
        Library(), ops({"operation": "ADD", "content": "a"}, {"operation": "ADD", "content": "b"})
    )
    lib, _ = apply_operations(lib, ops({"operation": "DELETE", "id": "G0"}, {"operation": "ADD", "content": "c"}))
    assert lib.experiences == {"G1": "b", "G2": "c"} and lib.next_id == 3


def test_an_update_of_an_unknown_id_is_an_add_and_a_delete_of_one_is_refused():
    lib = Library({"G0": "a"}, 1)
    new, records = apply_operations(
        lib, ops({"operation": "UPDATE", "id": "G7", "content": "x"}, {"operation": "DELETE", "id": "G8"})
    )
    assert new.experiences == {"G0": "a", "G1": "x"}
    assert [(r.kind, r.experience_id, r.status) for r in records] == [
        ("ADD", "G1", "applied"),
        ("DELETE", "G8", "refused"),
    ]
    assert records[0].reason == "proposed as UPDATE of 'G7', which is not in the library"
    assert records[1].reason == "unknown id 'G8'"


def test_screening_refuses_junk_with_its_reason_and_sees_the_other_experiences():
    seen = []

    def screen(text, sources, others):
        seen.append((text, sources, others))
        return Refused(Refusal.SCREENED, "copies its question") if text == "junk" else None

    lib = Library({"G0": "a", "G1": "b"}, 2)
    new, records = apply_operations(
        lib,
        ops({"operation": "ADD", "content": "junk"}, {"operation": "UPDATE", "id": "G1", "content": "b2"}),
        None,
        screen,
    )
    assert new.experiences == {"G0": "a", "G1": "b2"}
    assert (records[0].status, records[0].reason) == ("refused", "junk: copies its question")
    assert records[0].refusal.kind == Refusal.SCREENED
    assert seen == [("junk", [0], ["a", "b"]), ("b2", [1], ["a"])]  # an update is not compared with itself


def test_delete_needs_only_its_id_and_wins_over_update():
    lib = Library({"G0": "a", "G1": "b"}, 2)
    new, records = apply_operations(
        lib, ops({"operation": "UPDATE", "id": "G0", "content": "a2"}, {"operation": "DELETE", "id": "G0"})
    )
    assert new.experiences == {"G1": "b"}
    assert [(r.kind, r.status) for r in records] == [("UPDATE", "refused"), ("DELETE", "applied")]
    assert records[0].reason == "a DELETE of the same id wins over UPDATE"


def test_the_cap_refuses_adds_beyond_max_experiences():
    new, records = apply_operations(Library(), ops(*({"operation": "ADD", "content": f"x{i}"} for i in range(3))), 2)
    assert len(new.experiences) == 2 and records[2].reason == "library full (max_experiences=2)"


def test_ids_as_models_write_them_are_normalised():
    assert Operation(operation="update", id="[G3]").id == "G3" and Operation(operation="DELETE", id=4).id == "G4"
    assert Operation(operation="NONE", id="").id is None


def test_empty_and_duplicate_adds_are_refused_and_none_is_ignored():
    lib = Library({"G0": "a"}, 1)
    new, records = apply_operations(
        lib, ops({"operation": "ADD", "content": " "}, {"operation": "ADD", "content": "a"}, {"operation": "NONE"})
    )
    assert new.experiences == {"G0": "a"} and [r.reason for r in records] == [
        "ADD without content",
        "duplicate of an existing experience",
    ]
    assert records[0].source_questions == [0]
    assert lib.experiences == {"G0": "a"}  # the input library is not modified


@pytest.mark.parametrize("claimed", [[0, 1], [0, 1, 2]])  # silent about 2, or "merging" it into an unlike text
async def test_consolidation_merges_but_never_drops_a_proposal(stub, claimed):
    import json

    from tests.conftest import client_for
    from utu.config.models import PracticeArguments
    from utu.llm.stub import StubScript
    from utu.practice.experience_updater import ExperienceUpdater
    from utu.practice.library import Operation, ProposedOp
    from utu.practice.types import GroupOutcome

    texts = ["When adding, carry the tens.", "When adding, carry tens over.", "When dividing, check the remainder."]
    merged = {"operations": [{"operation": "ADD", "content": texts[0], "merged_from": claimed}]}
    server = stub(StubScript(replies=['{"ok": true}', json.dumps(merged)]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    proposals = [ProposedOp(Operation(operation="ADD", content=t), [i]) for i, t in enumerate(texts)]
    groups = [GroupOutcome(dataset_index=i, used=True, proposed=[p]) for i, p in enumerate(proposals)]
    out = await updater.consolidate(Library(), groups, [])
    assert [(p.op.content, p.source_questions) for p in out] == [(texts[0], [0, 1]), (texts[2], [2])]


async def test_a_consolidated_copy_without_merged_from_covers_what_it_copies(stub):
    """Seen in a demo (130ea09): the 1.5B returned five of the step's proposals word for word with no merged_from;
    each text then went to the screening twice, once with no question of its own."""
    import json

    from tests.conftest import client_for
    from utu.config.models import PracticeArguments
    from utu.llm.stub import StubScript
    from utu.practice.experience_updater import ExperienceUpdater
    from utu.practice.library import Operation, ProposedOp
    from utu.practice.types import GroupOutcome

    texts = ["When adding, carry the tens.", "When dividing, check the remainder."]
    copied = {"operations": [{"operation": "ADD", "content": texts[1]}]}
    server = stub(StubScript(replies=['{"ok": true}', json.dumps(copied)]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    proposals = [ProposedOp(Operation(operation="ADD", content=t), [i]) for i, t in enumerate(texts)]
    groups = [GroupOutcome(dataset_index=i, used=True, proposed=[p]) for i, p in enumerate(proposals)]
    out = await updater.consolidate(Library(), groups, [])
    assert [(p.op.content, p.source_questions) for p in out] == [(texts[1], [1]), (texts[0], [0])]


async def test_a_failed_restatement_leaves_the_proposal_as_it_was(stub):
    from tests.conftest import client_for
    from utu.config.models import PracticeArguments
    from utu.llm.stub import StubScript
    from utu.practice.experience_updater import ExperienceUpdater
    from utu.practice.library import Operation, ProposedOp
    from utu.practice.screening import Question

    story = ProposedOp(Operation(operation="ADD", content="When Tom adds 12 and 30, carry."), [0])
    clean = ProposedOp(Operation(operation="ADD", content="When adding, carry the tens."), [1])
    server = stub(StubScript(replies=['{"ok": true}', "not json", "still not json"]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    failures = []

    def told(text, sources):
        return "names 3 particulars of its question (Tom, 12)" if "Tom" in text else None

    questions = {0: Question("Tom adds 12 and 30.", "42"), 1: Question("Add 5 and 6.", "11")}
    out = await updater.restate([story, clean], told, questions, failures)
    assert [p.op.content for p in out] == [story.op.content, clean.op.content]
    assert [(f.stage, f.dataset_index) for f in failures] == [("restate", 0)]
