"""Background servers we start and stop ourselves (the embedded model, Phoenix): spawn, wait until healthy,
remember pid and port under the working directory, reuse a running one, stop cleanly."""

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from utu.errors import UtuError


@dataclass
class ServerState:
    pid: int
    port: int
    detail: str = ""  # e.g. the model file served


def state_dir() -> Path:
    return Path(os.environ.get("UTU_STATE_DIR") or Path.cwd() / ".utu")


class BackgroundServer:
    """One kind of server: `name` keys its state file, lock and log under `.utu/`."""

    def __init__(self, name: str, health_path: str, start_timeout: float, error: type[UtuError] = UtuError):
        self.name = name
        self.health_path = health_path
        self.start_timeout = start_timeout
        self.error = error

    def url(self, state: ServerState) -> str:
        return f"http://127.0.0.1:{state.port}"

    @property
    def log_file(self) -> Path:
        return state_dir() / f"{self.name}.log"

    def status(self) -> ServerState | None:
        """The running server, if its recorded pid is alive and it answers; else None (stale state removed)."""
        state = self._read()
        if state is None:
            return None
        if _alive(state.pid) and self.healthy(state):
            return state
        self._state_file().unlink(missing_ok=True)
        return None

    def healthy(self, state: ServerState) -> bool:
        import httpx  # here: every command imports this module, few ask a server's health

        try:
            return httpx.get(self.url(state) + self.health_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def start(
        self,
        command: Callable[[int], list[str]],
        env: Callable[[int], dict[str, str]] | None = None,
        detail: str = "",
    ) -> tuple[ServerState, bool]:
        """Start the server (command(port) -> argv), or reuse the running one. Returns (state, started_now)."""
        with self._lock():
            running = self.status()
            if running:
                return running, False
            port = free_port()
            with open(self.log_file, "ab") as out:
                proc = subprocess.Popen(
                    command(port),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **(env(port) if env else {})},
                )
            state = ServerState(pid=proc.pid, port=port, detail=detail)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    code, log = proc.returncode, self.log_file
                    raise self.error(f"the {self.name} server exited with code {code}; see {log}: {self._tail()}")
                if self.healthy(state):
                    self._state_file().write_text(json.dumps(asdict(state)))
                    return state, True
                time.sleep(0.5)
            kill_group(proc.pid)
            raise self.error(
                f"the {self.name} server did not answer within {self.start_timeout:.0f}s; see {self.log_file}"
            )

    def stop(self) -> bool:
        """Stop the recorded server. Returns whether one was running."""
        with self._lock():
            state = self._read()
            self._state_file().unlink(missing_ok=True)
            if state is None or not _alive(state.pid):
                return False
            kill_group(state.pid)
            return True

    def cli(
        self,
        argv: list[str] | None,
        prog: str,
        serve: Callable[[], tuple[ServerState, bool]],
        describe: Callable[[ServerState], str],
        hint: Callable[[ServerState], str] | None = None,
    ) -> int:
        """`serve|status|stop` for this server: exit 0, 1 for status of a stopped server, 2 on error."""
        parser = argparse.ArgumentParser(prog=prog, description=f"The {self.name} server.")
        parser.add_argument("command", choices=["serve", "status", "stop"])
        command = parser.parse_args(argv).command
        try:
            if command == "serve":
                state, started = serve()
                print(f"{'started' if started else 'already running'}: {describe(state)}")
                if hint:
                    print(hint(state))
            elif command == "status":
                running = self.status()
                print(f"running: {describe(running)}" if running else "not running")
                return 0 if running else 1
            else:
                print("stopped" if self.stop() else "not running")
        except UtuError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0

    def _state_file(self) -> Path:
        return state_dir() / f"{self.name}.json"

    def _read(self) -> ServerState | None:
        try:
            return ServerState(**json.loads(self._state_file().read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    @contextlib.contextmanager
    def _lock(self):
        """One process at a time may start or stop the server (e.g. parallel commands)."""
        state_dir().mkdir(parents=True, exist_ok=True)
        with open(state_dir() / f"{self.name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _tail(self, lines: int = 3) -> str:
        try:
            return " | ".join(self.log_file.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):  # a zombie child of ours counts as dead
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return True


def kill_group(pid: int, grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
