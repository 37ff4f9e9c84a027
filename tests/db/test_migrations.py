"""A database written before a column existed opens with the column added and filled (utu/db/engine.py)."""

import sqlite3
from pathlib import Path

import pytest

from utu.db import Database
from utu.db.engine import LEGACY_REFUSALS
from utu.practice.history import as_record, operation_log
from utu.practice.outcomes import Refusal, Refused

FIXTURES = Path(__file__).parent / "fixtures"


def old_database(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / f"before_refusal_kinds_{name}.sql").read_text())
    return f"sqlite:///{path}"


def kinds(path: str) -> list[tuple]:
    with sqlite3.connect(path.removeprefix("sqlite:///")) as conn:
        return conn.execute(
            "SELECT status, refusal, learner_try, reason FROM experience_operations ORDER BY id"
        ).fetchall()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("one_by_one", {"gate": 2, "gate_alone": 1, "unknown_id": 3, "repeats_library": 6}),
        ("second_looks", {"gate": 1, "repeats_library": 3, "refused_again": 8}),
    ],
)
async def test_a_database_from_before_refusal_kinds_gets_them_from_its_reasons(tmp_path, name, expected):
    url = old_database(tmp_path, name)
    async with Database(url) as db:
        await db.create_tables()
    rows = kinds(url)
    counted: dict[str, int] = {}
    for status, refusal, _, _ in rows:
        assert (refusal is None) == (status == "applied")
        if refusal:
            counted[refusal] = counted.get(refusal, 0) + 1
    assert counted == expected
    async with Database(url) as db:
        records = [as_record(op) for op in await operation_log(db, "t")]
    # the text a user reads is rendered from the kind and detail as it was stored
    assert [r.reason for r in records] == [reason for *_, reason in rows]


async def test_second_looks_are_read_from_the_rationale_once(tmp_path):
    url = old_database(tmp_path, "second_looks")
    async with Database(url) as db:
        await db.create_tables()
    tries = [(learner_try, reason) for _, _, learner_try, reason in kinds(url)]
    assert [t for t, _ in tries] == [0] * 4 + [1] * 4 + [2] * 4  # the first try, then two second looks
    assert all(t >= 1 for t, reason in tries if reason and "proposed again" in reason)


def test_every_legacy_kind_is_a_refusal_kind_and_its_pattern_matches_what_is_rendered():
    for _, kind in LEGACY_REFUSALS:
        Refusal(kind)
    rendered = {
        Refusal.GATE_ALONE: Refused(Refusal.GATE_ALONE, "Mean@2 0.1 -> 0.1").render(),
        Refusal.GATE: Refused(Refusal.GATE, "Mean@2 0.1 -> 0.0").render(),
        Refusal.SCREENED: Refused(Refusal.SCREENED, "states a fact, not what to do").render(),
    }
    for kind, text in rendered.items():
        first = next(k for pattern, k in LEGACY_REFUSALS if _like(text, pattern))
        assert first == kind


def _like(text: str, pattern: str) -> bool:
    import re

    return re.fullmatch(re.escape(pattern).replace("%", ".*"), text, re.DOTALL) is not None
