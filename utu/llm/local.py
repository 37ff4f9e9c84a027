"""The embedded models: llama.cpp's own `llama-server` serving a bundled GGUF on loopback.

    python -m utu.llm.local serve|status|stop [--model qwen2.5-coder-0.5b|qwen2.5-coder-1.5b|smollm2-135m]

The default model is Qwen2.5-Coder-0.5B-Instruct (`UTU_LOCAL_MODEL` or `--model` chooses another; see
`utu.llm.weights` for where the files come from). `llama-server` is built by `make install-local` from the
llama.cpp source vendored in the llama-cpp-python sdist. It serves `UTU_LOCAL_PARALLEL` requests at once
(default 8) with continuous batching, each with `UTU_LOCAL_CTX` tokens of context (default 4096).
Each model is its own server, with its own port and state under `.utu/` (`local_llm-<model>.json`), so
agent and learner can run on different models; a second `serve` of a model reuses the running one.
"""

import argparse
import functools
import logging
import os
import shutil
import sys
from pathlib import Path

from utu.errors import LLMError, UtuError
from utu.llm.weights import DEFAULT_MODEL, MODELS, gguf_path, lookup
from utu.servers import BackgroundServer, ServerState

log = logging.getLogger(__name__)

DEFAULT_PARALLEL = 8
DEFAULT_CTX = 4096  # per request slot


EMBEDDING_PARALLEL, EMBEDDING_CTX = 2, 2048  # a router embeds one question at a time, up to ~1000 tokens of it


def server(model: str, *, embeddings: bool = False) -> BackgroundServer:
    lookup(model)  # a clear error for an unknown name before any file is touched
    name = f"local_{'embed' if embeddings else 'llm'}-{model}"
    return BackgroundServer(name, health_path="/health", start_timeout=300.0, error=LLMError)


def default_model() -> str:
    return os.environ.get("UTU_LOCAL_MODEL") or DEFAULT_MODEL


def base_url(state: ServerState) -> str:
    return f"http://127.0.0.1:{state.port}/v1"


def llama_server_binary() -> Path:
    """`UTU_LLAMA_SERVER`, else the one `make install-local` put beside this Python, else one on PATH."""
    explicit = os.environ.get("UTU_LLAMA_SERVER")
    beside = Path(sys.executable).parent / "llama-server"
    found = Path(explicit) if explicit else beside if beside.is_file() else shutil.which("llama-server")
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        named = f"UTU_LLAMA_SERVER={explicit} is not an executable file; " if explicit else ""
        raise LLMError(
            f"{named}the embedded model needs llama.cpp's llama-server: run `make install-local` in a clone of utu "
            "(it builds it once) or point UTU_LLAMA_SERVER at one, or set UTU_LLM_BASE_URL, UTU_LLM_MODEL and "
            "UTU_LLM_API_KEY to use an API"
        )
    return Path(found)


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name) or str(default)
    if not value.isdigit() or int(value) < 1:
        raise LLMError(f"{name}={value!r}: expected a positive whole number")
    return int(value)


def status(model: str | None = None) -> ServerState | None:
    return server(model or default_model()).status()


def serve(model: str | None = None, *, embeddings: bool = False) -> tuple[ServerState, bool]:
    """Start the server for `model`, or reuse the running one. Returns (state, started_now).

    With `embeddings`, a second server of the same model that only answers `/v1/embeddings` (mean-pooled,
    L2-normalised): llama-server serves either embeddings or completions, not both."""
    model = model or default_model()
    background = server(model, embeddings=embeddings)
    running = background.status()
    if running:
        return running, False
    binary = llama_server_binary()
    path = gguf_path(model)
    if embeddings:
        # an input must fit one physical batch: --ubatch-size as large as the context
        parallel, ctx = EMBEDDING_PARALLEL, EMBEDDING_CTX
        mode = ["--embeddings", "--pooling", "mean", "--ubatch-size", str(ctx), "--batch-size", str(ctx)]
    else:
        parallel = _int_env("UTU_LOCAL_PARALLEL", DEFAULT_PARALLEL)
        ctx, mode = _int_env("UTU_LOCAL_CTX", DEFAULT_CTX), ["--jinja"]
    threads = str(max(1, os.cpu_count() or 1))

    def command(port: int) -> list[str]:
        return [
            str(binary),
            "--model",
            str(path),
            "--alias",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ctx-size",
            str(ctx * parallel),
            "--parallel",
            str(parallel),
            "--threads",
            threads,
            "--threads-batch",
            threads,
            *mode,
            "--no-webui",
        ]

    # llama.cpp's OpenMP threads spin while waiting: on a busy 2-core machine that took SmolLM2 from 32 to
    # 3.7 tokens/s (measured here); passive waiting gives the cores back.
    return background.start(command, env=lambda port: {"OMP_WAIT_POLICY": "PASSIVE"}, detail=str(path))


def stop(model: str | None = None) -> bool:
    return server(model or default_model()).stop()


def ensure_running(model: str | None = None, *, embeddings: bool = False) -> str:
    """Base URL of the embedded model (or its embeddings server), starting it if needed; says so in one log line."""
    model = model or default_model()
    state, started = serve(model, embeddings=embeddings)
    verb = "started" if started else "reusing"
    if embeddings:
        log.warning("No embeddings endpoint set: %s the embeddings server of %s at %s", verb, model, base_url(state))
    else:
        log.warning("No UTU_LLM_BASE_URL set: %s the embedded model %s at %s", verb, model, base_url(state))
    return base_url(state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utu.llm.local", description="The embedded model servers.")
    parser.add_argument("command", choices=["serve", "status", "stop"])
    parser.add_argument(
        "--model", default=None, choices=list(MODELS), help=f"default: UTU_LOCAL_MODEL, else {DEFAULT_MODEL}"
    )
    parser.add_argument("--embeddings", action="store_true", help="the model's embeddings server (for a router)")
    parser.add_argument("--all", action="store_true", help="status/stop: every embedded model, both kinds of server")
    args = parser.parse_args(argv)
    if args.all and args.command == "serve":
        parser.error("--all is for status and stop")
    kinds = [False, True] if args.all else [args.embeddings]
    servers = [(m, e) for e in kinds for m in (list(MODELS) if args.all else [args.model or default_model()])]
    codes = []
    for name, embeddings in servers:
        try:
            background = server(name, embeddings=embeddings)
        except UtuError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

        def describe(state: ServerState, name: str = name, embeddings: bool = embeddings) -> str:
            return f"{name}{' embeddings' if embeddings else ''} at {base_url(state)} (pid {state.pid})"

        start = functools.partial(serve, name, embeddings=embeddings)
        codes.append(background.cli([args.command], parser.prog, start, describe))
    return min(codes) if args.all else codes[0]


if __name__ == "__main__":
    sys.exit(main())
