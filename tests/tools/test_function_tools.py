"""Your own Python functions and classes as tools: schemas from type hints and docstrings, sync and async,
timeouts and errors as results the model sees, clear errors at start."""

import json
import textwrap

import pytest

from tests.conftest import client_for
from utu.agents import Agent
from utu.config import AgentConfig, ToolkitConfig
from utu.errors import ConfigError
from utu.llm.stub import StubScript
from utu.tools import build_toolkits

MODULE = '''
import asyncio
from typing import Literal


def convert_units(value: float, unit: Literal["km", "mi"] = "km") -> dict:
    """Convert a distance to metres.

    Args:
        value: the distance
        unit: km or mi
    """
    return {"metres": value * (1000 if unit == "km" else 1609.344)}


async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "done"


def broken() -> str:
    """Always fails."""
    raise RuntimeError("the database is down")


def huge() -> dict:
    """A number JSON cannot write (past Python's 4300 digits)."""
    return {"value": 10**5000}


class Shop:
    """Tools of a shop."""

    def price(self, item: str) -> float:
        """The price of an item."""
        return {"apple": 0.5}[item]

    def _secret(self) -> None:
        pass
'''


@pytest.fixture
def my_tools(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_tools"


def toolkit(path, **extra):
    return build_toolkits([ToolkitConfig(name="function", function=path, **extra)])[0]


async def test_a_function_becomes_a_tool_with_a_schema_from_its_hints_and_docstring(my_tools):
    tools = toolkit(f"{my_tools}:convert_units")
    (schema,) = tools.schemas()
    fn = schema["function"]
    assert fn["name"] == "convert_units" and fn["description"] == "Convert a distance to metres."
    props = fn["parameters"]["properties"]
    assert props["value"]["type"] == "number" and props["value"]["description"] == "the distance"
    assert props["unit"]["enum"] == ["km", "mi"] and fn["parameters"]["required"] == ["value"]
    assert json.loads(await tools.call("convert_units", {"value": 2, "unit": "km"})) == {"metres": 2000.0}
    bad = json.loads(await tools.call("convert_units", {"value": "far"}))
    assert bad["error"].startswith("invalid arguments for convert_units: value")


async def test_failures_and_timeouts_are_results_not_crashes(my_tools):
    assert "RuntimeError: the database is down" in await toolkit(f"{my_tools}:broken").call("broken", {})
    assert "huge failed: ValueError: Exceeds the limit" in await toolkit(f"{my_tools}:huge").call("huge", {})
    slow = toolkit(f"{my_tools}:slow", timeout=0.2)
    assert "timed out after 0.2s" in await slow.call("slow", {"seconds": 5})
    assert await slow.call("slow", {"seconds": 0}) == "done"


async def test_a_class_offers_its_public_methods(my_tools):
    shop = toolkit(f"{my_tools}:Shop")
    assert [s["function"]["name"] for s in shop.schemas()] == ["price"]
    assert await shop.call("price", {"item": "apple"}) == "0.5"
    assert "KeyError" in await shop.call("price", {"item": "pear"})


def test_bad_setups_fail_at_start(my_tools):
    with pytest.raises(ConfigError, match="cannot load it"):
        toolkit(f"{my_tools}:nothing_here")
    with pytest.raises(
        ConfigError, match=r"'zipfile:ZipFile': the class is made with no arguments \(ZipFile.__init__\(\) missing 1"
    ):
        toolkit("zipfile:ZipFile")  # its constructor needs a file: one line at start, not a traceback
    with pytest.raises(ConfigError, match=r"'tarfile:TarFile': making the class failed \(TypeError\("):
        toolkit("tarfile:TarFile")  # made with no arguments, and that failed for a reason of its own
    with pytest.raises(ConfigError, match="expected 'module.path:function'"):
        toolkit("my_tools.convert_units")
    with pytest.raises(ValueError, match="needs `function"):
        ToolkitConfig(name="function")
    with pytest.raises(ConfigError, match="two tools are named convert_units"):
        build_toolkits([ToolkitConfig(name="function", function=f"{my_tools}:convert_units")] * 2)


async def test_an_agent_calls_your_tool(my_tools, stub):
    call = {"id": "c1", "type": "function", "function": {"name": "convert_units", "arguments": '{"value": 1.5}'}}
    server = stub(StubScript(replies=[{"tool_calls": [call]}, "1500 metres"]))
    config = AgentConfig(name="a", toolkits=[ToolkitConfig(name="function", function=f"{my_tools}:convert_units")])
    agent = Agent(config, client_for(server), build_toolkits(config.toolkits))
    result = await agent.run("How far is 1.5 km in metres?")
    assert result.response == "1500 metres" and result.tool_calls == 1
    assert server.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"metres": 1500.0}'}


async def test_each_tool_call_is_logged_with_its_duration_and_error(my_tools, stub):
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "convert_units", "arguments": '{"value": 2}'}},
        {"id": "c2", "type": "function", "function": {"name": "broken", "arguments": ""}},
        {"id": "c3", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
    ]
    server = stub(StubScript(replies=[{"tool_calls": calls}, "done"]))
    toolkits = [ToolkitConfig(name="function", function=f"{my_tools}:{name}") for name in ("convert_units", "broken")]
    config = AgentConfig(name="a", toolkits=toolkits)
    result = await Agent(config, client_for(server), build_toolkits(config.toolkits)).run("q")
    log = {entry["tool"]: entry for entry in result.tool_log}
    assert result.tool_calls == 3 and list(log) == ["convert_units", "broken", "nope"]
    assert log["convert_units"]["error"] is None and log["convert_units"]["arguments_chars"] == len('{"value": 2}')
    assert "the database is down" in log["broken"]["error"] and log["nope"]["error"].startswith("unknown tool")
    assert all(0 <= entry["seconds"] < 10 for entry in result.tool_log)


async def test_a_call_of_any_shape_is_the_models_error_to_read_not_a_crash(my_tools):
    from utu.tools.runner import ToolRunner

    runner = ToolRunner([toolkit(f"{my_tools}:convert_units")])
    fine = {"id": "c0", "function": {"name": "convert_units", "arguments": {"value": 2, "unit": "km"}}}
    message, entry = await runner.run(fine)  # an object, as some servers send it, is taken as it is
    assert json.loads(message["content"]) == {"metres": 2000.0} and entry["error"] is None
    for call, error in (
        ({"function": {"name": ["convert_units"], "arguments": "{}"}}, "unknown tool ''"),
        ({"function": {"name": "convert_units", "arguments": "[" * 100_000}}, "nested too deeply"),
        ({"function": {"name": "convert_units", "arguments": 7}}, "arguments must be a JSON object"),
        ({"function": "convert_units"}, "unknown tool ''"),
        ("convert_units", "unknown tool ''"),
    ):
        message, entry = await runner.run(call)
        assert error in json.loads(message["content"])["error"] and entry["error"], call
        assert message["role"] == "tool" and message["tool_call_id"] == ""


async def test_a_turn_runs_at_most_its_share_of_calls_and_answers_every_one(my_tools):
    from utu.tools.runner import MAX_CALLS_PER_TURN, ToolRunner

    runner = ToolRunner([toolkit(f"{my_tools}:convert_units")])
    arguments = json.dumps({"value": 1, "unit": "km"})
    calls = [{"id": f"c{i}", "function": {"name": "convert_units", "arguments": arguments}} for i in range(20)]
    done = await runner.run_turn(calls)
    assert [message["tool_call_id"] for message, _ in done] == [f"c{i}" for i in range(20)]  # each answered, in order
    ran = [json.loads(message["content"]) == {"metres": 1000.0} for message, _ in done]
    assert ran == [True] * MAX_CALLS_PER_TURN + [False] * (20 - MAX_CALLS_PER_TURN)
    assert "tool calls in one turn: not run" in done[-1][1]["error"] and done[-1][1]["tool"] == "convert_units"
