"""The bundled tool-selection task: its tools (right, trap, slow), its data, its verifier, and an eval of
it end to end on the stub whose per-tool statistics show the trap."""

import json
import re

import pytest

from tests.conftest import ROOT, run_script
from utu.llm.stub import StubScript
from utu.tools.unit_tools import UnitTools
from utu.verify.units import verify_func

DATA = [json.loads(line) for line in (ROOT / "dataset/UnitConversion.jsonl").read_text().splitlines()]
TOOLS = UnitTools()


class Sample:
    def __init__(self, response, answer):
        self.response, self.correct_answer = response, answer


async def test_the_right_tool_is_right_and_the_trap_is_wrong_exactly_on_trap_questions():
    assert len(DATA) == 120 and sum(r["level"] == "trap" for r in DATA) == 92
    for row in DATA:
        value, a, b = re.match(r"Convert (\S+) (.+?) to (.+), rounded", row["question"]).groups()
        a, b = a.removeprefix("degrees "), b.removeprefix("degrees ")
        right = TOOLS.convert_units(float(value), a, b)["value"]
        trap = TOOLS.quick_convert(float(value), a, b)["value"]
        assert (await verify_func(Sample(f"\\boxed{{{right:.2f}}}", row["answer"])))["reward"] == 1.0, row
        trap_reward = (await verify_func(Sample(f"\\boxed{{{trap:.2f}}}", row["answer"])))["reward"]
        assert trap_reward == (0.0 if row["level"] == "trap" else 1.0), row


def test_tools_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="unknown unit 'parsec'"):
        TOOLS.convert_units(1, "parsec", "m")
    with pytest.raises(ValueError, match="different kinds"):
        TOOLS.convert_units(1, "kg", "m")
    assert TOOLS.calculator("(3.5 + 2) * 2")["value"] == 11.0
    for hostile in ("__import__('os').system('id')", "open('/etc/passwd')", "9 ** 9 ** 9", "[1] * 10"):
        with pytest.raises(ValueError):
            TOOLS.calculator(hostile)
    # nested powers under the exponent cap: computed, they would hold the GIL for minutes (82 s for this one)
    with pytest.raises(ValueError, match="more than 1000 bits"):
        TOOLS.calculator("(((10**100)**100)**100)**40")
    assert TOOLS.calculator("2**100 * 2**100")["value"] == 2**200


async def test_the_verifier_reads_the_last_boxed_or_last_number():
    assert (await verify_func(Sample("It is about 679.79 km", "679.79")))["reward"] == 1.0
    assert (await verify_func(Sample("\\boxed{1,234.5}", "1234.50")))["reward"] == 1.0
    assert (await verify_func(Sample("\\boxed{675.84}", "679.79")))["reward"] == 0.0
    assert (await verify_func(Sample("no idea", "1.00")))["reasoning"] == "no number in the response"


def test_an_eval_of_the_task_on_the_stub_shows_the_trap_in_the_tool_statistics(stub, tmp_path):
    """Even questions: the agent calls convert_units; odd ones: quick_convert. Answers are the tool's."""

    def reply(body):
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            return f"\\boxed{{{json.loads(messages[-1]['content'])['value']:.2f}}}"
        value, a, b = re.search(r"Convert (\S+) (.+?) to (.+), rounded", messages[1]["content"]).groups()
        index = next(i for i, r in enumerate(DATA) if r["question"] in messages[1]["content"])
        tool = "convert_units" if index % 2 == 0 else "quick_convert"
        arguments = json.dumps(
            {"value": float(value), "from_unit": a.removeprefix("degrees "), "to_unit": b.removeprefix("degrees ")}
        )
        return {"tool_calls": [{"id": "c", "type": "function", "function": {"name": tool, "arguments": arguments}}]}

    server = stub(StubScript(reply_fn=reply))
    env = {"UTU_LLM_BASE_URL": server.base_url, "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    result = run_script(
        str(ROOT / "scripts/run_eval.py"),
        "--config_name",
        "local/unit_tools",
        "--offset",
        "0",
        "--limit",
        "16",
        "--pass_k",
        "1",
        "--exp_id",
        "units",
        "--db_url",
        f"sqlite:///{tmp_path}/u.db",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "runs/units/eval_metrics.json").read_text())
    right, trap = metrics["tools"]["convert_units"], metrics["tools"]["quick_convert"]
    assert (right["calls"], trap["calls"], right["errors"], trap["errors"]) == (8, 8, 0, 0)
    trapped = sum(r["level"] == "trap" for r in DATA[1:16:2])  # odd questions where quick_convert is wrong
    assert trapped >= 4
    assert right["reward_using"] == 1.0 and trap["reward_using"] == pytest.approx(1 - trapped / 8)
