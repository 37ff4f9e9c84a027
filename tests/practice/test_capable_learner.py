"""A learner that writes as a capable API model does (multi-clause, topical, Youtu-Agent's "Title: strategy"
form, one experience in Chinese): practice applies what it writes, the exported agent carries it to the
agent's instructions, and the validation gate still refuses an experience that lowers the validation score."""

import json

import yaml

from tests.practice.helpers import is_probe, proposed_operations, query, run_eval, run_practice, schema_of
from tests.practice.test_validation import VALIDATION, adder, workspace_with_validation_set
from utu.llm.stub import StubScript

# What DeepSeek-V3.1 wrote for Youtu-Agent reads like this: a title, then several clauses of method.
TITLED = (
    "Multi-digit addition: Add column by column from the ones digit, write down every carry before moving on, "
    "and verify the sum by subtracting one addend from it before boxing the result."
)
WHEN = (
    "When a question asks for the sum of two numbers written in words or digits, restate both addends as digits "
    "first, then add them and box only the final number."
)
CHINESE = "两数相加时，先从个位开始逐位相加并记下每一次进位，最后用减法验算结果。"
# Plausible, confident and wrong: only the validation gate can tell (adder() answers 0 once it reads this).
HARMFUL = (
    "Quick sums: For sums of two small numbers, always box zero straight away, since re-checking costs more "
    "time than it saves."
)


def capable_learner() -> StubScript:
    """Step 0 (empty library): the advantage yields the three good experiences, each applied as an ADD. Step 1:
    the group update proposes the harmful one."""

    def reply(body):
        name = schema_of(body)
        if is_probe(body):
            return '{"ok": true}'
        if name == "AttemptSummary":
            return json.dumps(
                {
                    "summary": "The agent added the ones digits, forgot the carry into the tens, and "
                    "boxed a sum one ten short; the right attempt wrote each carry down."
                }
            )
        if name == "GroupAdvantage":
            analysis = "The better attempt tracked the carry; the worse one dropped it."
            experiences = [TITLED, WHEN, CHINESE]
            return json.dumps({"analysis": analysis, "problem_kind": "adding numbers", "experiences": experiences})
        if name == "OperationList":
            return json.dumps({"operations": [{"operation": "ADD", "content": HARMFUL, "rationale": "faster"}]})
        if name == "ConsolidatedList":
            ops = proposed_operations(body)
            return json.dumps({"operations": [op | {"merged_from": [i]} for i, op in enumerate(ops)]})
        raise AssertionError(f"unexpected learner request {name!r}")

    return StubScript(reply_fn=reply)


def test_a_capable_learners_experiences_are_applied_exported_and_gated(tmp_path, stub):
    configs, db_url = workspace_with_validation_set(tmp_path)
    learner = stub(capable_learner())
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        stub(adder(HARMFUL, needed=CHINESE)),  # the Chinese experience is what gets validation questions right
        learner,
        "--epochs",
        "1",
        "--num_experiences_per_query",
        "3",
        *VALIDATION,
    )
    assert result.returncode == 0, result.stderr
    assert not [r for r in learner.requests if schema_of(r) == "Restated"]  # nothing of theirs is sent back
    ops = query(db_url, "SELECT step, new_text, status, reason FROM experience_operations ORDER BY id")
    applied = [text for step, text, status, _ in ops if step == 0 and status == "applied"]
    assert applied == [TITLED, WHEN, CHINESE]  # the second group's same three are duplicates, refused
    assert "Mean@2 0.000 -> 1.000" in query(db_url, "SELECT stats FROM practice_steps WHERE step = 0")[0][0]
    harmful = [(status, reason) for step, text, status, reason in ops if text == HARMFUL]
    assert harmful and all(status == "refused" for status, _ in harmful)
    assert harmful[0][1].startswith("validation: Mean@2 1.000 -> 0.000")  # (the second group's: a duplicate)
    library = json.loads(query(db_url, "SELECT experiences FROM experience_snapshots ORDER BY step DESC")[0][0])
    assert list(library.values()) == [TITLED, WHEN, CHINESE]

    exported = yaml.safe_load((tmp_path / "runs/t/enhanced_agent.yaml").read_text(encoding="utf-8"))
    assert list(exported["experiences"].values()) == [TITLED, WHEN, CHINESE]
    agent = stub(adder(HARMFUL))
    evaluation = run_eval(
        tmp_path,
        configs,
        db_url,
        agent,
        "ArithVal",
        "enhanced",
        "--agent_config",
        str(tmp_path / "runs/t/enhanced_agent.yaml"),
    )
    assert evaluation.returncode == 0, evaluation.stderr
    systems = [r["messages"][0]["content"] for r in agent.requests if not is_probe(r)]
    assert systems and all(CHINESE in s and TITLED in s for s in systems)  # the agent reads them, unchanged
