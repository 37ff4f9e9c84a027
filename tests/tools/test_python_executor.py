"""The sandboxed Python executor: limits, isolation, no secrets, cleanup."""

import asyncio
import json
import time

from utu.config import ToolkitConfig
from utu.tools.python_executor import PythonExecutorToolkit, run_python


async def test_runs_code_and_returns_its_output():
    result = await run_python("print(sum(range(10)))")
    assert result == {"success": True, "output": "45\n", "error": None}


async def test_infinite_loop_is_killed_at_the_timeout():
    start = time.perf_counter()
    result = await run_python("while True:\n    pass", timeout=1.0)
    assert not result["success"] and "timed out" in result["error"]
    assert time.perf_counter() - start < 5


async def test_child_processes_die_with_the_group():
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)"
    )
    result = await run_python(code, timeout=1.0)
    assert "timed out" in result["error"]
    ps = await asyncio.create_subprocess_exec("pgrep", "-f", "time.sleep(60)", stdout=asyncio.subprocess.PIPE)
    out, _ = await ps.communicate()
    assert out.strip() == b""


async def test_memory_bomb_is_stopped():
    result = await run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert not result["success"]
    assert "memory" in result["error"].lower()
    assert "allocated" not in result["output"]


async def test_files_are_confined_to_a_private_directory_that_is_removed():
    result = await run_python("import os\nopen('note.txt', 'w').write('x')\nprint(os.getcwd())")
    workdir = result["output"].strip()
    assert "utu-py-" in workdir
    import os

    assert not os.path.exists(workdir)


async def test_no_api_keys_in_the_environment(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-test-secret-123")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    result = await run_python("import os, json\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(result["output"])
    assert not [k for k in env if k.endswith("_API_KEY")]
    assert "sk-test-secret-123" not in result["output"]


async def test_concurrent_calls_see_neither_each_others_output_nor_files():
    code = (
        "import os, time\n"
        "open('mine.txt', 'w').write('{tag}')\n"
        "time.sleep(0.3)\n"
        "print('{tag}', sorted(os.listdir('.')), open('mine.txt').read())"
    )
    results = await asyncio.gather(*(run_python(code.replace("{tag}", f"call{i}")) for i in range(4)))
    for i, result in enumerate(results):
        assert result["output"].strip() == f"call{i} ['main.py', 'mine.txt'] call{i}"


async def test_output_is_truncated():
    result = await run_python("print('a' * 50000)", max_output_chars=1000)
    assert len(result["output"]) < 1100 and "characters cut" in result["output"]


async def test_a_failing_program_reports_its_error():
    result = await run_python("raise ValueError('bad input')")
    assert not result["success"] and result["error"] == "exit code 1: ValueError: bad input"


async def test_toolkit_schema_and_bad_arguments():
    toolkit = PythonExecutorToolkit(ToolkitConfig(name="python_executor", timeout=5))
    assert toolkit.schemas()[0]["function"]["name"] == "execute_python_code"
    assert json.loads(await toolkit.call("execute_python_code", {"code": "print(6*7)"}))["output"] == "42\n"
    assert "non-empty string" in json.loads(await toolkit.call("execute_python_code", {"code": 3}))["error"]
