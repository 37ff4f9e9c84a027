"""The advantage stage: what the learner sees of each attempt (reward, tools, a cut reply) and what it replies."""

import hashlib
import json

from tests.conftest import client_for
from utu.config.models import PracticeArguments
from utu.llm.stub import StubScript
from utu.practice.experience_updater import ExperienceUpdater, tool_usage
from utu.practice.library import Library
from utu.practice.step import learner_failed_everywhere
from utu.practice.types import GroupAttempt, GroupOutcome

RULE = "When a question converts units, call convert_units instead of computing by hand."


def attempt(reward: float, tools: list[dict]) -> GroupAttempt:
    trajectory = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "5 km in m?"},
        {"role": "assistant", "content": "The answer is 5000."},
    ]
    return GroupAttempt(
        dataset_index=0,
        question="5 km in m?",
        answer="5000",
        response="5000",
        trajectory=trajectory,
        reward=reward,
        tools=tools,
    )


def call(tool: str, error: str | None = None) -> dict:
    return {"tool": tool, "arguments_chars": 20, "seconds": 0.01, "error": error}


def test_tool_usage_names_each_tool_with_its_calls_and_failures():
    assert tool_usage([]) == "none"
    log = [call("convert_units"), call("convert_units"), call("python_executor", "timed out after 30s")]
    assert tool_usage(log) == "convert_units x2 (ok); python_executor x1 (1 failed: timed out after 30s)"


async def test_the_learner_sees_each_attempts_tools_next_to_its_reward(stub):
    advantage = {"analysis": "The tool call was right; computing by hand slipped.", "experiences": [RULE]}
    server = stub(StubScript(replies=['{"ok": true}', json.dumps(advantage)]))  # the probe, then the call
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    group = [attempt(1.0, [call("convert_units")]), attempt(0.0, []), attempt(0.0, [call("python_executor", "boom")])]
    outcome = await updater.learn(group, library=Library())
    system, user = (m["content"] for m in server.requests[1]["messages"])
    assert "which tool to\ncall, or to avoid" in system
    assert "Attempt 1 (reward 1)\nTools called: convert_units x1 (ok):" in user
    assert "Attempt 2 (reward 0)\nTools called: none:" in user
    assert "Attempt 3 (reward 0)\nTools called: python_executor x1 (1 failed: boom):" in user
    assert [p.op.content for p in outcome.proposed] == [RULE]


async def test_groups_without_tool_calls_get_the_prompt_as_before(stub):
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": []})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    await updater.learn([attempt(1.0, []), attempt(0.0, [])], library=Library())
    system, user = (m["content"] for m in server.requests[1]["messages"])
    assert "Tools called" not in user and "tool" not in system


async def test_the_learner_is_told_which_attempts_ran_out_of_tokens(stub):
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": []})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    cut = attempt(0.0, []).model_copy(update={"cut": True})
    await updater.learn([attempt(1.0, []), cut], library=Library())
    user = server.requests[1]["messages"][1]["content"]
    assert "Attempt 1 (reward 1):" in user
    assert "Attempt 2 (reward 0; cut off at the agent's token limit before it finished):" in user


async def test_the_advantage_schema_asks_for_the_kind_of_problem_before_the_experiences(stub):
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": []})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    await updater.learn([attempt(1.0, []), attempt(0.0, [])], library=Library())
    schema = server.requests[1]["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["analysis", "problem_kind", "experiences"] == schema["required"]


async def test_the_learner_reads_the_verifiers_note_on_each_attempt(stub):
    """The note says what the verifier read and expected: how a learner sees that an attempt lost on the form of
    its answer (11 for 11.33), not on its method."""
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": []})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    right = attempt(1.0, []).model_copy(update={"critique": "extracted 11.33; gold 11.33"})
    whole = attempt(0.0, []).model_copy(update={"critique": "extracted 11;\n gold 11.33"})
    await updater.learn([right, whole], library=Library())
    system, user = (m["content"] for m in server.requests[1]["messages"])
    assert "Attempt 1 (reward 1)\nVerifier: extracted 11.33; gold 11.33:" in user
    assert "Attempt 2 (reward 0)\nVerifier: extracted 11; gold 11.33:" in user
    assert "against the ground truth, their rewards and the verifier's notes" in system
    assert "which form to give" in system


async def test_without_the_ground_truth_the_learner_gets_no_verifiers_note(stub):
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": []})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments(given_ground_truth=False))
    noted = [attempt(r, []).model_copy(update={"critique": "extracted 11; gold 11.33"}) for r in (1.0, 0.0)]
    await updater.learn(noted, library=Library())
    system, user = (m["content"] for m in server.requests[-1]["messages"])
    assert "11.33" not in user and "Verifier" not in user and "verifier" not in system


async def test_each_learner_pass_compares_the_group_again_and_every_pass_proposes(stub):
    other = "When a question converts units, check the factor before multiplying."
    replies = [json.dumps({"analysis": "a", "experiences": [text]}) for text in (RULE, other)]
    server = stub(StubScript(replies=['{"ok": true}', *replies]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments(learner_passes=2))
    outcome = await updater.learn([attempt(1.0, []), attempt(0.0, [])], library=Library())
    asked = [r for r in server.requests[1:] if r["response_format"]["json_schema"]["name"] == "GroupAdvantage"]
    assert len(asked) == 2 and asked[0]["messages"] == asked[1]["messages"]
    assert sorted(p.op.content for p in outcome.proposed) == sorted([RULE, other])
    assert all(p.source_questions == [0] for p in outcome.proposed)


async def test_a_failed_pass_beside_one_that_found_nothing_is_not_a_failed_group(stub):
    """With two passes, one invalid in all its tries (recorded as a failure) and one valid with no experience:
    the learner answered and found nothing, so the step goes on; only a group where every pass failed counts as
    failed."""
    empty = json.dumps({"analysis": "a", "experiences": []})
    server = stub(StubScript(replies=['{"ok": true}', *["not json"] * 3, empty]))  # 3 tries, then a failure
    updater = ExperienceUpdater(client_for(server), PracticeArguments(learner_passes=2))
    outcome = await updater.learn([attempt(1.0, []), attempt(0.0, [])], library=Library())
    assert [f.stage for f in outcome.failures] == ["advantage"] and not outcome.proposed
    assert outcome.answered and not learner_failed_everywhere([outcome])
    assert learner_failed_everywhere([outcome.model_copy(update={"answered": False})])


def test_a_group_all_lost_only_by_verdicts_below_a_full_reward():
    from utu.db.models import EvaluationSample
    from utu.practice.experience_updater import every_attempt_lost
    from utu.practice.rollouts import as_attempt

    lost = attempt(0.0, [])
    assert every_attempt_lost([lost, lost]) and every_attempt_lost([attempt(0.5, []), attempt(0.5, [])])
    assert not every_attempt_lost([lost]) and not every_attempt_lost([attempt(1.0, []), attempt(1.0, [])])
    assert not every_attempt_lost([lost, attempt(1.0, [])])
    assert not every_attempt_lost([lost, lost.model_copy(update={"reward": None})])  # a failed attempt is no verdict
    failed = EvaluationSample(dataset_index=0, raw_question="q", stage="judged", reward=0.0, error="verify: timed out")
    assert as_attempt(failed).verifier_failed and not every_attempt_lost([lost, as_attempt(failed)])
    assert not as_attempt(
        EvaluationSample(dataset_index=0, raw_question="q", stage="judged", reward=0.0)
    ).verifier_failed


async def test_a_group_that_all_lost_is_set_against_the_ground_truth_tools_and_all(stub):
    server = stub(StubScript(replies=['{"ok": true}', json.dumps({"analysis": "a", "experiences": [RULE]})]))
    updater = ExperienceUpdater(client_for(server), PracticeArguments())
    group = [attempt(0.0, [call("python_executor", "boom")]), attempt(0.0, [])]
    assert not (await updater.learn(group, library=Library())).used  # skipped, as in the paper
    outcome = await updater.learn(group, library=Library(), all_lost=True)
    assert outcome.used and outcome.all_lost and [p.op.content for p in outcome.proposed] == [RULE]
    system = server.requests[-1]["messages"][0]["content"].split("Reply with only a JSON value")[0]
    assert "1. Every attempt lost: none is better. In your analysis, first solve the question\n" in system
    assert "then set each attempt against your solution.\n2." in system  # no verifier notes in this group
    assert "better" not in system.replace("none is better", "") and "worse" not in system
    assert "When the attempts called a tool that\nfailed or did not fit" in system


def test_the_advantage_prompt_of_a_group_with_contrast_is_the_one_the_learning_suite_registered():
    """Byte for byte the messages of 27ff2bd (the code the learning suite's first runs measured), for every mix of
    ground truth, verifier notes, tool calls and a second look's refused texts: while the suite fills, a change to
    what practice asks is a candidate, not an edit (docs/results.md). Change the digest only after it is full."""
    digest = hashlib.sha256()
    for gt in (True, False):
        updater = ExperienceUpdater(None, PracticeArguments(given_ground_truth=gt))
        for notes in (True, False):
            for tools in (True, False):
                outcome = GroupOutcome(dataset_index=0, used=True)
                outcome.studied = [
                    (
                        GroupAttempt(
                            dataset_index=0,
                            question="Q?",
                            answer="5",
                            response="r",
                            trajectory=[],
                            reward=reward,
                            critique="extracted 4; gold 5" if notes else None,
                            tools=[call("calc")] if tools and reward else [],
                            cut=reward == 0.0,
                        ),
                        f"summary {i}",
                    )
                    for i, reward in enumerate((1.0, 0.0))
                ]
                for refused in (None, ["a text: why"]):
                    digest.update(json.dumps(updater.advantage_messages(outcome, refused)).encode())
    assert digest.hexdigest() == "afa45c4390daac1cd29ce4f91173c1c0c531b6740520eceddbd40d5de2644781"


def test_a_second_look_at_a_group_that_all_lost_keeps_saying_none_is_better():
    updater = ExperienceUpdater(None, PracticeArguments())
    outcome = GroupOutcome(dataset_index=0, used=True, all_lost=True)
    outcome.studied = [(attempt(0.0, []), "s1"), (attempt(0.0, []), "s2")]
    system, user = (m["content"] for m in updater.advantage_messages(outcome, ["a text: why"]))
    assert "Every attempt lost" in system and "better ones" not in user
    assert user.endswith("find what else the\nground truth shows they should have done.\n</refused>")


async def test_a_second_look_keeps_a_group_s_all_lost_flag():
    updater = ExperienceUpdater(None, PracticeArguments())
    outcome = GroupOutcome(dataset_index=0, used=True, all_lost=True)  # nothing summarised: no call is made
    assert (await updater.learn_again(outcome, Library(), ["a text: why"])).all_lost
