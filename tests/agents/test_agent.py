"""The agent loop against the stub: tool calls, the turn limit, no-tools mode, experience placement."""

import json

from tests.conftest import client_for
from utu.agents import Agent, build_messages
from utu.config import AgentConfig, ToolkitConfig
from utu.llm.stub import StubScript
from utu.tools import build_toolkits


def tool_call(code: str, call_id: str = "call_1") -> dict:
    return {
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "execute_python_code", "arguments": json.dumps({"code": code})},
            }
        ]
    }


def make_agent(server, **config) -> Agent:
    agent_config = AgentConfig(**config)
    client = client_for(server)
    return Agent(agent_config, client, build_toolkits(agent_config.toolkits, llm=client))


async def test_tool_calls_run_and_the_trajectory_is_complete(stub):
    server = stub(StubScript(replies=[tool_call("print(6*7)"), "The answer is \\boxed{42}."]))
    agent = make_agent(server, instructions="Be exact.", toolkits=[ToolkitConfig(name="python_executor")])
    result = await agent.run("What is 6*7?")
    assert result.response == "The answer is \\boxed{42}."
    assert (result.turns, result.tool_calls, result.stop_reason) == (2, 1, "final")
    roles = [m["role"] for m in result.trajectory]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert result.trajectory[0]["content"] == "Be exact."
    assert json.loads(result.trajectory[3]["content"])["output"] == "42\n"
    assert result.trajectory[3]["tool_call_id"] == "call_1"
    assert server.requests[0]["tools"][0]["function"]["name"] == "execute_python_code"
    assert result.usage.calls == 2


async def test_a_final_reply_cut_by_the_token_limit_is_recorded_as_such(stub):
    server = stub(StubScript(replies=[{"content": "First, 3 + 4 = 7. Then", "finish_reason": "length"}]))
    result = await make_agent(server).run("What is 3 + 4 + 5?")
    assert (result.response, result.stop_reason) == ("First, 3 + 4 = 7. Then", "max_tokens")


async def test_turn_limit_ends_the_run_with_a_recorded_reason(stub):
    server = stub(StubScript(replies=[tool_call("print(1)")]))  # calls tools forever
    agent = make_agent(server, max_turns=3, toolkits=[ToolkitConfig(name="python_executor")])
    result = await agent.run("loop")
    assert (result.turns, result.tool_calls, result.stop_reason) == (3, 3, "max_turns")
    assert server.request_count == 3


async def test_no_tools_mode_sends_no_tools(stub):
    server = stub(StubScript(replies=["4"]))
    result = await make_agent(server).run("2+2?")
    assert result.response == "4" and "tools" not in server.requests[0]


async def test_unknown_tool_and_bad_arguments_are_reported_to_the_model(stub):
    bad = {
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "execute_python_code", "arguments": "{oops"}},
        ]
    }
    server = stub(StubScript(replies=[bad, "done"]))
    result = await make_agent(server, toolkits=[ToolkitConfig(name="python_executor")]).run("x")
    tool_messages = [m for m in result.trajectory if m["role"] == "tool"]
    assert "unknown tool 'nope'" in tool_messages[0]["content"]
    assert "invalid arguments" in tool_messages[1]["content"]
    assert result.response == "done"


def test_experiences_are_placed_by_one_function():
    library = {"G0": "When adding, carry digits.", "G3": "When asked for units, give them."}
    system = AgentConfig(instructions="Solve.", experience_placement="system", experiences=library)
    user = system.model_copy(update={"experience_placement": "user"})
    s_msgs = build_messages(system, "Q?")
    u_msgs = build_messages(user, "Q?")
    assert s_msgs[1]["content"] == "Q?" and "[G0]. When adding, carry digits.\n[G3]. When asked" in s_msgs[0]["content"]
    assert (
        u_msgs[0]["content"] == "Solve."
        and u_msgs[1]["content"].startswith("Q?\n\n")
        and "[G3]" in u_msgs[1]["content"]
    )
    # An explicit library (as in practice) replaces the agent's own; an empty one adds nothing.
    assert "[G9]. x" in build_messages(system, "Q?", {"G9": "x"})[0]["content"]
    assert build_messages(system, "Q?", {})[0]["content"] == "Solve."


def test_the_library_joins_a_conversation_as_in_practice():
    from utu.agents.experience import place_library

    agent = AgentConfig(instructions="Be exact.", experiences={"G0": "When adding, carry."})
    parts = [{"type": "text", "text": "Q?"}]
    placed = place_library(
        agent.model_copy(update={"experience_placement": "user"}),
        [{"role": "system", "content": "Mine."}, {"role": "user", "content": parts}],
    )
    assert placed[0] == {"role": "system", "content": "Be exact.\n\nMine."}
    assert placed[1]["content"][0] == parts[0] and "[G0]. When adding, carry." in placed[1]["content"][1]["text"]
    assert place_library(agent, [{"role": "user", "content": "Q?"}]) == build_messages(agent, "Q?")


def test_tool_calls_written_as_text_are_read_only_when_unambiguous():
    from utu.agents.text_tool_calls import text_tool_calls

    tools = {"convert_units"}
    call = '{"name": "convert_units", "arguments": {"value": 2, "from_unit": "km", "to_unit": "m"}}'
    tagged = f"Let me convert.\n<tool_call>\n{call}\n</tool_call>"
    for text in (call, call[:-1], "{" + call + "}", f"```json\n{call}\n```", tagged, f"[{call}]"):
        (got,) = text_tool_calls(text, tools)
        assert got["function"] == {
            "name": "convert_units",
            "arguments": '{"value": 2, "from_unit": "km", "to_unit": "m"}',
        }
    for answer in (
        "The answer is \\boxed{2000}.",
        f"I would call {call} but",
        call.replace("convert_units", "rm"),
        '{"name": "convert_units", "arguments": "2 km"}',
        '```json\n{"value": 2}\n```',
        '{"name": ["convert_units"], "arguments": {}}',  # a name that is no name: no call, no TypeError
        '{"name": {"a": 1}, "arguments": {}}',
        "[" * 100_000 + "]" * 100_000,  # nested too deeply to be a call
        "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>",
    ):
        assert text_tool_calls(answer, tools) == [], answer[:80]


def test_a_reply_of_whitespace_runs_is_read_at_once():
    """A regex with `\\s*(.*?)\\s*` took minutes over such a reply (a small model's degenerate output), holding
    the event loop; a child process with a deadline, so a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    script = (
        "from utu.agents.text_tool_calls import text_tool_calls as t\n"
        "for head in ('```', '<tool_call>', '```json', '<tool_call>' * 2000):\n"
        "    assert t(head + '\\n' * 50_000 + 'x', {'a'}) == []\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


async def test_an_agent_runs_a_tool_call_its_model_wrote_as_text(stub, tmp_path, monkeypatch):
    (tmp_path / "units.py").write_text("def double(x: float) -> float:\n    '''Twice x.'''\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fenced = '```json\n{"name": "double", "arguments": {"x": 21}}\n```'
    server = stub(StubScript(replies=[fenced, "\\boxed{42}"]))
    config = AgentConfig(name="a", toolkits=[ToolkitConfig(name="function", function="units:double")])
    result = await Agent(config, client_for(server), build_toolkits(config.toolkits)).run("Double 21.")
    assert result.response == "\\boxed{42}" and result.tool_calls == 1
    sent = server.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "double"
    assert sent[-1] == {"role": "tool", "tool_call_id": "text_call_0", "content": "42.0"}
    server = stub(StubScript(replies=[fenced, fenced, "\\boxed{84}"]))  # a second turn's call has its own id
    assert (await Agent(config, client_for(server), build_toolkits(config.toolkits)).run("Twice.")).tool_calls == 2
    ids = [m["tool_call_id"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert ids == ["text_call_0", "text_call_1"]
    server = stub(StubScript(replies=[fenced, "\\boxed{42}"]))  # a conversation continued: its calls count too
    history = [*server_messages(ids), {"role": "user", "content": "Once more."}]
    await Agent(config, client_for(server), build_toolkits(config.toolkits)).run_messages(history)
    ids = [m["tool_call_id"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert ids == ["text_call_0", "text_call_1", "text_call_2"]
    odd = {"role": "assistant", "content": "", "tool_calls": 5}  # a client's history can have any shape
    trimmed = [odd, *server_messages(["text_call_1"])[1:], {"role": "user", "content": "Again."}]  # turns cut
    server = stub(StubScript(replies=[fenced, "\\boxed{42}"]))
    await Agent(config, client_for(server), build_toolkits(config.toolkits)).run_messages(trimmed)
    ids = [m["tool_call_id"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert ids == ["text_call_1", "text_call_2"]
    off = config.model_copy(update={"text_tool_calls": False})
    server = stub(StubScript(replies=[fenced]))
    assert (await Agent(off, client_for(server), build_toolkits(off.toolkits)).run("Double 21.")).tool_calls == 0


def server_messages(ids: list[str]) -> list[dict]:
    """A conversation whose assistant turns made the calls `ids`, each answered."""
    messages: list[dict] = [{"role": "user", "content": "Twice."}]
    for call_id in ids:
        call = {"id": call_id, "type": "function", "function": {"name": "double", "arguments": '{"x": 1}'}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]}]
        messages += [{"role": "tool", "tool_call_id": call_id, "content": "2.0"}]
    return messages
