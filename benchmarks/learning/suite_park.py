"""Carry the suite's unfinished runs to another machine. A sitting ends at a set time and the next one may start on a
new machine, where runs/ is empty: a practice or GEPA run stopped midway would start over and lose up to an hour.
`park` packs what the unsaved runs have done (their database rows, GEPA's run folders) into one small file to
commit; `fill` on a machine without the database unpacks it, and those runs resume where they stopped."""

import io
import json
import sqlite3
import tarfile
import tempfile
from contextlib import closing
from pathlib import Path

DB_MEMBER, INDEX_MEMBER, GEPA_MEMBER = "learning_suite.db", "parked.json", "gepa/"


def _owned_by(names: set[str]):
    """Whether an exp_id (or owner) is one of `names` or one of their own experiments (`<name>_epoch_0`,
    `<name>_val_1`, `<name>_heldout`), not another run whose name only starts like it (`<name>x`)."""

    def owned(value: str | None) -> bool:
        return value is not None and any(value == n or value.startswith(n + "_") for n in names)

    return owned


def _keep_only(db: sqlite3.Connection, names: set[str]) -> set[str]:
    """Delete every row that none of `names` owns; returns the names that still have rows. The data sets and
    leases go too: each run uploads its data set again, and a lease is the stopped machine's."""
    db.create_function("owned", 1, _owned_by(names), deterministic=True)
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
    kept = {row[0] for row in db.execute("SELECT exp_id FROM experiments UNION SELECT owner FROM evaluation_data")}
    return {name for name in names if any(_owned_by({name})(k) for k in kept)}


def park(db_path: Path, runs: dict[str, Path], archive: Path) -> list[str]:
    """Pack into `archive` (written whole or not at all) the database rows of `runs` (each unsaved run's exp_id
    -> its GEPA run folder, which need not exist) and those folders. Returns the runs that had anything to carry."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / DB_MEMBER
        with closing(sqlite3.connect(db_path)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)  # a consistent copy, even of a database that another process writes
            carried = _keep_only(target, set(runs)) | {name for name, folder in runs.items() if folder.is_dir()}
        partial = archive.with_name(archive.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(copy, arcname=DB_MEMBER)
            for name in sorted(carried):
                if runs[name].is_dir():
                    tar.add(runs[name], arcname=GEPA_MEMBER + runs[name].name)
            index = json.dumps({"runs": sorted(carried)}).encode()
            info = tarfile.TarInfo(INDEX_MEMBER)
            info.size = len(index)
            tar.addfile(info, io.BytesIO(index))
        partial.replace(archive)
    return sorted(carried)


def unpark(archive: Path, db_path: Path, gepa_root: Path) -> list[str]:
    """Unpack a parked file on a machine that has no suite database yet. Returns the runs it carried."""
    if db_path.exists():
        raise FileExistsError(f"{db_path} exists: a parked file is unpacked only where no suite database is")
    with tarfile.open(archive, "r:gz") as tar:
        runs = json.load(tar.extractfile(INDEX_MEMBER))["runs"]
        folders = [
            m.replace(name=m.name.removeprefix(GEPA_MEMBER)) for m in tar.getmembers() if m.name.startswith(GEPA_MEMBER)
        ]
        gepa_root.mkdir(parents=True, exist_ok=True)
        tar.extractall(gepa_root, members=folders, filter="data")  # "data": nothing outside gepa_root, no links out
        db_path.parent.mkdir(parents=True, exist_ok=True)
        partial = db_path.with_name(db_path.name + ".partial")
        with tar.extractfile(DB_MEMBER) as packed, partial.open("wb") as out:
            out.write(packed.read())
        partial.replace(db_path)
    return runs
