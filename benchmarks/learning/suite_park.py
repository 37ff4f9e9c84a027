"""Carry the suite's unfinished runs to another machine. A sitting ends at a set time and the next one may start on a
new machine, where runs/ is empty: a practice or GEPA run stopped midway would start over and lose up to an hour.
`park` packs what the unsaved runs have done (their database rows, GEPA's run folders) into one small file to
commit; `fill` on a machine without the database unpacks it, and those runs resume where they stopped.

A parked file is trusted like the code beside it (GEPA resumes by unpickling its state): unpack only one committed
to this repository. Even so, unpacking takes only regular files and folders, inside the places they belong."""

import gzip
import io
import json
import shutil
import sqlite3
import tarfile
import tempfile
import zlib
from contextlib import closing
from pathlib import Path

from utu.names import replacing

DB_MEMBER, INDEX_MEMBER, GEPA_PREFIX = "learning_suite.db", "parked.json", "gepa/"
SQLITE_HEADER = b"SQLite format 3\x00"
MAX_BYTES = 512 * 1024 * 1024  # unpacked; a parked run is well under a MiB


class ParkedFileError(Exception):
    """A parked file that cannot be unpacked as it is."""


def owned(value: str | None, names: set[str]) -> bool:
    """Whether an exp_id (or owner) is one of `names` or one of their own experiments (`<name>_epoch_0`,
    `<name>_val_1`, `<name>_heldout`), not another run whose name only starts like it (`<name>x`)."""
    return value is not None and any(value == n or value.startswith(n + "_") for n in names)


def _keep_only(db: sqlite3.Connection, names: set[str]) -> set[str]:
    """Delete every row that none of `names` owns; returns the names that still have rows. The data sets and
    leases go too: each run uploads its data set again, and a lease is the stopped machine's."""
    db.create_function("owned", 1, lambda value: owned(value, names), deterministic=True)
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        columns = {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}
        if table in ("data", "experiment_leases"):
            db.execute(f'DELETE FROM "{table}"')
        elif "exp_id" in columns:
            by_owner = " OR owned(owner)" if "owner" in columns else ""
            db.execute(f'DELETE FROM "{table}" WHERE NOT (owned(exp_id){by_owner})')
    db.commit()
    db.execute("VACUUM")
    return with_rows(db, names)


def with_rows(db: sqlite3.Connection, names: set[str]) -> set[str]:
    """The runs of `names` that have rows in `db`: an experiment, or attempts, of their own."""
    rows = {row[0] for row in db.execute("SELECT exp_id FROM experiments UNION SELECT owner FROM evaluation_data")}
    return {name for name in names if any(owned(row, {name}) for row in rows)}


def park(db_path: Path, runs: dict[str, Path], archive: Path) -> list[str]:
    """Pack into `archive` (written whole or not at all) the database rows of `runs` (each unsaved run's exp_id
    -> its GEPA run folder, which only a GEPA run has) and those folders. Returns the runs it carried."""
    if not db_path.is_file():
        raise FileNotFoundError(f"{db_path}: no suite database here, so nothing to park")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch, replacing(archive, binary=True) as out:
        copy = Path(scratch) / DB_MEMBER
        read_only = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)  # never creates a database
        with closing(read_only) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
            with_rows = _keep_only(target, set(runs))
        with_folder = {name for name, folder in runs.items() if folder.is_dir()}
        carried = sorted(with_rows | with_folder)
        with tarfile.open(fileobj=out, mode="w:gz") as tar:
            tar.add(copy, arcname=DB_MEMBER)
            for name in sorted(with_folder):
                tar.add(runs[name], arcname=GEPA_PREFIX + runs[name].name)
            _add_bytes(tar, INDEX_MEMBER, json.dumps({"version": 1, "runs": carried}).encode())
    return carried


def is_parked_file(path: Path) -> bool:
    """Whether `path` is a regular file that an earlier `park` wrote (the only kind a park may replace)."""
    if not path.is_file() or path.is_symlink():
        return False
    try:
        with tarfile.open(path, "r:gz") as tar:
            _checked_members(tar)
    except (OSError, tarfile.TarError, ParkedFileError, EOFError):
        return False
    return True


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def unpark(archive: Path, db_path: Path, gepa_root: Path) -> list[str]:
    """Unpack a parked file on a machine that has no suite database yet (checked whole before anything is
    written). Returns the runs it carried."""
    if db_path.exists():
        raise FileExistsError(f"{db_path} exists: a parked file is unpacked only where no suite database is")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _checked_members(tar)
            runs = json.load(tar.extractfile(INDEX_MEMBER))["runs"]
            folders = [m.replace(name=m.name.removeprefix(GEPA_PREFIX)) for m in members]
            if clash := sorted({f.name.split("/")[0] for f in folders if (gepa_root / f.name).exists()}):
                raise ParkedFileError(f"its GEPA run folders are already here: {', '.join(clash)} (move them away)")
            gepa_root.mkdir(parents=True, exist_ok=True)
            tar.extractall(gepa_root, members=folders, filter="data")
            db_path.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(DB_MEMBER) as packed, replacing(db_path, binary=True) as out:
                shutil.copyfileobj(packed, out)
    except ParkedFileError as refused:
        raise ParkedFileError(f"{archive}: {refused}") from None
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError, KeyError, TypeError, ValueError) as broken:
        raise ParkedFileError(f"{archive}: not a parked file this can unpack ({broken!r})") from None
    return runs


def _checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """GEPA's run folders to unpack, once the whole file is checked: it holds the database, the index, and
    regular files and folders under gepa/ only."""
    members = tar.getmembers()
    names = {m.name for m in members}
    if DB_MEMBER not in names or INDEX_MEMBER not in names:
        raise ParkedFileError(f"it lacks {DB_MEMBER} or {INDEX_MEMBER}")
    if not (tar.getmember(DB_MEMBER).isfile() and tar.getmember(INDEX_MEMBER).isfile()):
        raise ParkedFileError(f"its {DB_MEMBER} or {INDEX_MEMBER} is not a regular file")
    if sum(m.size for m in members) > MAX_BYTES:
        raise ParkedFileError(f"it unpacks to more than {MAX_BYTES // 2**20} MiB")
    for m in members:
        inside = m.name.startswith(GEPA_PREFIX) and ".." not in Path(m.name).parts
        if m.name not in (DB_MEMBER, INDEX_MEMBER) and not (inside and (m.isfile() or m.isdir())):
            raise ParkedFileError(f"it holds {m.name!r}, which is not a regular file or folder under {GEPA_PREFIX}")
    with tar.extractfile(DB_MEMBER) as db:
        if db.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ParkedFileError(f"its {DB_MEMBER} is not an SQLite database")
    return [m for m in members if m.name.startswith(GEPA_PREFIX)]
