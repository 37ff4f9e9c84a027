"""MCP servers as toolkits, against a real MCP server (tests/tools/mcp_server.py) over stdio and streamable
HTTP: listing and filtering, calls, failures as results, the server's environment, its start and stop."""

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import AsyncExitStack

import pytest
import yaml

from tests.conftest import ROOT, client_for, run_script
from utu.agents import Agent
from utu.config import AgentConfig, ToolkitConfig
from utu.errors import ConfigError
from utu.llm.stub import StubScript
from utu.servers import free_port
from utu.tools import build_toolkits, open_toolkits

SERVER = str(ROOT / "tests/tools/mcp_server.py")
STDIO = [sys.executable, SERVER]


async def opened(**config):
    stack = AsyncExitStack()
    (toolkit,) = await open_toolkits(stack, [ToolkitConfig(name="mcp", **config)])
    return stack, toolkit


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split()[2] != "Z"


async def test_a_stdio_server_offers_its_tools_and_answers_calls(tmp_path):
    pid_file = tmp_path / "pid"
    stack, tools = await opened(command=STDIO, env={"PID_FILE": str(pid_file)}, exclude=["environment", "files.read"])
    async with stack:
        names = [s["function"]["name"] for s in tools.schemas()]
        assert names == ["convert_units", "slow", "broken"]
        (convert,) = [s["function"] for s in tools.schemas() if s["function"]["name"] == "convert_units"]
        assert convert["description"] == "Convert a distance in km or mi to metres."
        assert convert["parameters"]["required"] == ["value"]
        assert float(await tools.call("convert_units", {"value": 2, "unit": "mi"})) == pytest.approx(3218.688)
        pid = int(pid_file.read_text())
        assert alive(pid)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), "the MCP server outlived the run"


async def test_failures_and_timeouts_are_results_the_model_sees():
    stack, tools = await opened(command=STDIO, timeout=0.5, exclude=["files.read"])
    async with stack:
        assert json.loads(await tools.call("broken", {}))["error"].startswith("broken failed")
        assert "timed out" in json.loads(await tools.call("slow", {"seconds": 5}))["error"]
        assert "value" in json.loads(await tools.call("convert_units", {"value": "far"}))["error"]
        assert await tools.call("slow", {"seconds": 0}) == "done"  # the session survived all of that


async def test_the_server_gets_env_but_not_your_keys(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-secret")
    stack, tools = await opened(command=STDIO, env={"UNITS_REGION": "eu"}, include=["environment"])
    async with stack:
        assert [s["function"]["name"] for s in tools.schemas()] == ["environment"]
        assert await tools.call("environment", {"name": "UNITS_REGION"}) == "eu"
        assert await tools.call("environment", {"name": "UTU_LLM_API_KEY"}) == "unset"


@pytest.fixture
def http_server():
    port = free_port()
    proc = subprocess.Popen([*STDIO, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "the MCP server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


async def test_a_streamable_http_server(http_server):
    stack, tools = await opened(url=http_server, headers={"Authorization": "Bearer t"}, include=["convert_units"])
    async with stack:
        assert [s["function"]["name"] for s in tools.schemas()] == ["convert_units"]
        assert float(await tools.call("convert_units", {"value": 1.5})) == 1500.0


async def test_bad_setups_fail_at_start_with_what_to_do():
    with pytest.raises(ConfigError, match="could not start it"):
        await opened(command=["/nonexistent/mcp-server"])
    with pytest.raises(ConfigError, match="could not start it"):
        await opened(url=f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(ConfigError, match="refuses the tool names files.read .* add them to `exclude`"):
        await opened(command=STDIO)
    with pytest.raises(ConfigError, match="include names nope, which the server does not offer"):
        await opened(command=STDIO, include=["convert_units", "nope"])
    with pytest.raises(ValueError, match="needs one of `command"):
        ToolkitConfig(name="mcp")
    with pytest.raises(ValueError, match="belong to toolkits of name mcp"):
        ToolkitConfig(name="python_executor", include=["x"])
    with pytest.raises(ConfigError, match="open_toolkits"):
        build_toolkits([ToolkitConfig(name="mcp", command=STDIO)])
    doubled = [ToolkitConfig(name="mcp", command=STDIO, include=["slow"])] * 2
    with pytest.raises(ConfigError, match="two tools are named"):
        async with AsyncExitStack() as stack:
            await open_toolkits(stack, doubled)


async def test_an_agent_calls_an_mcp_tool(stub):
    call = {"id": "c1", "type": "function", "function": {"name": "convert_units", "arguments": '{"value": 3}'}}
    server = stub(StubScript(replies=[{"tool_calls": [call]}, "3000 metres"]))
    config = AgentConfig(name="a", toolkits=[ToolkitConfig(name="mcp", command=STDIO, include=["convert_units"])])
    async with AsyncExitStack() as stack:
        agent = Agent(config, client_for(server), await open_toolkits(stack, config.toolkits))
        result = await agent.run("How far is 3 km in metres?")
    assert result.response == "3000 metres" and result.tool_calls == 1
    assert server.requests[1]["messages"][-1]["content"] == "3000.0"


def test_run_eval_starts_and_stops_the_server(stub, tmp_path):
    """The command a user runs: the agent YAML names a stdio server (Youtu-Agent's `mode: mcp` format)."""
    pid_file = tmp_path / "pid"
    agent = {
        "defaults": ["/model/base@model", "_self_"],
        "type": "simple",
        "agent": {"name": "units", "instructions": "Use the tools."},
        "toolkits": {
            "units": {
                "mode": "mcp",
                "activated_tools": ["convert_units"],
                "config": {"command": sys.executable, "args": [SERVER], "env": {"PID_FILE": str(pid_file)}},
            }
        },
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(agent))
    call = {"id": "c1", "type": "function", "function": {"name": "convert_units", "arguments": '{"value": 0.004}'}}
    served = []

    def reply(body):
        served.append(body)
        if body["messages"][-1]["role"] == "tool":
            return f"The answer is \\boxed{{{float(body['messages'][-1]['content']):g}}}."
        return {"tool_calls": [call]}

    server = stub(StubScript(reply_fn=reply))
    env = {"UTU_LLM_BASE_URL": server.base_url, "UTU_LLM_MODEL": "m", "UTU_LLM_API_KEY": "k"}
    result = run_script(
        str(ROOT / "scripts/run_eval.py"),
        "--config_name",
        "local/mawps",
        "--limit",
        "1",
        "--pass_k",
        "1",
        "--agent_config",
        str(tmp_path / "agent.yaml"),
        "--exp_id",
        "mcp",
        "--db_url",
        f"sqlite:///{tmp_path}/e.db",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert [t["function"]["name"] for t in served[0]["tools"]] == ["convert_units"]
    assert served[1]["messages"][-1]["content"] == "4.0"
    metrics = json.loads((tmp_path / "runs/mcp/eval_metrics.json").read_text())
    convert = metrics["tools"]["convert_units"]
    assert (convert["calls"], convert["errors"], convert["attempts_using"]) == (1, 0, 1)
    assert "tool convert_units" in result.stdout
    assert not alive(int(pid_file.read_text())), "the MCP server outlived the run"
