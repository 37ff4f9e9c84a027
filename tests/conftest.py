"""Shared fixtures: the scripted stub LLM, SQLite and PostgreSQL databases, the real embedded model."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from utu.config import ModelConfig
from utu.db import Database
from utu.llm import LLMClient, UsageTracker
from utu.llm.stub import StubScript, StubServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def stub():
    """`stub(script)` starts a stub LLM server for this test; all are stopped afterwards."""
    servers: list[StubServer] = []

    def start(script: StubScript | None = None) -> StubServer:
        server = StubServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def fast_config(**overrides) -> ModelConfig:
    """A model config with short backoffs so that retry tests run quickly."""
    values = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 5.0} | overrides
    return ModelConfig(**values)


_open_clients: list[LLMClient] = []


def client_for(server: StubServer, usage: UsageTracker | None = None, **config) -> LLMClient:
    """A client for the stub, closed at the end of the test (its aiohttp session belongs to the test's loop)."""
    client = LLMClient(fast_config(**config), base_url=server.base_url, model="stub-model", api_key="k", usage=usage)
    _open_clients.append(client)
    return client


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir(tmp_path_factory):
    """Servers a test starts (an embedded model a command starts when no endpoint is set) keep their state in
    a directory of the session's own, and are stopped when it ends: `make test` leaves no llama-server
    running, and never touches the checkout's own .utu (where `make demo`'s models run)."""
    from utu.llm import local

    old = os.environ.get("UTU_STATE_DIR")
    os.environ["UTU_STATE_DIR"] = str(tmp_path_factory.mktemp("utu_state"))
    yield
    for model in local.MODELS:
        local.server(model).stop()
    if old is None:
        os.environ.pop("UTU_STATE_DIR", None)
    else:
        os.environ["UTU_STATE_DIR"] = old


@pytest.fixture(autouse=True)
async def _close_clients():
    yield
    while _open_clients:
        await _open_clients.pop().close()


async def open_sqlite(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'test.db'}")
    await db.create_tables()
    return db


async def open_postgres(url: str) -> Database:
    """A database with a clean schema (each test starts empty)."""
    from sqlalchemy import text

    db = Database(url)
    async with db.engine.begin() as conn:
        await conn.execute(text("DROP SCHEMA public CASCADE"))
        await conn.execute(text("CREATE SCHEMA public"))
    await db.create_tables()
    return db


@pytest.fixture
async def sqlite_db(tmp_path):
    db = await open_sqlite(tmp_path)
    yield db
    await db.dispose()


@pytest.fixture(scope="session")
def pg_url():
    """A real PostgreSQL on loopback: UTU_TEST_PG_URL (set by `make test`), else started here."""
    url = os.environ.get("UTU_TEST_PG_URL")
    started = False
    if not url:
        result = subprocess.run(
            ["bash", str(ROOT / "scripts/dev/postgres.sh"), "start"], capture_output=True, text=True
        )
        if result.returncode != 0:
            pytest.fail(f"could not start PostgreSQL: {result.stderr.strip()}")
        url, started = result.stdout.strip(), True
    yield url
    if started:
        subprocess.run(["bash", str(ROOT / "scripts/dev/postgres.sh"), "stop"], check=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
async def any_db(request, tmp_path):
    """The same test on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        db = await open_sqlite(tmp_path)
    else:
        db = await open_postgres(request.getfixturevalue("pg_url"))
    yield db
    await db.dispose()


TEST_LOCAL_MODEL = "smollm2-135m"


@pytest.fixture(scope="session")
def local_model(tmp_path_factory):
    """The real embedded llama.cpp server, started once for the session in a private state dir."""
    from utu.llm import local

    state = tmp_path_factory.mktemp("local_llm_state")
    # SmolLM2-135M: fast; the tests check the machinery, not the answers (the default model is the 0.5B).
    settings = {"UTU_STATE_DIR": str(state), "UTU_LOCAL_MODEL": TEST_LOCAL_MODEL}
    old = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    server, _ = local.serve()
    yield server
    local.stop()
    for key, value in old.items():
        if value is None:
            del os.environ[key]
        else:
            os.environ[key] = value


def run_script(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run one of our scripts as a user would, with the project's Python."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
