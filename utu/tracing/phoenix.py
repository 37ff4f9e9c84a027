"""A local Arize Phoenix server (the `phoenix` extra) on 127.0.0.1, telemetry and external resources off.

    python -m utu.tracing.phoenix serve|status|stop       (or: make phoenix)

Data lives in `.utu/phoenix/`. `serve` prints the UI address and the PHOENIX_ENDPOINT to export.
"""

import sys

from utu.errors import UtuError
from utu.servers import BackgroundServer, ServerState, state_dir

SERVER = BackgroundServer("phoenix", health_path="/healthz", start_timeout=180.0)


def environment(port: int) -> dict[str, str]:
    return {
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": "0",
        "PHOENIX_WORKING_DIR": str(state_dir() / "phoenix"),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_AGENTS_DISABLE_BASH": "true",
    }


def serve() -> tuple[ServerState, bool]:
    try:
        import phoenix.server.main  # noqa: F401
    except ImportError as e:
        raise UtuError("the Phoenix server is the `phoenix` extra: run `make install-phoenix`") from e
    (state_dir() / "phoenix").mkdir(parents=True, exist_ok=True)
    return SERVER.start(lambda port: [sys.executable, "-m", "phoenix.server.main", "serve"], env=environment)


def endpoints(state: ServerState) -> tuple[str, str]:
    ui = SERVER.url(state)
    return ui, f"{ui}/v1/traces"


if __name__ == "__main__":
    sys.exit(
        SERVER.cli(
            None,
            "python -m utu.tracing.phoenix",
            serve,
            describe=lambda state: f"Phoenix UI at {endpoints(state)[0]} (pid {state.pid})",
            hint=lambda state: f"export PHOENIX_ENDPOINT={endpoints(state)[1]}",
        )
    )
