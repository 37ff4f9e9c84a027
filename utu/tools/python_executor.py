"""A sandboxed Python executor: every call in its own process and temporary directory.

Each call runs `python -I` (isolated: no user site, no PYTHON* variables) in a fresh directory that is
removed afterwards, with CPU-time, memory and file-size limits, a wall-clock timeout that kills the whole
process group, no API keys (indeed almost no environment), and output truncated. Concurrent calls share
nothing: not the working directory, not stdout.
"""

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from typing import Any

from utu.config.models import ToolkitConfig
from utu.tools.base import as_text, function_schema

# Runs first in the child: set hard limits, then execute the user's code as __main__.
_BOOTSTRAP = """
import resource, runpy, sys
mem, cpu, fsize = (int(x) for x in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
sys.argv = ["main.py"]
runpy.run_path("main.py", run_name="__main__")
"""

SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_CAPTURE_BYTES = 1024 * 1024  # more output than this is drained and dropped, never held in memory


def sandbox_env(workdir: str) -> dict[str, str]:
    """A minimal environment: no keys, tokens or secrets can leak because nothing else is passed."""
    env = {k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    return env


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-tail:]}"


async def run_python(code: str, timeout: float = 30.0, memory_mb: int = 1024, max_output_chars: int = 4000) -> dict:
    """Run `code`; returns {"success", "output", "error"} and never raises for the code's own failures."""
    workdir = tempfile.mkdtemp(prefix="utu-py-")
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        limits = (str(memory_mb * 1024 * 1024), str(max(1, int(timeout) + 1)), str(MAX_FILE_BYTES))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", _BOOTSTRAP, *limits,
            cwd=workdir, env=sandbox_env(workdir), start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            (out, dropped), _ = await asyncio.wait_for(asyncio.gather(_read_capped(proc.stdout), proc.wait()), timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return {"success": False, "output": "", "error": f"timed out after {timeout:g}s (process killed)"}
        finally:
            _kill_group(proc.pid)  # any children the code left behind
        text = out.decode("utf-8", errors="replace") + (f"\n[{dropped} more bytes dropped]" if dropped else "")
        text = truncate(text, max_output_chars)
        if proc.returncode == 0:
            return {"success": True, "output": text, "error": None}
        reason = _describe_exit(proc.returncode, text)
        return {"success": False, "output": text, "error": reason}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _read_capped(stream: asyncio.StreamReader) -> tuple[bytes, int]:
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = MAX_CAPTURE_BYTES - len(kept)
        kept += chunk[:room]
        dropped += max(0, len(chunk) - room)
    return bytes(kept), dropped


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _describe_exit(code: int, output: str) -> str:
    if code < 0:
        sig = signal.Signals(-code).name
        hint = " (CPU time limit)" if sig in ("SIGXCPU", "SIGKILL") else ""
        return f"killed by {sig}{hint}"
    if "MemoryError" in output:
        return "memory limit exceeded (MemoryError)"
    last = output.strip().splitlines()[-1] if output.strip() else ""
    return f"exit code {code}: {last}"


class PythonExecutorToolkit:
    def __init__(self, config: ToolkitConfig):
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
        result = await run_python(code, self.config.timeout, self.config.memory_mb, self.config.max_output_chars)
        return as_text(result)
