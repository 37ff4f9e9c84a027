"""The SQL store on SQLite and on a real PostgreSQL: tables, unique keys, concurrent writers."""

import asyncio
import sqlite3

import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from utu.db import Database, DatasetSample, EvaluationSample, database_url
from utu.db.models import Experiment
from utu.errors import ConfigError


@pytest.fixture
def db(any_db):
    return any_db


def sample(i: int, attempt: int = 0, exp_id: str = "exp") -> EvaluationSample:
    return EvaluationSample(
        exp_id=exp_id, owner=exp_id, dataset="d", dataset_index=i, attempt=attempt, raw_question=f"q{i}"
    )


async def count(db: Database, model) -> int:
    async with db.sessions() as s:
        return await s.scalar(select(func.count()).select_from(model))


async def test_concurrent_inserts_all_land(db):
    async def write(i: int) -> None:
        async with db.transaction() as s:
            s.add(sample(i))

    await asyncio.gather(*(write(i) for i in range(200)))
    assert await count(db, EvaluationSample) == 200


async def test_concurrent_read_modify_write_loses_no_update(db):
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="c", owner="c", dataset="d", dataset_index=0, raw_question="q", tokens=0))

    async def bump() -> None:
        async with db.transaction() as s:
            row = await s.scalar(select(EvaluationSample).where(EvaluationSample.exp_id == "c").with_for_update())
            await asyncio.sleep(0)  # let others interleave between the read and the write
            row.tokens += 1

    await asyncio.gather(*(bump() for _ in range(50)))
    async with db.sessions() as s:
        assert await s.scalar(select(EvaluationSample.tokens).where(EvaluationSample.exp_id == "c")) == 50


async def test_unique_keys_make_retries_idempotent(db):
    async with db.transaction() as s:
        s.add(sample(1, attempt=0))
        s.add(DatasetSample(dataset="d", index=0, question="q"))
    with pytest.raises(IntegrityError):
        async with db.transaction() as s:
            s.add(sample(1, attempt=0))
    with pytest.raises(IntegrityError):
        async with db.transaction() as s:
            s.add(DatasetSample(dataset="d", index=0, question="again"))
    async with db.transaction() as s:  # another attempt or experiment is a new row
        s.add(sample(1, attempt=1))
        s.add(sample(1, attempt=0, exp_id="other"))
    assert await count(db, EvaluationSample) == 3


async def test_a_failed_transaction_writes_nothing(db):
    with pytest.raises(RuntimeError):
        async with db.transaction() as s:
            s.add_all(sample(i) for i in range(10))
            await s.flush()
            raise RuntimeError("crash mid-way")
    assert await count(db, EvaluationSample) == 0


async def test_a_nul_in_any_text_is_stored_not_refused(db):
    """A tool's binary output or a model's degenerate reply: PostgreSQL's text cannot hold a NUL, and the whole
    write failed mid-run; it is stored as U+FFFD there (JSON columns hold it escaped, on both backends)."""
    from utu.db.engine import NUL_STORED_AS

    written = sample(0)
    written.reasoning, written.trajectories = "a\x00b", [{"content": "c\x00"}]
    async with db.transaction() as s:
        s.add(written)
        await s.execute(insert(DatasetSample), [{"dataset": "d", "index": i, "question": f"q{i}\x00"} for i in (0, 1)])
    async with db.sessions() as s:
        row = (await s.execute(select(EvaluationSample))).scalar_one()
        questions = (await s.execute(select(DatasetSample.question).order_by(DatasetSample.index))).scalars().all()
    nul = "\x00" if db.is_sqlite else NUL_STORED_AS
    assert questions == [f"q{i}{nul}" for i in (0, 1)]  # many rows at once
    assert row.reasoning == f"a{nul}b"
    assert row.trajectories == [{"content": "c\x00"}]


async def test_json_columns_round_trip(db):
    trajectory = [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "4", "tool_calls": []},
    ]
    async with db.transaction() as s:
        row = sample(0)
        row.trajectories = trajectory
        row.meta = {"k": [1, 2]}
        s.add(row)
    async with db.sessions() as s:
        stored = await s.scalar(select(EvaluationSample))
        assert stored.trajectories == trajectory and stored.meta == {"k": [1, 2]}
    async with db.transaction() as s:  # an update of other columns leaves the JSON as it was
        await s.execute(update(EvaluationSample).values(stage="judged"))
    async with db.sessions() as s:
        stored = await s.scalar(select(EvaluationSample))
        assert (stored.stage, stored.trajectories, stored.meta) == ("judged", trajectory, {"k": [1, 2]})


def test_urls_map_to_async_drivers(tmp_path, monkeypatch):
    monkeypatch.delenv("UTU_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert database_url() == f"sqlite+aiosqlite:///{tmp_path}/utu.db"
    assert database_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert database_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    monkeypatch.setenv("UTU_DB_URL", "postgresql+psycopg://u@h/db")
    assert database_url() == "postgresql+psycopg://u@h/db"


async def test_sqlite_uses_wal(sqlite_db):
    async with sqlite_db.engine.connect() as conn:
        assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"


async def test_two_first_runs_load_a_bundled_set_once(db):
    from utu.db.dataset_io import bundled_datasets, dataset_size, ensure_dataset

    other = Database(db.url)  # a second run: its own engine, same database
    try:
        sizes = await asyncio.gather(ensure_dataset(db, "AIME25"), ensure_dataset(other, "AIME25"))
    finally:
        await other.dispose()
    expected = len(bundled_datasets()["AIME25"].read_text().splitlines())
    assert sizes == [expected, expected] and await dataset_size(db, "AIME25") == expected


@pytest.mark.integration
@pytest.mark.parametrize("first_mode", ["append", "replace"])
async def test_two_uploads_to_one_data_set_at_once_take_turns(pg_url, monkeypatch, first_mode):
    """On PostgreSQL the second upload waits for the first (SQLite's writers take its lock before they read:
    BEGIN IMMEDIATE): its rows follow the first's, none lost, no index twice, no gap."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from tests.conftest import open_postgres
    from utu.db.dataset_io import DatasetLine, store_dataset

    db = await open_postgres(pg_url)
    await store_dataset(db, "T", [DatasetLine(question=f"q{i}") for i in range(3)])
    other, waiting = Database(db.url), []
    execute = AsyncSession.execute

    async def another_upload_starts_after_this_ones_first_statement(session, statement, *args, **kwargs):
        result = await execute(session, statement, *args, **kwargs)
        if session.bind is db.engine and not waiting:
            waiting.append(asyncio.create_task(store_dataset(other, "T", [DatasetLine(question="b")], "append")))
            await asyncio.sleep(0.3)  # time to read the last index, were it not waiting for this upload's lock
            assert not waiting[0].done()
        return result

    monkeypatch.setattr(AsyncSession, "execute", another_upload_starts_after_this_ones_first_statement)
    try:
        await store_dataset(db, "T", [DatasetLine(question="a")], first_mode)
        await waiting[0]
        async with db.sessions() as s:
            stored = (await s.execute(select(DatasetSample.index, DatasetSample.question).order_by("index"))).all()
    finally:
        await other.dispose()
        await db.dispose()
    earlier = [(i, f"q{i}") for i in range(3)] if first_mode == "append" else []
    assert [tuple(r) for r in stored] == [*earlier, (len(earlier), "a"), (len(earlier) + 1, "b")]


@pytest.mark.integration
async def test_an_append_raced_by_a_writer_without_the_lock_keeps_nothing_and_says_so(pg_url, monkeypatch):
    """A writer that takes no lock (an older utu) writes the same row index meanwhile: one line, not a traceback."""
    from sqlalchemy import insert
    from sqlalchemy.ext.asyncio import AsyncSession

    from tests.conftest import open_postgres
    from utu.db.dataset_io import DatasetLine, dataset_size, store_dataset
    from utu.errors import DataError

    db = await open_postgres(pg_url)
    await store_dataset(db, "T", [DatasetLine(question="q0")])
    other = Database(db.url)
    execute = AsyncSession.execute

    async def a_row_lands_after_the_read(session, statement, *args, **kwargs):
        result = await execute(session, statement, *args, **kwargs)
        if "max(" in str(statement) and session.bind is db.engine:
            async with other.transaction() as s:
                await execute(s, insert(DatasetSample).values(dataset="T", index=1, question="b"))
        return result

    monkeypatch.setattr(AsyncSession, "execute", a_row_lands_after_the_read)
    try:
        with pytest.raises(DataError, match="changed while this upload wrote it .*nothing of this one was kept"):
            await store_dataset(db, "T", [DatasetLine(question="a")], "append")
        async with db.sessions() as s:
            stored = (await s.execute(select(DatasetSample.index, DatasetSample.question).order_by("index"))).all()
        assert [tuple(r) for r in stored] == [(0, "q0"), (1, "b")] and await dataset_size(db, "T") == 2
    finally:
        await other.dispose()
        await db.dispose()


async def test_an_old_database_gets_row_owners(tmp_path):
    """Attempts stored before rows had owners: practice rows go to their practice, the rest to themselves."""

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE experiments (exp_id VARCHAR(200) PRIMARY KEY, kind VARCHAR(20), "
            "fingerprint VARCHAR(64), config JSON, created_at DATETIME)"
        )
        conn.execute(
            "CREATE TABLE evaluation_data (id INTEGER PRIMARY KEY, exp_id VARCHAR(200), dataset VARCHAR(200), "
            "dataset_index INTEGER, attempt INTEGER, step INTEGER, source VARCHAR(100), raw_question TEXT, "
            "stage VARCHAR(20))"
        )
        conn.execute("INSERT INTO experiments VALUES ('P', 'practice', 'x', '{}', NULL)")
        for i, exp in enumerate(["P_epoch_0", "P_eval_step1", "E", "Q_epoch_0"]):
            conn.execute(
                "INSERT INTO evaluation_data (id, exp_id, dataset, dataset_index, attempt, source, "
                "raw_question, stage) VALUES (?, ?, 'd', 0, 0, 's', 'q', 'init')",
                (i, exp),
            )
    db = Database(f"sqlite:///{path}")
    await db.create_tables()
    await db.dispose()
    with sqlite3.connect(path) as conn:
        owners = dict(conn.execute("SELECT exp_id, owner FROM evaluation_data"))
    assert owners == {"P_epoch_0": "P", "P_eval_step1": "P", "E": "E", "Q_epoch_0": "Q_epoch_0"}


async def test_an_experiments_config_is_stored_without_its_keys(tmp_path):
    from utu.db.experiments import register_experiment

    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    await db.create_tables()
    token = "ghp_" + "a1B2" * 10
    config = {"agent": {"toolkits": [{"command": ["srv", "--token", token], "url": None}], "max_turns": 3}}
    assert await register_experiment(db, "e", "eval", config) is False
    await db.dispose()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        (stored,) = conn.execute("SELECT config FROM experiments").fetchone()
    assert token not in stored and "[REDACTED]" in stored
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    assert await register_experiment(db, "e", "eval", config) is True  # the same experiment, resumed
    other = {"agent": {"toolkits": [{"command": ["srv", "--token", token], "url": None}], "max_turns": 5}}
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    with pytest.raises(ConfigError, match=r"changed: agent.max_turns\)"):  # not the masked command
        await register_experiment(db, "e", "eval", other)
    await db.dispose()


async def test_a_knob_added_later_at_its_default_does_not_block_a_resume(tmp_path):
    from utu.db.experiments import register_experiment

    db = Database(f"sqlite:///{tmp_path / 'f.db'}")
    await db.create_tables()
    old = {"agent": {"model_settings": {"temperature": 0.3}}}
    assert await register_experiment(db, "e", "eval", old) is False
    upgraded = {"agent": {"model_settings": {"temperature": 0.3, "extra_body": {}}}, "init_library": None}
    assert await register_experiment(db, "e", "eval", upgraded) is True  # the same experiment
    assert await register_experiment(db, "e", "eval", upgraded) is True  # and recorded as such
    changed = {"agent": {"model_settings": {"temperature": 0.3, "extra_body": {"top_k": 5}}}}
    async with db.transaction() as s:  # a result computed under the recorded config
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    with pytest.raises(ConfigError, match=r"changed: agent.model_settings.extra_body"):
        await register_experiment(db, "e", "eval", changed)
    # A switch added later: on, it changes what the run does; off (as the run behaved), it resumes.
    switched_on = upgraded | {"restate_refused": True}
    with pytest.raises(
        ConfigError, match=r"restate_refused came after that run: set it off \(false or none\) to resume"
    ):
        await register_experiment(db, "e", "eval", switched_on)
    assert await register_experiment(db, "e", "eval", upgraded | {"restate_refused": False}) is True
    await db.dispose()


async def test_keys_no_longer_recorded_do_not_block_a_resume_and_are_not_stored(tmp_path):
    """An MCP toolkit's env and headers may hold keys: no longer part of the fingerprint, so never stored; a run
    recorded with them empty resumes."""
    from utu.config import AgentConfig, ToolkitConfig
    from utu.config.models import shaping_dump
    from utu.db.experiments import register_experiment

    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    await db.create_tables()
    old = {"toolkits": [{"name": "mcp", "env": {}, "headers": {}, "timeout": 30.0}]}
    assert await register_experiment(db, "e", "eval", old) is False
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    assert await register_experiment(db, "e", "eval", {"toolkits": [{"name": "mcp", "timeout": 30.0}]}) is True
    # recorded with a key in them by an older version: resumed, and the record rewritten without it
    older = {"toolkits": [{"name": "mcp", "headers": {"Authorization": "Bearer sk-abc"}, "timeout": 30.0}]}
    assert await register_experiment(db, "h", "eval", older) is False
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="h", owner="h", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    assert await register_experiment(db, "h", "eval", {"toolkits": [{"name": "mcp", "timeout": 30.0}]}) is True
    async with db.sessions() as s:
        assert "sk-abc" not in str((await s.get(Experiment, "h")).config)
    # a change inside a list is named, and not taken for a knob added later
    with pytest.raises(ConfigError, match=r"changed: toolkits.0.timeout\); pass --fresh") as refused:
        await register_experiment(db, "h", "eval", {"toolkits": [{"name": "mcp", "timeout": 60.0}]})
    assert "came after" not in str(refused.value)
    secret = ToolkitConfig(name="mcp", url="http://x/mcp", headers={"Authorization": "Bearer sk-secret"})
    kept = shaping_dump(AgentConfig(toolkits=[secret], instructions="hi"))
    assert "sk-secret" not in str(kept) and "headers" not in kept["toolkits"][0]
    await db.dispose()


async def test_a_changed_config_is_taken_while_nothing_was_computed(tmp_path):
    from utu.db.experiments import register_experiment

    db = Database(f"sqlite:///{tmp_path / 'f.db'}")
    await db.create_tables()
    assert await register_experiment(db, "e", "eval", {"model": "typo"}) is False
    async with db.transaction() as s:  # the refused run's rows, never rolled out
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="failed"))
    assert await register_experiment(db, "e", "eval", {"model": "fixed"}) is True
    assert await count(db, EvaluationSample) == 0  # made anew under the fixed config
    await db.dispose()


async def test_a_digest_a_later_version_records_does_not_block_a_resume_and_is_checked_after(tmp_path):
    """A run recorded before utu fingerprinted its validation questions resumes, and records them then: the
    next change to them is noticed."""
    from utu.db.experiments import register_experiment

    db = Database(f"sqlite:///{tmp_path / 'f.db'}")
    await db.create_tables()
    old = {"practice": {"validation": {"dataset": "V", "size": 3}}}
    assert await register_experiment(db, "e", "practice", old) is False
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    recorded = {"practice": {"validation": {"dataset": "V", "size": 3, "content": {"sha256": "a"}}}}
    assert await register_experiment(db, "e", "practice", recorded) is True
    replaced = {"practice": {"validation": {"dataset": "V", "size": 3, "content": {"sha256": "b"}}}}
    with pytest.raises(ConfigError, match=r"changed: practice.validation.content.sha256"):
        await register_experiment(db, "e", "practice", replaced)
    await db.dispose()


async def test_an_evals_verifier_digest_outlives_a_knob_added_later(tmp_path):
    """Kept beside the fingerprint, it neither blocks a resume under a later version's config nor is lost by it."""
    from utu.db.experiments import judge_again_if_the_verifier_changed, register_experiment

    db = Database(f"sqlite:///{tmp_path / 'f.db'}")
    await db.create_tables()
    assert await register_experiment(db, "e", "eval", {"pass_k": 2}) is False
    async with db.transaction() as s:
        s.add(EvaluationSample(exp_id="e", owner="e", dataset="d", dataset_index=0, raw_question="q", stage="judged"))
    assert await judge_again_if_the_verifier_changed(db, "e", "a") == 0  # recorded
    assert await register_experiment(db, "e", "eval", {"pass_k": 2, "init_library": None}) is True
    assert await judge_again_if_the_verifier_changed(db, "e", "b") == 1  # still recorded: the edit is seen
    await db.dispose()
