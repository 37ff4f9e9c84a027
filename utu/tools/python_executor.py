"""The Python executor: every call a fresh program in its own box (see `utu.tools.sandbox`).

The code is written to a private temporary file, run by `python -I` under bubblewrap (or, with
`sandbox: none`, as a plain child process), with CPU-time, memory and file-size limits, a process and
memory cgroup where the host allows one, and a wall-clock timeout. When the program's main process ends
(or the timeout hits) everything it started is killed, so output comes back even if a child still holds
the pipe. Concurrent calls share nothing.
"""

import asyncio
import contextlib
import functools
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
from typing import Any, Literal

from utu.config.models import ToolkitConfig
from utu.tools.base import as_text, function_schema
from utu.tools.sandbox import (
    CODE_PATH_IN_BOX,
    Box,
    box_python,
    call_cgroup,
    launcher,
    memory_bounds,
    memory_cgroup_available,
    open_box,
    reap_orphans,
    require_bwrap,
)

# Runs first in the child: set hard limits, then execute the user's code as __main__.
_BOOTSTRAP = """
import resource, runpy, sys
path, mem, cpu, fsize, nproc = sys.argv[1], *(int(x) for x in sys.argv[2:6])
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU first: a SIGKILL is then something else
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # each descriptor can pin kernel memory (socket buffers)
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
except (ValueError, OSError):
    pass
sys.argv = ["main.py"]
runpy.run_path(path, run_name="__main__")
"""

# Isolated (no user site, no PYTHON* variables), and unbuffered: what a program printed before it was killed at
# its timeout reaches the pipe (a block-buffered stdout would lose it).
PYTHON_FLAGS = ["-I", "-u", "-c"]
SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_CAPTURE_BYTES = 1024 * 1024  # more output than this is drained and dropped, never held in memory
DRAIN_SECONDS = 2.0  # after the program ended and its processes were killed, to read what is left
_running: set[int] = set()  # the launchers this process waits for: never reaped by reap_orphans
log = logging.getLogger(__name__)


def sandbox_env(workdir: str) -> dict[str, str]:
    """A minimal environment for `sandbox: none`: nothing else is passed, so no key can leak through it."""
    env = {k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    return env


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-tail:]}"


async def run_python(
    code: str,
    timeout: float = 30.0,
    memory_mb: int = 1024,
    max_output_chars: int = 4000,
    *,
    sandbox: Literal["bwrap", "none"] = "bwrap",
    max_processes: int = 64,
    disk_mb: int = 64,
) -> dict:
    """Run `code`; returns {"success", "output", "error"} and never raises for the code's own failures."""
    limits = [str(memory_mb * 1024 * 1024), str(max(1, int(timeout) + 1)), str(MAX_FILE_BYTES), str(max_processes)]
    memory_cap = (memory_mb + 3 * disk_mb + 256) * 1024 * 1024  # the code plus its three tmpfs
    if sandbox == "bwrap":
        command = [box_python(), *PYTHON_FLAGS, _BOOTSTRAP, CODE_PATH_IN_BOX, *limits]
        with open_box(code, command, disk_mb=disk_mb, max_processes=max_processes, memory_bytes=memory_cap) as box:
            return await _run(box.argv, "/", {}, timeout, max_output_chars, box)  # cwd /: the box sees no host path
    workdir = tempfile.mkdtemp(prefix="utu-py-")
    try:
        code_path = os.path.join(workdir, "main.py")
        with open(code_path, "w", encoding="utf-8") as f:
            f.write(code)
        with call_cgroup(max_processes, memory_cap) as groups:
            box = Box(launcher([g / "cgroup.procs" for g in groups], []), cgroups=groups)
            argv = [*box.argv, sys.executable, *PYTHON_FLAGS, _BOOTSTRAP, code_path, *limits]
            return await _run(argv, workdir, sandbox_env(workdir), timeout, max_output_chars, box)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _run(argv: list[str], cwd, env, timeout: float, max_output_chars: int, box: Box) -> dict:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=box.pass_fds,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    _running.add(proc.pid)
    captured = bytearray()
    dropped = [0]
    assert proc.stdout is not None  # stdout=PIPE
    reader = asyncio.create_task(_read_capped(proc.stdout, captured, dropped))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        _kill_group(proc.pid)  # the program and anything it left in its session
        await proc.wait()
        _running.discard(proc.pid)
        reap_orphans(_running)
    # A child that escaped the session may still hold the pipe until its cgroup is killed: stop waiting.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(reader), DRAIN_SECONDS)
    reader.cancel()
    text = captured.decode("utf-8", errors="replace") + (f"\n[{dropped[0]} more bytes dropped]" if dropped[0] else "")
    text = truncate(text, max_output_chars)
    if timed_out:  # what it printed before the timeout is kept: it says how far the program got
        return {"success": False, "output": text, "error": f"timed out after {timeout:g}s (process killed)"}
    code = proc.returncode
    assert code is not None  # waited for above
    if box.bwrap and code > 128:
        code = -(code - 128)
    out_of_memory = box.out_of_memory()
    if code == 0:
        if out_of_memory:  # the program survived a child of it that did not: the model should know
            text += "\n[a process it started was killed by the out-of-memory killer: the memory limit]"
        return {"success": True, "output": text, "error": None}
    return {"success": False, "output": text, "error": _describe_exit(code, text, out_of_memory)}


async def _read_capped(stream: asyncio.StreamReader, kept: bytearray, dropped: list[int]) -> None:
    while chunk := await stream.read(65536):
        room = MAX_CAPTURE_BYTES - len(kept)
        kept += chunk[:room]
        dropped[0] += max(0, len(chunk) - room)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _describe_exit(code: int, output: str, out_of_memory: bool) -> str:
    if out_of_memory:
        return "memory limit exceeded (killed by the out-of-memory killer)"
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        hint = " (CPU time limit)" if sig == "SIGXCPU" else ""
        return f"killed by {sig}{hint}"
    last = output.strip().splitlines()[-1] if output.strip() else ""
    if re.fullmatch(r"(?:[\w.]+\.)?_?\w*MemoryError(: .*)?", last):  # its traceback's last line (numpy's too)
        return "memory limit exceeded (MemoryError)"
    return f"exit code {code}: {last}"


@functools.cache
def _say_once(bounds: str) -> None:
    """The box's memory bounds, said at start and once per process (toolkits are built per agent run): a warning
    where no memory cgroup holds a box as a whole."""
    log.log(logging.INFO if memory_cgroup_available() else logging.WARNING, bounds)


class PythonExecutorToolkit:
    def __init__(self, config: ToolkitConfig):
        if config.sandbox == "bwrap":
            require_bwrap()  # at start, in one line, not at the first tool call
            _say_once(memory_bounds(config.memory_mb, config.disk_mb, config.max_processes))
        self.config = config

    def schemas(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                "execute_python_code",
                "Run a self-contained Python 3 program and return what it prints. Nothing persists between calls;"
                " print the values you need.",
                {"code": {"type": "string", "description": "The complete program."}},
                ["code"],
            )
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        if name != "execute_python_code":
            raise KeyError(name)
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return as_text({"success": False, "output": "", "error": "argument 'code' must be a non-empty string"})
        c = self.config
        result = await run_python(
            code,
            c.timeout,
            c.memory_mb,
            c.max_output_chars,
            sandbox=c.sandbox,
            max_processes=c.max_processes,
            disk_mb=c.disk_mb,
        )
        return as_text(result)
