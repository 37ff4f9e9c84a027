"""Validation-gated updates against stub LLMs: an update that makes the agent worse on the validation questions
is not applied, a harmless one is; the best step can be exported; validation's cost is counted apart."""

import json
import re
from collections import defaultdict

from tests.conftest import run_script
from tests.practice.helpers import (
    QUESTIONS,
    WORKING,
    evolving_learner,
    is_probe,
    query,
    run_practice,
    schema_of,
    setup_workspace,
)
from utu.config.models import ValidationConfig
from utu.llm.stub import StubScript
from utu.practice.gate import gate
from utu.practice.library import OpRecord
from utu.practice.outcomes import Refusal, Refused
from utu.practice.retries import REFUSED_AGAIN, refusals_for_learner, refused_for_what_they_say

HARMFUL = "When adding two numbers, always answer zero instead of computing the sum."
HARMLESS = "When adding two numbers, add the ones digits first and then the tens."
HELPFUL = "When adding two numbers, write both numbers before you add them."
ALSO_HELPFUL = "Sum of two numbers: line up their digits by place value, then add column by column."
VALIDATION = ["--validation_dataset", "ArithVal", "--validation_size", "3", "--validation_pass_k", "2"]


def adder(
    harmful: str = HARMFUL, needed: str | tuple[str, ...] | None = None, working: str = "", clash: tuple[str, ...] = ()
) -> StubScript:
    """Right on validation questions (only with a `needed` experience in its instructions, if any are named),
    right then wrong on practice questions (contrast to learn from); always zero once the harmful experience, or
    every one of `clash`, is in its instructions. `working`: written before the answer (long enough, the learner
    summarises it)."""
    needed = (needed,) if isinstance(needed, str) else needed
    served = defaultdict(int)

    def reply(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        a, b = map(int, re.search(r"What is (\d+) plus (\d+)", user).groups())
        practice = any(q in user for q in QUESTIONS)
        served[user] += 1
        lacking = not practice and needed is not None and not any(n in system for n in needed)
        clashing = bool(clash) and all(c in system for c in clash)
        wrong = harmful in system or clashing or lacking or (practice and served[user] % 2 == 0)
        return f"{working}The answer is \\boxed{{{0 if wrong else a + b}}}."

    return StubScript(reply_fn=reply)


def workspace_with_validation_set(tmp_path):
    configs, db_url = setup_workspace(tmp_path)
    data = tmp_path / "val.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"What is {a} plus {a + 10}?", "answer": str(2 * a + 10)}) + "\n"
            for a in (20, 30, 40)
        )
    )
    upload = run_script(
        "scripts/data/upload_dataset.py", "--file_path", str(data), "--dataset_name", "ArithVal", "--db_url", db_url
    )
    assert upload.returncode == 0, upload.stderr
    return configs, db_url


def learner_proposing(text: str) -> StubScript:
    return evolving_learner(
        group_update=lambda library: [{"operation": "ADD", "content": text, "rationale": "r"}], experiences=[text]
    )


def test_an_update_that_makes_the_agent_worse_is_rejected(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    result = run_practice(
        tmp_path, configs, db_url, stub(adder()), stub(learner_proposing(HARMFUL)), "--epochs", "1", *VALIDATION
    )
    assert result.returncode == 2 and "practice learned nothing" in result.stderr  # nothing was kept
    ops = query(db_url, "SELECT step, new_text, status, reason FROM experience_operations ORDER BY id")
    assert ops and all(status == "refused" and text == HARMFUL for _, text, status, _ in ops)
    assert ops[0][3].startswith("validation: Mean@2 1.000 -> 0.000 on 3 validation questions")
    assert query(db_url, "SELECT experiences FROM experience_snapshots ORDER BY step") == [("{}",), ("{}",)]
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert [s["validation"]["accepted"] for s in stats] == [False, False]
    assert stats[0]["validation"]["difference"] == -1.0
    # Step 0 validated both libraries (2 x 3 questions x K=2); step 1 proposed the same: both results reused.
    assert stats[0]["usage"]["validation"]["calls"] == 2 * 3 * 2 and "validation" not in stats[1]["usage"]
    assert "rollout" in stats[0]["usage"]  # rollouts are counted apart from validation
    assert [s["learner_tries"] for s in stats] == [1, 1]  # learner_retries is 0 by default: no second look


def test_a_helpful_update_is_applied_and_the_best_step_is_exported(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        stub(adder(needed=HELPFUL)),
        stub(learner_proposing(HELPFUL)),
        "--epochs",
        "1",
        *VALIDATION,
        "--export_step",
        "best",
    )
    assert result.returncode == 0, result.stderr
    stats = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps ORDER BY step")]
    assert stats[0]["validation"]["accepted"] and stats[0]["validation"]["difference"] == 1.0
    assert stats[1]["validation"] is None  # step 1 proposed the same text again: no change, nothing to validate
    assert (
        "exporting the library of step 0" in result.stderr and "chosen by the in-step evaluation" not in result.stderr
    )
    assert HELPFUL in (tmp_path / "runs/t/enhanced_agent.yaml").read_text()


def test_a_tie_keeps_the_shorter_library_unless_told_otherwise(tmp_path, stub):
    """An added sentence that changes nothing on the validation questions only costs prompt tokens and risks
    what they did not show (an Averages run kept three such sentences on a tie, and lost on held-out questions):
    refused by default; `--validation_min_gain_to_grow none` leaves the decision to max_drop alone."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    learner = stub(learner_proposing(HARMLESS))
    result = run_practice(tmp_path, configs, db_url, stub(adder()), learner, "--epochs", "1", *VALIDATION)
    assert result.returncode == 2 and "practice learned nothing" in result.stderr
    (reason,) = {r for (r,) in query(db_url, "SELECT reason FROM experience_operations")}
    assert reason == (
        "validation: Mean@2 1.000 -> 1.000 on 3 validation questions (paired difference +0.000, 0 -> 1 "
        "experiences must gain more than 0)"
    )

    (again := tmp_path / "again").mkdir()
    configs, db_url = workspace_with_validation_set(again)
    learner, off = stub(learner_proposing(HARMLESS)), ["--validation_min_gain_to_grow", "none"]
    result = run_practice(again, configs, db_url, stub(adder()), learner, "--epochs", "1", *VALIDATION, *off)
    assert result.returncode == 0, result.stderr
    stats = json.loads(query(db_url, "SELECT stats FROM practice_steps ORDER BY step")[0][0])
    assert stats["validation"]["accepted"] and stats["validation"]["difference"] == 0.0
    assert "allowed drop 0" in stats["validation"]["reason"]


def second_thoughts_learner(first: str, again: str) -> StubScript:
    """Proposes `first` from a group's comparison, `again` when the comparison comes back with the step's
    refusals (the second look); merges nothing."""
    return evolving_learner(advantage=lambda prompt: [again if "<refused>" in prompt else first], merge=False)


def test_when_every_proposal_is_refused_the_learner_compares_the_groups_again(tmp_path, stub):
    """`learner_retries`: the gate refuses the first update (harmful), the learner compares the same groups again,
    shown what was refused and why (its summaries kept: stage 1 is not repeated), and its second update (helpful) is
    applied; the current library's validation is reused; the refused first proposals stay in the operations log."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent, learner = stub(adder(needed=HELPFUL, working=WORKING)), stub(second_thoughts_learner(HARMFUL, HELPFUL))
    one_step = ["--epochs", "1", "--batch_size", "4", *VALIDATION]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *one_step, "--learner_retries", "1")
    assert result.returncode == 0, result.stderr
    ops = query(db_url, "SELECT new_text, status, reason, rationale FROM experience_operations ORDER BY id")
    first, retry = ops[:4], ops[4:]
    assert {text for text, *_ in first} == {HARMFUL} and all(status == "refused" for _, status, *_ in first)
    assert first[0][2].startswith("validation: Mean@2 0.000 -> 0.000")  # the agent needs the helpful rule
    assert {text for text, *_ in retry} == {HELPFUL} and all(r.startswith("learner retry 1") for *_, r in retry)
    assert [status for _, status, *_ in retry].count("applied") == 1  # the other three repeat it
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 2 and stats["validation"]["accepted"] and stats["validation"]["difference"] == 1
    assert stats["usage"]["validation"]["calls"] == 3 * 3 * 2  # the empty library's validation was not repeated
    requests = [schema_of(r) for r in learner.requests if not is_probe(r)]
    assert requests.count("AttemptSummary") == 4 * 2 and requests.count("GroupAdvantage") == 4 * 2
    second_looks = [r["messages"][1]["content"] for r in learner.requests if "<refused>" in str(r["messages"])]
    shown = f"\n- {HARMFUL} (refused: the update it was part of did not raise the agent's score on the validation"
    assert len(second_looks) == 4 and all(p.count(HARMFUL) == 1 and shown in p for p in second_looks)
    assert HELPFUL in (tmp_path / "runs/t/enhanced_agent.yaml").read_text()

    (again := tmp_path / "again").mkdir()  # retries are bounded: a learner that never changes its mind
    configs, db_url = workspace_with_validation_set(again)
    reworded = HARMFUL.replace("the sum", "their sum")  # proposed again with a word changed: not validated again
    agent, learner = stub(adder(working=WORKING)), stub(second_thoughts_learner(HARMFUL, reworded))
    result = run_practice(again, configs, db_url, agent, learner, *one_step, "--learner_retries", "2")
    assert result.returncode == 2 and "practice learned nothing" in result.stderr
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 3 and not stats["validation"]["accepted"]
    assert stats["usage"]["validation"]["calls"] == 2 * 3 * 2  # the empty library and HARMFUL's: no third
    ops = query(db_url, "SELECT new_text, status, reason FROM experience_operations ORDER BY id")
    assert len(ops) == 12 and all(status == "refused" for _, status, _ in ops)
    assert all(text == reworded and reason.startswith(f"junk: {REFUSED_AGAIN}") for text, _, reason in ops[4:])
    counted = query(db_url, "SELECT refusal, learner_try, count(*) FROM experience_operations GROUP BY 1, 2 ORDER BY 2")
    assert counted == [("gate", 0, 1), ("repeats_library", 0, 3), ("refused_again", 1, 4), ("refused_again", 2, 4)]


def test_a_second_look_not_shown_the_refusals_is_a_fresh_sample_of_the_same_comparison(tmp_path, stub):
    """`learner_retry_shows_refusals: false` (the embedded 1.5B copies a refused text it is shown): the second
    look's prompts are the first try's, and what it proposes faces the gate as before."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    asked = []

    def advantage(prompt: str) -> list[str]:
        asked.append(prompt)
        return [HARMFUL if len(asked) <= 4 else HELPFUL]

    learner = stub(evolving_learner(advantage=advantage, merge=False))
    flags = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--learner_retries", "1"]
    flags += ["--learner_retry_shows_refusals", "false"]
    result = run_practice(tmp_path, configs, db_url, stub(adder(needed=HELPFUL, working=WORKING)), learner, *flags)
    assert result.returncode == 0, result.stderr
    assert len(asked) == 8 and sorted(asked[4:]) == sorted(asked[:4]) and not any("<refused>" in p for p in asked)
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 2 and stats["validation"]["accepted"]
    assert HELPFUL in (tmp_path / "runs/t/enhanced_agent.yaml").read_text()


def test_a_good_rule_refused_with_a_bad_one_may_come_back_alone(tmp_path, stub):
    """The gate judges an update as a whole: a rule it refused beside a harmful one is no repeat when the second
    look proposes it alone."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    learner = stub(
        evolving_learner(
            advantage=lambda prompt: [HELPFUL] if "<refused>" in prompt else [HARMFUL, HELPFUL], merge=False
        )
    )
    flags = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--learner_retries", "1"]
    result = run_practice(tmp_path, configs, db_url, stub(adder(needed=HELPFUL, working=WORKING)), learner, *flags)
    assert result.returncode == 0, result.stderr
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 2 and stats["validation"]["accepted"]
    applied = query(db_url, "SELECT new_text, rationale FROM experience_operations WHERE status = 'applied'")
    assert len(applied) == 1 and applied[0][0] == HELPFUL and applied[0][1].startswith("learner retry 1")


def ops_of(db_url: str) -> dict[str, tuple[str, str]]:
    """Each proposed text's status and reason in the operation log, as first proposed (its copies from other groups
    are refused as repeats)."""
    first: dict[str, tuple[str, str]] = {}
    for text, status, reason in query(db_url, OPS):
        first.setdefault(text, (status, reason))
    return first


OPS = "SELECT new_text, status, reason FROM experience_operations ORDER BY id"


def test_a_refused_update_keeps_the_changes_that_pass_alone(tmp_path, stub):
    """`validation.one_by_one`: the gate refuses an update whole (a harmful rule beside good ones), then judges
    each change alone and keeps those that pass, together when together they pass, with no second look."""
    one_step = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--learner_retries", "1"]
    one_step += ["--num_experiences_per_query", "3"]
    proposals = [HELPFUL, HARMFUL, ALSO_HELPFUL]
    learner = stub(evolving_learner(advantage=lambda prompt: proposals, merge=False))
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent = stub(adder(needed=(HELPFUL, ALSO_HELPFUL), working=WORKING))
    result = run_practice(tmp_path, configs, db_url, agent, learner, *one_step, "--validation_one_by_one", "3")
    assert result.returncode == 0, result.stderr
    ops = ops_of(db_url)
    assert ops[HELPFUL][0] == ops[ALSO_HELPFUL][0] == "applied"
    assert ops[HARMFUL] == (
        "refused",
        "validation: alone, Mean@2 0.000 -> 0.000 on 3 validation questions "
        "(paired difference +0.000, 0 -> 1 experiences must gain more than 0)",
    )
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 1 and stats["validation"]["accepted"]
    assert stats["validation"]["reason"].startswith("Mean@2 0.000 -> 1.000")  # the two together
    assert stats["validation"]["reason"].endswith("; kept 2 of 3 additions tried alone; the whole update: +0.000")
    assert stats["usage"]["validation"]["calls"] == 6 * 3 * 2  # empty, all three, each alone, the two together
    said = " ".join(result.stderr.split())  # the plan said at the start: rollouts exactly, validation as a bound
    plan = re.search(r"plan: 1 step, at most (\d+) agent attempts \((\d+) rollouts, up to (\d+) validation", said)
    assert plan, said
    most, rollouts, validation = map(int, plan.groups())
    assert rollouts == stats["attempts"] and validation == 7 * 3 * 2  # empty, 2 tries, 3 alone, together
    assert agent.request_count <= most == rollouts + validation
    (library,) = query(db_url, "SELECT experiences FROM experience_snapshots WHERE step = 0")
    assert sorted(json.loads(library[0]).values()) == sorted([HELPFUL, ALSO_HELPFUL])

    (clashing := tmp_path / "clashing").mkdir()  # each helps alone, together they do not: the first is kept
    configs, db_url = workspace_with_validation_set(clashing)
    agent = stub(adder(needed=(HELPFUL, ALSO_HELPFUL), working=WORKING, clash=(HELPFUL, ALSO_HELPFUL)))
    result = run_practice(clashing, configs, db_url, agent, learner, *one_step, "--validation_one_by_one", "3")
    assert result.returncode == 0, result.stderr
    ops = ops_of(db_url)
    assert ops[HELPFUL][0] == "applied" and ops[ALSO_HELPFUL][0] == "refused"
    assert ops[ALSO_HELPFUL][1].startswith("validation: passed alone, not with the others: Mean@2 0.000 -> 0.000")

    (bounded := tmp_path / "bounded").mkdir()  # one single validation per step: the harmful rule, proposed first
    configs, db_url = workspace_with_validation_set(bounded)
    proposals[:] = [HARMFUL, HELPFUL]
    agent = stub(adder(needed=HELPFUL, working=WORKING))
    result = run_practice(bounded, configs, db_url, agent, learner, *one_step, "--validation_one_by_one", "1")
    assert result.returncode == 0, result.stderr
    first_try = [(text, reason) for text, _, reason in query(db_url, OPS) if (reason or "").startswith("valid")]
    assert [(text, reason.split(" Mean@2")[0]) for text, reason in first_try] == [
        (HARMFUL, "validation: alone,"),
        (HELPFUL, "validation:"),  # refused with the whole update, not tried alone
    ]
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    # The second look proposed both again: HARMFUL refused before validation, HELPFUL then the update's only change.
    assert stats["learner_tries"] == 2 and stats["validation"]["accepted"]
    assert stats["usage"]["validation"]["calls"] == 4 * 3 * 2  # empty, both, HARMFUL alone, HELPFUL in the second


def test_only_additions_are_tried_alone_and_only_as_many_as_the_library_has_room_for(tmp_path, stub):
    """A refused update that deletes an experience and adds two: alone, the deletion would pass on a tie, so it stays
    refused with the whole; with `max_experiences` 2 and one experience kept, only the first addition is tried."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    (initial := tmp_path / "initial.json").write_text(json.dumps({"G0": HARMLESS}))
    update = [{"operation": "DELETE", "id": "G0"}] + [{"operation": "ADD", "content": t} for t in (HARMFUL, HELPFUL)]
    learner = stub(evolving_learner(group_update=lambda library: update, merge=False))
    flags = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--validation_one_by_one", "3"]
    flags += ["--max_experiences", "2", "--init_library", str(initial)]
    result = run_practice(tmp_path, configs, db_url, stub(adder(needed=HELPFUL, working=WORKING)), learner, *flags)
    assert result.returncode == 2 and "practice learned nothing" in result.stderr
    first = query(db_url, "SELECT kind, new_text, reason FROM experience_operations ORDER BY id")[:3]
    assert [(kind, text, reason.split(" Mean@2")[0]) for kind, text, reason in first] == [
        ("DELETE", None, "validation:"),
        ("ADD", HARMFUL, "validation: alone,"),
        ("ADD", HELPFUL, "validation:"),  # no room for it alone
    ]
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["usage"]["validation"]["calls"] == 3 * 3 * 2  # the initial library, the update, HARMFUL alone
    (library,) = query(db_url, "SELECT experiences FROM experience_snapshots WHERE step = 0")
    assert json.loads(library[0]) == {"G0": HARMLESS}


def test_a_learner_that_proposes_nothing_is_not_asked_again(tmp_path, stub):
    """The second look is for a step whose proposals were all refused: none when the learner proposed nothing, and
    no third when the second proposed nothing."""
    one_step = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--learner_retries", "3"]
    for name, first in (("silent", []), ("then_silent", [HARMFUL])):
        (where := tmp_path / name).mkdir()
        configs, db_url = workspace_with_validation_set(where)
        learner = stub(evolving_learner(advantage=lambda prompt, first=first: [] if "<refused>" in prompt else first))
        result = run_practice(where, configs, db_url, stub(adder()), learner, *one_step)
        assert result.returncode == 2 and "practice learned nothing" in result.stderr
        (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
        asked = [schema_of(r) for r in learner.requests if not is_probe(r)].count("GroupAdvantage")
        assert (stats["learner_tries"], asked) == ((1, 4) if not first else (2, 8)), name


def test_a_second_look_that_reaches_max_cost_is_dropped_and_the_step_saved(tmp_path, stub):
    """The learner is priced so its first try stays under max_cost and its long second proposals pass it: the
    second look's validation stops on the budget, and the step is saved as the first try left it."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    long_rule = "When adding two numbers, " + "check each digit and the carry again, " * 30 + "then add them."
    learner = stub(second_thoughts_learner(HARMFUL, long_rule))
    priced = [
        "evaluation.agent.model.pricing.input_per_million=1",
        "practice.learner_model.pricing.output_per_million=1000000",  # $1 per token the learner writes
        "--max_cost",
        "600",
    ]
    one_step = ["--epochs", "1", "--batch_size", "4", *VALIDATION, "--learner_retries", "1", *priced]
    result = run_practice(tmp_path, configs, db_url, stub(adder(working=WORKING)), learner, *one_step)
    said = " ".join(result.stderr.split())  # the log wraps its lines
    assert "max_cost reached during the learner's second look; it is not used" in said, result.stderr
    assert result.returncode == 2 and "practice learned nothing" in result.stderr
    (stats,) = [json.loads(s) for (s,) in query(db_url, "SELECT stats FROM practice_steps")]
    assert stats["learner_tries"] == 1 and stats["validation"]["reason"].startswith("Mean@2 1.000 -> 0.000")
    assert {text for (text,) in query(db_url, "SELECT new_text FROM experience_operations")} == {HARMFUL}


def test_export_step_names_a_missing_step_in_one_line(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent = stub(adder())
    result = run_practice(
        tmp_path, configs, db_url, agent, stub(learner_proposing(HARMLESS)), "--epochs", "1", "--export_step", "7"
    )
    assert result.returncode == 2 and "--export_step 7: this practice has steps 0 to 1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and agent.request_count == 0  # refused before any work


def test_export_step_best_of_a_practice_that_proposed_nothing_says_it_learned_nothing(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    silent = evolving_learner(group_update=lambda library: [], experiences=[])
    flags = ("--epochs", "1", *VALIDATION, "--export_step", "best")
    result = run_practice(tmp_path, configs, db_url, stub(adder()), stub(silent), *flags)
    assert result.returncode == 2 and "practice learned nothing" in result.stderr, result.stderr
    assert "set practice.validation" not in result.stderr  # (it is set: no step proposed a change to score)


def test_a_validation_slice_past_the_end_of_its_data_set_is_refused_before_any_work(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent = stub(adder())
    past_the_end = [*VALIDATION, "--validation_offset", "3"]  # ArithVal holds 3 questions
    result = run_practice(tmp_path, configs, db_url, agent, stub(learner_proposing(HELPFUL)), *past_the_end)
    assert result.returncode == 2, result.stderr
    assert "practice.validation: data set 'ArithVal' has no question at offset 3" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and agent.request_count == 0


def test_validation_questions_that_are_practice_questions_too_are_said(tmp_path, stub):
    configs, db_url = setup_workspace(tmp_path)  # Arith: the practice set, 4 questions
    agent, learner = stub(adder(needed=HELPFUL)), stub(learner_proposing(HELPFUL))
    overlapping = ["--validation_dataset", "Arith", "--validation_size", "3", "--validation_offset", "2"]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *overlapping)
    said = " ".join(result.stderr.split())
    assert "practice.validation: Arith questions 2-3 are practice questions too" in said, result.stderr


def test_practice_questions_uploaded_again_under_another_name_are_said_as_validation(tmp_path, stub):
    import json

    from tests.conftest import run_script
    from tests.practice.helpers import QUESTIONS

    configs, db_url = setup_workspace(tmp_path)
    copy = tmp_path / "copy.jsonl"
    copy.write_text("".join(json.dumps({"question": q + " ", "answer": a}) + "\n" for q, a in QUESTIONS.items()))
    upload = ["scripts/data/upload_dataset.py", "--file_path", str(copy), "--dataset_name", "ArithCopy"]
    assert run_script(*upload, "--db_url", db_url).returncode == 0
    agent, learner = stub(adder(needed=HELPFUL)), stub(learner_proposing(HELPFUL))
    copied = ["--validation_dataset", "ArithCopy", "--validation_size", "3"]
    result = run_practice(tmp_path, configs, db_url, agent, learner, *copied)
    said = " ".join(result.stderr.split())
    assert "practice.validation: 3 of its 3 questions (ArithCopy) are practice questions too (Arith" in said, said


def test_a_validation_set_replaced_under_the_same_name_is_not_reused_on_resume(tmp_path, stub):
    """The gate's stored attempts were judged against the old answers: resuming on new ones is refused, as a
    replaced practice set is."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent, learner = stub(adder(needed=HELPFUL)), stub(learner_proposing(HELPFUL))
    assert run_practice(tmp_path, configs, db_url, agent, learner, *VALIDATION).returncode == 0
    wrong = tmp_path / "val_wrong.jsonl"
    wrong.write_text(
        "".join(json.dumps({"question": f"What is {a} plus {a + 10}?", "answer": "1"}) + "\n" for a in (20, 30, 40))
    )
    argv = ["--file_path", str(wrong), "--dataset_name", "ArithVal", "--db_url", db_url, "--replace"]
    assert run_script("scripts/data/upload_dataset.py", *argv).returncode == 0
    again = run_practice(tmp_path, configs, db_url, agent, learner, *VALIDATION, "--restart_step", "0")
    assert again.returncode == 2 and "changed: practice.validation.content.sha256" in again.stderr


def test_a_verifier_edited_in_place_is_not_taken_as_the_same_practice_on_resume(tmp_path, stub):
    """Its steps learned from the rewards the old verifier gave: resuming under the edited one is refused."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    verify = tmp_path / "my_verify.py"
    judge = (
        "def verify_func(sample, timeout_score=0, **kw):\n"
        "    return {'reward': float(sample.response.endswith('{' + sample.correct_answer + '}.'))}\n"
    )
    verify.write_text(judge)
    agent, learner = stub(adder(needed=HELPFUL)), stub(learner_proposing(HELPFUL))
    mine = [*VALIDATION, f"evaluation.verify_filename={verify}"]
    assert run_practice(tmp_path, configs, db_url, agent, learner, *mine).returncode == 0
    verify.write_text(judge + "# edited\n")
    again = run_practice(tmp_path, configs, db_url, agent, learner, *mine, "--restart_step", "0")
    assert again.returncode == 2 and "changed: evaluation.verify_file_sha256" in again.stderr, again.stderr


def test_fresh_forgets_the_enhanced_agent_of_the_run_it_forgets(tmp_path, stub):
    """A fresh run that learns nothing leaves no enhanced agent of the forgotten run to be evaluated as its own."""
    configs, db_url = workspace_with_validation_set(tmp_path)
    agent = stub(adder(needed=HELPFUL))
    assert run_practice(tmp_path, configs, db_url, agent, stub(learner_proposing(HELPFUL)), *VALIDATION).returncode == 0
    exported = [tmp_path / "runs/t/enhanced_agent.yaml", configs / "agents/practice/t_agent.yaml"]
    assert all(HELPFUL in path.read_text() for path in exported)
    (tmp_path / "runs/t/notes.txt").write_text("mine")
    (tmp_path / "runs/u").mkdir()
    (tmp_path / "runs/u/report.md").write_text("# my own report\n")  # a folder practice did not write
    fresh = run_practice(tmp_path, configs, db_url, agent, stub(learner_proposing(HARMFUL)), *VALIDATION, "--fresh")
    assert fresh.returncode == 2 and "practice learned nothing" in fresh.stderr, fresh.stderr
    assert not any(path.exists() for path in exported)
    assert (tmp_path / "runs/t/notes.txt").read_text() == "mine"  # only what practice writes goes
    from utu.practice.export import forget_outputs

    forget_outputs("u", tmp_path / "runs/u", None)
    assert (tmp_path / "runs/u/report.md").read_text() == "# my own report\n"


def test_the_gate_reads_a_tie_at_any_k_as_a_tie():
    """At K=3 per-question differences are thirds, and their mean leaves a tie as +-5e-17: still a tie."""
    v = ValidationConfig(dataset="D")
    below = sum([2 / 3 - 1, 2 / 3 - 1 / 3]) / 2  # 1 -> 2/3 and 1/3 -> 2/3: a tie, computed as -2.8e-17
    above = sum([1 / 3 - 2 / 3, 1 - 2 / 3]) / 2  # 2/3 -> 1/3 and 2/3 -> 1: a tie, computed as +2.8e-17
    assert below < 0 < above
    assert gate(above, 0, 1, v) == (False, "0 -> 1 experiences must gain more than 0")
    assert gate(below, 1, 1, v) == (True, "allowed drop 0")  # an UPDATE that changes nothing is no drop
    assert gate(1 / 3, 0, 1, v)[0] and not gate(-1 / 3, 2, 1, v)[0]
    assert gate(below, 0, 1, v.model_copy(update={"min_gain_to_grow": None}))[0]


def _refused(text: str, kind: Refusal, detail: str) -> OpRecord:
    return OpRecord("ADD", None, None, text, [0], None, "refused", Refused(kind, detail))


def test_the_second_look_shows_each_refusal_in_a_few_words():
    particulars = "names 2 particulars of its question (500, 3): an experience must hold for other questions"
    gate_refused = "Mean@2 0.188 -> 0.125 on 8 validation questions (paired difference -0.062)"
    records = [
        _refused("A.", Refusal.SCREENED, f"{particulars} (at most 1; practice.screening.max_particulars)"),
        _refused(
            "B.", Refusal.SCREENED, "states a fact, not what to do (en: no directive word of screening_words.yaml)"
        ),
        _refused("C.", Refusal.GATE, gate_refused),
        _refused("A.", Refusal.REPEATS_LIBRARY, "the same text as an existing experience"),
        _refused("E.", Refusal.ANSWER_IN_TEXT, "gives its question's answer ('12')"),
        _refused("F.", Refusal.SCREENED, "3 sentences: an experience is at most 2"),
        _refused("H.", Refusal.REFUSED_AGAIN, f"{REFUSED_AGAIN} ('E.')"),
        OpRecord("ADD", "G0", None, "D.", [0], None, "applied"),
    ]
    assert [r.reason for r in records[2:5]] == [
        f"validation: {gate_refused}",  # what the operation log says, rendered from kind and detail
        "junk: the same text as an existing experience",
        "junk: gives its question's answer ('12')",
    ]
    assert refusals_for_learner(records, answers_shown=True) == [
        f"A. (refused: {particulars})",  # the knob that sets the limit is for the user
        "B. (refused: states a fact, not what to do)",
        "C. (refused: the update it was part of did not raise the agent's score on the validation questions enough)",
        "E. (refused: gives its question's answer)",  # not the answer: a learner may practise without it
        "F. (refused: 3 sentences: an experience is at most 2)",
        f"H. (refused: {REFUSED_AGAIN})",  # not the text it repeats, which may be one not shown
    ]
    blind = refusals_for_learner(records, answers_shown=False)  # given_ground_truth: false
    assert len(blind) == 5 and not any("E." in line for line in blind)


def test_a_second_look_may_not_repeat_what_was_refused_for_what_it_says():
    gate_refused = "Mean@2 0.188 -> 0.125 on 8 validation questions (paired difference -0.062)"
    one_try = [
        _refused("A.", Refusal.SCREENED, "states a fact, not what to do"),
        _refused("B.", Refusal.REPEATS_LIBRARY, "the same condition and much the same strategy as an existing one"),
        _refused("C.", Refusal.LIBRARY_FULL, "library full (max_experiences=6)"),
        _refused("D.", Refusal.GATE, gate_refused),
    ]
    assert refused_for_what_they_say(one_try) == ["A.", "D."]  # D. was the update's only text
    bundled = [*one_try, _refused("E.", Refusal.GATE, gate_refused)]  # judged together: either may be good
    assert refused_for_what_they_say(bundled) == ["A."]
    alone = _refused("F.", Refusal.GATE_ALONE, "Mean@2 0.188 -> 0.188 (paired difference +0.000)")  # one_by_one
    assert refused_for_what_they_say([*bundled, alone]) == ["A.", "F."]
    assert refusals_for_learner([alone], answers_shown=True) == [
        "F. (refused: it did not raise the agent's score on the validation questions enough)"
    ]
    deleted = OpRecord("DELETE", "G0", "Old.", None, [0], None, "refused", Refused(Refusal.GATE, gate_refused))
    assert refused_for_what_they_say([*one_try, deleted]) == ["A."]
