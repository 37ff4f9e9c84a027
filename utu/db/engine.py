"""Engine and sessions. SQLite (WAL, immediate write transactions) by default; Postgres by URL.

`UTU_DB_URL` is any SQLAlchemy URL. Sync driver names are mapped to their async twins
(`sqlite://` -> `sqlite+aiosqlite://`, `postgresql://` -> `postgresql+psycopg://`), so users can paste
the URL they already have.
"""

import asyncio
import contextlib
import os
import re
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Table, event, inspect, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    InterfaceError,
    InvalidRequestError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from utu.db.models import Base, EvaluationSample, ExperienceOperation, Experiment
from utu.errors import ConfigError, StorageError

DEFAULT_SQLITE_FILE = "utu.db"


URL_HINT = "use sqlite:///path/to/file.db or postgresql+psycopg://user:password@host/db (--db_url or UTU_DB_URL)"


def database_url(url: str | None = None) -> str:
    """The async URL to use: the argument, else `UTU_DB_URL`, else `./utu.db` (SQLite). A URL that cannot
    work, or an in-memory SQLite database (which would keep nothing), is a `ConfigError`."""
    url = url or os.environ.get("UTU_DB_URL") or f"sqlite:///{Path.cwd() / DEFAULT_SQLITE_FILE}"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"database URL {url!r} is not a URL: {URL_HINT}") from None
    except ValueError as e:  # a malformed host or port; the URL is not echoed: it may hold a password
        raise ConfigError(f"the database URL is not a URL ({e}): {URL_HINT}") from None
    if parsed.drivername.startswith("sqlite"):
        _check_sqlite_file(url, parsed.database, parsed.query)
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):  # the sync drivers of the same file: the async one
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _check_sqlite_file(url: str, database: str | None, query) -> None:
    """A SQLite URL must name a file that is, or can become, a database: not memory in any spelling (`:memory:`,
    `file::memory:?uri=true`, `mode=memory`, `vfs=memdb`), not a device or a folder (`/dev/null` made
    `/dev/null-journal`)."""
    path = database or ""
    if str(query.get("uri", "")).lower() in ("true", "1") and path.startswith("file:"):
        uri = urllib.parse.urlsplit(path)
        path = uri.path
        query = dict(query) | dict(urllib.parse.parse_qsl(uri.query))
    if path in ("", ":memory:") or query.get("mode") == "memory" or str(query.get("vfs", "")).startswith("memdb"):
        raise ConfigError(f"database URL {url!r} names no file: an in-memory database keeps nothing; {URL_HINT}")
    file = Path(path)
    if file.exists() and not file.is_file():
        raise ConfigError(f"database URL {url!r}: {file} is not a regular file; name a database file")
    if not file.parent.is_dir():
        raise ConfigError(f"database URL {url!r}: the folder {file.parent} does not exist")


class Database:
    """One engine plus a session factory. Create per run, as `async with Database(url) as db:`, or
    `await db.dispose()` at the end."""

    def __init__(self, url: str | None = None):
        self.url = database_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        try:
            if self.is_sqlite:
                self.engine: AsyncEngine = create_async_engine(self.url, connect_args={"timeout": 60})
                _configure_sqlite(self.engine)
            else:
                self.engine = create_async_engine(self.url, pool_size=20, max_overflow=40, pool_pre_ping=True)
                _configure_postgres(self.engine)
        except (ArgumentError, NoSuchModuleError, InvalidRequestError, ImportError) as e:
            raise ConfigError(f"database URL {self.describe()}: {' '.join(str(e).split())[:200]}; {URL_HINT}") from None
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        # SQLite has one writer at a time; writers that wait on its lock sleep in coarse busy-timeout steps
        # (up to 100 ms). Queueing this process's writers here instead is far faster under concurrency.
        self._write_lock = asyncio.Lock() if self.is_sqlite else contextlib.nullcontext()

    async def create_tables(self) -> None:
        """Create missing tables, and add columns that newer versions of utu added (always nullable)."""
        try:
            async with self.engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
                await conn.run_sync(_add_missing_columns)
        except (DatabaseError, InterfaceError, OSError) as e:  # DatabaseError: also "file is not a database"
            reason = " ".join(str(getattr(e, "orig", None) or e).split())[:200]
            raise ConfigError(f"database {self.describe()}: cannot open it: {reason}") from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session whose work commits on success and rolls back on any error: all or nothing."""
        try:
            async with self._write_lock, self.sessions() as session, session.begin():
                yield session
        except OperationalError as e:  # the environment, not a bug: one line, as any user error
            reason = " ".join(str(getattr(e, "orig", None) or e).split())[:200]
            raise StorageError(
                f"database {self.describe()}: refused ({reason}); nothing of this transaction was kept"
            ) from e

    async def dispose(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> "Database":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.dispose()

    def exists(self) -> bool:
        """Whether there is a database to read: a SQLite file (not made by asking), or any server database."""
        if not self.is_sqlite:
            return True
        file = make_url(self.url).database or ""
        return Path(file).is_file() if not file.startswith("file:") else True

    def describe(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)


def _add_missing_columns(conn) -> None:
    inspector = inspect(conn)
    added = set()
    for table in Base.metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                kind = column.type.compile(dialect=conn.dialect)
                conn.exec_driver_sql(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}')
                added.add((table.name, column.name))
    if ("evaluation_data", "owner") in added:
        _backfill_owners(conn)
    if ("experience_operations", "refusal") in added:
        _backfill_refusals(conn)


# Operations stored before the `refusal` column: their kinds, read once from the prefixes their reasons were
# written with (utu.practice.outcomes renders them so still); in order, the first match wins.
LEGACY_REFUSALS = [
    ("validation: alone, %", "gate_alone"),
    ("validation: %", "gate"),
    ("junk: gives its question's answer%", "answer_in_text"),
    ("junk: proposed again after its refusal%", "refused_again"),
    ("junk: %an existing experience%", "repeats_library"),
    ("junk: %", "screened"),
    ("% without content", "no_content"),
    ("duplicate of an existing experience%", "duplicate"),
    ("library full%", "library_full"),
    ("unknown id%", "unknown_id"),
    ("DELETE without an id%", "unknown_id"),
    ("a DELETE of the same id wins%", "delete_wins"),
]


def _backfill_refusals(conn) -> None:
    op = ExperienceOperation
    for pattern, kind in LEGACY_REFUSALS:
        refused = (op.status == "refused") & op.refusal.is_(None) & op.reason.like(pattern)
        conn.execute(update(op).where(refused).values(refusal=kind))
    # a learner's second look was marked in the rationale only ("learner retry N: ...")
    for n in range(9, 0, -1):
        conn.execute(
            update(op).where(op.learner_try.is_(None), op.rationale.like(f"learner retry {n}%")).values(learner_try=n)
        )
    conn.execute(update(op).where(op.learner_try.is_(None)).values(learner_try=0))


def _backfill_owners(conn) -> None:
    """Attempts stored before rows had owners: a practice's `<P>_epoch_<e>` / `<P>_eval_step<N>` rows belong
    to P (the names were the only link then), every other row to its own exp_id."""
    practices = set(conn.execute(select(Experiment.exp_id).where(Experiment.kind == "practice")).scalars())
    table = cast(Table, EvaluationSample.__table__)  # a mapped class's table: typed as the wider FromClause
    for exp_id in conn.execute(select(table.c.exp_id).distinct()).scalars():
        base = re.sub(r"_(epoch_\d+|eval_step\d+)$", "", exp_id)
        owner = base if base != exp_id and base in practices else exp_id
        conn.execute(update(table).where(table.c.exp_id == exp_id, table.c.owner.is_(None)).values(owner=owner))


NUL_STORED_AS = "\ufffd"  # the replacement character: PostgreSQL's text cannot hold a NUL


def storable(text: str) -> str:
    """`text` as every backend stores it: a NUL (a model's degenerate reply, a tool's binary output) replaced."""
    return text.replace("\x00", NUL_STORED_AS) if "\x00" in text else text


def _storable_parameters(value: Any) -> Any:
    """A statement's parameters (a dict, a list of them, tuples; arrays inside) with every string `storable`."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {key: _storable_parameters(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_storable_parameters(v) for v in value)
    return value


def _configure_postgres(engine: AsyncEngine) -> None:
    # A NUL in any text parameter made the whole write fail ("text fields cannot contain NUL"), mid-run. (A JSON
    # column holds it escaped, \u0000, which PostgreSQL's json type keeps.)
    @event.listens_for(engine.sync_engine, "before_cursor_execute", retval=True)
    def _without_nul(_conn, _cursor, statement, parameters, _context, _executemany):
        return statement, _storable_parameters(parameters)


def _configure_sqlite(engine: AsyncEngine) -> None:
    # Python's sqlite3 only opens a transaction before DML, so a read-then-write races other writers and
    # silently loses updates. Take the write lock up front (BEGIN IMMEDIATE) and let writers wait.
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
