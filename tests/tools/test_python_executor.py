"""The Python executor: limits, and one test per escape an attacker's code tried (bubblewrap sandbox)."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from utu.config import ToolkitConfig
from utu.errors import ConfigError
from utu.tools import sandbox
from utu.tools.python_executor import PythonExecutorToolkit, run_python


def marker() -> str:
    """A string no other process on the machine has in its command line."""
    return f"utu-marker-{uuid.uuid4().hex}"


async def running(mark: str) -> bool:
    ps = await asyncio.create_subprocess_exec("pgrep", "-f", mark, stdout=asyncio.subprocess.PIPE)
    out, _ = await ps.communicate()
    return bool(out.strip())


async def test_runs_code_and_returns_its_output():
    result = await run_python("print(sum(range(10)))")
    assert result == {"success": True, "output": "45\n", "error": None}


async def test_infinite_loop_is_killed_at_the_timeout():
    result = await run_python("print('started')\nwhile True:\n    pass", timeout=1.0)
    assert not result["success"] and "timed out" in result["error"]
    assert result["output"] == "started\n"  # what it printed before the timeout is kept, unflushed (python -u)


async def test_memory_bomb_is_stopped():
    result = await run_python("x = bytearray(8 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert not result["success"]
    assert "memory" in result["error"].lower()
    assert "allocated" not in result["output"]


async def test_output_is_truncated():
    result = await run_python("print('a' * 50000)", max_output_chars=1000)
    assert len(result["output"]) < 1100 and "characters cut" in result["output"]


async def test_a_failing_program_reports_its_error():
    result = await run_python("raise ValueError('bad input')")
    assert not result["success"] and result["error"] == "exit code 1: ValueError: bad input"


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),  # not the CPU limit
        ("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)", "killed by SIGXCPU (CPU time limit)"),
        ("print('MemoryError is what I fear')\nraise SystemExit(1)", "exit code 1: MemoryError is what I fear"),
        ("print('x')\nraise MemoryError", "memory limit exceeded (MemoryError)"),  # its traceback's last line
        (  # numpy's, named by its module
            "class _ArrayMemoryError(MemoryError): pass\nraise _ArrayMemoryError('Unable to allocate')",
            "memory limit exceeded (MemoryError)",
        ),
    ],
)
async def test_an_exit_is_told_by_what_ended_it(code, error):
    assert (await run_python(code))["error"] == error


@pytest.mark.skipif(not sandbox.memory_cgroup_available(), reason="no memory cgroup here: no OOM kill to report")
async def test_a_child_killed_for_memory_is_reported_though_the_program_succeeds():
    """4 children of 210 MB each: each under the 256 MB a process may map, together over the call's cgroup."""
    code = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        b = b'x' * (210 * 1024 * 1024)\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print([os.waitpid(k, 0)[1] for k in kids])\n"
    )
    result = await run_python(code, memory_mb=256, timeout=20)
    assert result["success"] and "killed by the out-of-memory killer" in result["output"], result


async def test_the_python_packages_are_there():
    result = await run_python("import sympy, json\nprint(sympy.Integer(6) * 7)")
    assert result["output"] == "42\n", result


async def test_concurrent_calls_see_neither_each_others_output_nor_files():
    code = (
        "import os, time\n"
        "open('mine.txt', 'w').write('{tag}')\n"
        "time.sleep(0.3)\n"
        "print('{tag}', sorted(os.listdir('.')), open('mine.txt').read())"
    )
    results = await asyncio.gather(*(run_python(code.replace("{tag}", f"call{i}")) for i in range(4)))
    for i, result in enumerate(results):
        assert result["output"].strip() == f"call{i} ['mine.txt'] call{i}"


# --- escapes: each was a working attack on the previous executor ---


async def test_the_parents_environment_is_out_of_reach(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-test-secret-123456789")
    code = (
        "import os, json\n"
        "found = [open(f'/proc/{p}/environ', 'rb').read().decode(errors='replace')\n"
        "         for p in os.listdir('/proc') if p.isdigit() and os.access(f'/proc/{p}/environ', os.R_OK)]\n"
        "print(json.dumps({'env': dict(os.environ), 'ppid': os.getppid(), 'procs': found}))"
    )
    result = await run_python(code)
    assert "sk-test-secret" not in result["output"], result
    seen = json.loads(result["output"])
    assert not [k for k in seen["env"] if k.endswith("_API_KEY")]


async def test_host_files_are_not_visible(tmp_path, monkeypatch):
    secret = tmp_path / ".env"
    secret.write_text("UTU_LLM_API_KEY=sk-in-dotenv-file")
    monkeypatch.chdir(tmp_path)
    in_home = Path.home() / f".{marker()}"
    in_home.write_text("private")
    try:
        checks = [str(secret), str(Path.cwd() / "utu.db"), str(in_home), str(Path(__file__).resolve())]
        code = f"import os\nprint([os.path.exists(p) for p in {checks!r}])"
        result = await run_python(code)
    finally:
        in_home.unlink()
    assert result["output"].strip() == str([False] * len(checks)), result


async def test_writes_stay_inside_and_vanish():
    name = f"/tmp/{marker()}"
    result = await run_python(f"open({name!r}, 'w').write('x')\nopen('/sandbox/y', 'w').write('y')\nprint('ok')")
    assert result["output"] == "ok\n", result
    assert not os.path.exists(name)
    result = await run_python("open('/usr/evil', 'w')")
    assert not result["success"] and "Read-only file system" in result["output"]


async def test_no_network_not_even_loopback():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = []
    listener.settimeout(3)

    def accept():
        try:
            conn, _ = listener.accept()
            received.append(conn.recv(100))
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')"
    result = await run_python(code)
    thread.join()
    listener.close()
    assert not result["success"] and received == []


async def test_the_orchestrator_cannot_be_killed():
    result = await run_python("import os, signal\nprint(os.getppid(), flush=True)\nos.kill(os.getppid(), 9)")
    # We are still running to check: the parent the code sees is the sandbox's own init, not this process.
    assert int(result["output"].split()[0]) != os.getpid(), result


async def test_process_count_is_capped():
    code = (
        "import os, time\nn = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print(n)"
    )
    result = await run_python(code, max_processes=20, timeout=20)
    assert int(result["output"].split()[-1]) < 20, result


async def test_disk_is_capped():
    code = (
        "import os\ntotal = 0\n"
        "try:\n"
        "    for i in range(1000):\n"
        "        open(f'/sandbox/f{i}', 'wb').write(b'x' * 1024 * 1024)\n"
        "        total += 1\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno)\n"
        "print(total)"
    )
    result = await run_python(code, disk_mb=8)
    assert "stopped" in result["output"] and int(result["output"].split()[-1]) <= 8, result


async def test_nothing_is_left_running_and_output_comes_back_at_once():
    mark = marker()
    code = (
        "import subprocess\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'sleep 300 # {mark}'], start_new_session=True)\n"
        "print('done')"
    )
    start = time.perf_counter()
    result = await run_python(code, timeout=20)
    assert result["output"] == "done\n", result
    assert time.perf_counter() - start < 10  # not the whole timeout: the child holding the pipe was killed
    assert not await running(mark)


async def test_child_processes_die_at_the_timeout():
    mark = marker()
    code = f"import subprocess, time\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 60 # {mark}'])\ntime.sleep(60)"
    result = await run_python(code, timeout=1.0)
    assert "timed out" in result["error"]
    assert not await running(mark)


async def test_without_sandbox_the_code_still_gets_no_keys(monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-test-secret-123456789")
    result = await run_python("import os, json\nprint(json.dumps(dict(os.environ)))", sandbox="none")
    assert not [k for k in json.loads(result["output"]) if k.endswith("_API_KEY")]


def test_missing_bubblewrap_is_one_line_at_start(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.bwrap_problem.cache_clear()
    try:
        with pytest.raises(ConfigError) as e:
            PythonExecutorToolkit(ToolkitConfig(name="python_executor"))
        assert "bubblewrap" in str(e.value) and "sandbox: none" in str(e.value) and "\n" not in str(e.value)
        PythonExecutorToolkit(ToolkitConfig(name="python_executor", sandbox="none"))  # explicit opt-out works
    finally:
        sandbox.bwrap_problem.cache_clear()


async def test_toolkit_schema_and_bad_arguments():
    toolkit = PythonExecutorToolkit(ToolkitConfig(name="python_executor", timeout=5))
    assert toolkit.schemas()[0]["function"]["name"] == "execute_python_code"
    assert json.loads(await toolkit.call("execute_python_code", {"code": "print(6*7)"}))["output"] == "42\n"
    assert "non-empty string" in json.loads(await toolkit.call("execute_python_code", {"code": 3}))["error"]


async def test_many_small_files_hit_the_cap_and_vanish():
    code = (
        "import os\nn = 0\n"
        "try:\n"
        "    for i in range(20000):\n"
        "        with open(f'/tmp/f{i}', 'w') as f:\n"
        "            f.write('x' * 100)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno)\n"
        "print(n)"
    )
    result = await run_python(code, disk_mb=8, timeout=20)
    assert "stopped" in result["output"] and int(result["output"].split()[-1]) < 20000, result


def test_a_venv_reached_through_a_symlink_runs_code(tmp_path):
    """The box binds real paths only: a venv named through a link (`ln -s ~/clone/.venv .venv`) once made
    bwrap fail with "execvp .../.venv/bin/python: No such file or directory"."""
    link = tmp_path / "venv-link"
    link.symlink_to(os.path.realpath(sys.prefix))
    python = link / os.path.relpath(sys.executable, sys.prefix)
    code = "import asyncio, utu.tools.python_executor as p; print(asyncio.run(p.run_python('print(6*7)')))"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "'output': '42" in result.stdout, result.stdout


def test_a_venv_made_in_the_project_folder_shows_no_project_file(tmp_path):
    """`python -m venv .` in a project with `.env` and `utu.db`: the box once listed both and printed the key,
    because the venv's whole folder was bound."""
    (tmp_path / ".env").write_text("UTU_LLM_API_KEY=sk-project-secret-0123456789\n")
    (tmp_path / "utu.db").write_bytes(b"SQLite format 3\0")
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(tmp_path)], check=True)
    here = [p for p in sys.path if p]  # this venv's packages and checkout, for the process that makes the box
    box_code = (
        f"import os, sys\nprint(sorted(os.listdir({str(tmp_path)!r})), sys.prefix)\n"
        f"print(open({str(tmp_path / '.env')!r}).read())"
    )
    code = (
        f"import sys; sys.path[:0] = {here!r}\n"
        f"import asyncio, utu.tools.python_executor as p\nprint(asyncio.run(p.run_python({box_code!r})))"
    )
    result = subprocess.run([str(tmp_path / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = eval(result.stdout)  # noqa: S307 - our own print of a dict
    assert f"['bin', 'lib', 'pyvenv.cfg'] {os.path.realpath(tmp_path)}\n" in shown["output"], shown
    assert "sk-project-secret" not in result.stdout and "No such file" in shown["output"], shown
