"""Read data set files in the upload format and store them in the `data` table, all or nothing.

One JSON object per line:
    {"dataset": "Name", "source": "training_free_grpo", "question": "...", "answer": "..." | 12 | null,
     "level": ..., "topic": ..., "meta": {...}}
Only `question` is required. Other keys are kept in `meta`.
"""

import hashlib
import importlib.resources
import itertools
import json
import logging
import math
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator
from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError

from utu.db.engine import Database
from utu.db.hub_sets import HUB_SET_NAMES, load_command
from utu.db.models import DatasetSample
from utu.errors import ConfigError, DataError
from utu.names import check_name

log = logging.getLogger(__name__)

DEFAULT_SOURCE = "training_free_grpo"
INSERT_BATCH = 5000
KNOWN_KEYS = {"dataset", "source", "question", "answer", "level", "topic", "meta", "source_index", "file_name"}
ALPACA_KEYS = {"instruction", "input", "output"}  # --data_format llamafactory's
FORMATS = ("default", "llamafactory")
MAX_LINE_BYTES = 1024 * 1024  # a question longer than this is a mistake (a whole file on one line), not data
MAX_PROBLEMS_SHOWN = 20
UNION_HINTS = {
    "answer": "must be a string, a number or null",
    "level": "must be a string, an integer or null",
}


class DatasetLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: StrictStr | None = None
    # lengths and bounds of the table's columns (utu/db/models.py): Postgres refuses more, mid-write
    source: StrictStr = Field(DEFAULT_SOURCE, max_length=100)
    question: StrictStr = Field(min_length=1)
    answer: StrictStr | int | float | None = None
    level: StrictStr | int | None = None  # (at most 50 characters: _level_fits)
    topic: StrictStr | None = Field(None, max_length=200)
    meta: dict[str, Any] | None = None
    # the question's index in its original source (Youtu-Agent's column)
    source_index: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    file_name: StrictStr | None = None  # a file the question comes with (Youtu-Agent's column)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("dataset", "source", "question", "answer", "level", "topic", "file_name")
    @classmethod
    def _no_nul(cls, v: object) -> object:
        if isinstance(v, str) and "\x00" in v:  # PostgreSQL's text cannot hold it; in a question it means nothing
            raise ValueError("contains a NUL character (\\u0000): remove it")
        return v

    @field_validator("level")
    @classmethod
    def _level_fits(cls, v: str | int | None) -> str | int | None:
        if v is not None and len(str(v)) > 50:
            raise ValueError("must be at most 50 characters")
        return v

    @field_validator("answer", mode="before")
    @classmethod
    def _no_bool(cls, v: object) -> object:
        if isinstance(v, bool):
            raise ValueError("must be a string, a number or null, not a boolean")
        return v


MAX_META_DEPTH = 64  # levels of nesting a line's metadata may have


def parse_dataset_file(
    path: Path, dataset_name: str | None = None, data_format: str = "default", max_line_bytes: int = MAX_LINE_BYTES
) -> tuple[str, list[DatasetLine]]:
    """Validate every line. Raise `DataError` listing the bad lines as `FILE:LINE: reason` (the first
    MAX_PROBLEMS_SHOWN of them, then how many more).

    `data_format` llamafactory: lines are `{"instruction", "input", "output"}` (Alpaca style, as LLaMA-Factory
    and Youtu-Agent read them): instruction and input, joined by a blank line, are the question; output the
    answer. A line over `max_line_bytes` is refused without being held in memory.

    Returns the data set name (the argument, else the lines' `dataset` field) and the rows. With a
    `dataset_name`, the lines' own `dataset` fields are ignored: the rows are stored under that name.
    """
    if dataset_name is not None:
        check_name(dataset_name, "--dataset_name")
    if path.is_dir():
        raise DataError(f"{path}: is a directory; give the JSONL file itself")
    if path.exists() and not path.is_file():
        raise DataError(f"{path}: not a regular file (a device or a pipe); give the JSONL file itself")
    if not path.is_file():
        raise DataError(f"{path}: a link to nothing (or a loop)" if path.is_symlink() else f"{path}: no such file")
    _check_kind(path)
    rows: list[DatasetLine] = []
    problems: list[str] = []
    with path.open("rb") as f:
        for number, raw in enumerate(capped_lines(f, max_line_bytes), start=1):
            if raw is None:
                problems.append(f"{path}:{number}: longer than {max_line_bytes} bytes: one question per line")
                continue
            try:
                # (a BOM some editors write first is no part of the data; the line end is none of the JSON's, and
                # left in, a line cut short was said to fail at column 1 of the next)
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                problems.append(f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})")
                continue
            if not text.strip():
                continue
            try:
                row = _parse_line(text, data_format)
            except ValueError as e:
                problems.append(f"{path}:{number}: {e}")
                continue
            except RecursionError:
                problems.append(f"{path}:{number}: nested too deeply to read")
                continue
            name = dataset_name or row.dataset
            if name is None:
                problems.append(f'{path}:{number}: no dataset name: add a "dataset" field or pass --dataset_name')
            elif not dataset_name and rows and name != rows[0].dataset:
                problems.append(f"{path}:{number}: dataset {name!r} differs from earlier lines ({rows[0].dataset!r})")
            elif not dataset_name:
                try:
                    check_name(name, "field 'dataset'")
                except ConfigError as e:
                    problems.append(f"{path}:{number}: {e}")
            rows.append(row)
    if problems:  # a file that is no JSON Lines at all: say what it is instead of what each line is not
        problems = _whole_file_problem(path, any_read=bool(rows)) or problems
    if problems:
        more = len(problems) - MAX_PROBLEMS_SHOWN
        shown = problems[:MAX_PROBLEMS_SHOWN] + ([f"{path}: ... and {more} more bad lines"] if more > 0 else [])
        raise DataError("\n".join(shown))
    if not rows:
        raise DataError(f"{path}: the file has no data lines")
    return dataset_name or rows[0].dataset or "", rows


def capped_lines(f: BinaryIO, max_bytes: int) -> Iterator[bytes | None]:
    """The file's lines; None for a line longer than `max_bytes`, whose rest is read past in chunks."""
    while line := f.readline(max_bytes + 1):
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while (rest := f.readline(max_bytes)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


# A file's first bytes that say it is no UTF-8 text, and what it is instead.
_NOT_TEXT = {
    b"\x1f\x8b": "gzip-compressed: decompress it first (gunzip)",
    b"PK\x03\x04": "a zip archive: unpack it first",
    b"\xff\xfe\x00\x00": "UTF-32 text: save it as UTF-8",  # (before UTF-16's mark, which begins it)
    b"\x00\x00\xfe\xff": "UTF-32 text: save it as UTF-8",
    b"\xff\xfe": "UTF-16 text: save it as UTF-8",
    b"\xfe\xff": "UTF-16 text: save it as UTF-8",
}


def _check_kind(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(4)
    what = next((what for magic, what in _NOT_TEXT.items() if head.startswith(magic)), None)
    # UTF-16 without a byte-order mark: every other byte NUL, which no UTF-8 JSON text begins with
    if what is None and len(head) == 4 and (head[1] == head[3] == 0 or head[0] == head[2] == 0):
        what = "UTF-16 (or UTF-32) text without a byte-order mark: save it as UTF-8"
    if what:
        raise DataError(f"{path}: {what} (one JSON object per line, UTF-8)")


def _whole_file_problem(path: Path, any_read: bool) -> list[str]:
    """One line if the file is a JSON array (its first line opens it), objects written over several lines, or CSV
    (no line of it reads), which JSON Lines is not."""
    first = ""
    with path.open("rb") as f:
        for raw in itertools.islice(iter(lambda: f.readline(4096), b""), 100):  # the first line that is not blank
            text = raw.decode("utf-8-sig", errors="replace")
            first = "".join(itertools.dropwhile(lambda c: c.isspace() or _invisible(c), text)).strip()
            if first:
                break
    if first.startswith("["):
        return [f"{path}: a JSON array, not JSON Lines: write one JSON object per line (no [ ] around them)"]
    if first == "{":
        return [f"{path}: JSON objects written over several lines: write each on one line (`jq -c . {path.name}`)"]
    if not any_read and not first.startswith("{") and ("," in first or "\t" in first):
        example = '{"question": "...", "answer": "..."}'
        return [f"{path}: looks like CSV or TSV, not JSON Lines: write one JSON object per line, e.g. {example}"]
    return []


class _Written(float):
    """A JSON number with a fraction or exponent, and the text it was written as."""

    text: str

    def __new__(cls, text: str) -> "_Written":
        number = super().__new__(cls, text)
        number.text = text
        return number

    def answer(self) -> str:
        """As an answer: its value's shortest text (4.0 as 4, 2.50 as 2.5), unless a float cannot hold the value
        written (123456789012345678.0 is 123456789012345680 as a float, 1e400 is inf): then the text itself."""
        shortest = str(int(self)) if self.is_integer() else str(float(self))  # (answer_text's, for a float)
        return shortest if math.isfinite(self) and Decimal(shortest) == Decimal(self.text) else self.text


def _plain(value: Any) -> Any:
    """`value` with its numbers as plain floats, refused where a float cannot hold them (JSON has no inf)."""
    if isinstance(value, _Written):
        if not math.isfinite(value):
            raise ValueError(f"{value.text} is too large a number for a float: write it as text, in quotes")
        return float(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _parse_line(text: str, data_format: str = "default") -> DatasetLine:
    try:
        obj = json.loads(
            text, parse_constant=_not_json, parse_float=_Written, parse_int=_whole, object_pairs_hook=one_value_per_key
        )
    except json.JSONDecodeError as e:
        if e.msg == "Extra data" and text[e.pos :].strip() == ",":  # copied out of an array
            raise ValueError("a comma after the object: remove it (JSON Lines puts nothing between lines)") from None
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno}{_invisible_at(text, e.pos)})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    _check_key_spelling(obj)
    if data_format == "llamafactory":
        obj = _from_alpaca(obj)
    if isinstance(obj.get("answer"), _Written):
        obj["answer"] = obj["answer"].answer()
    extra = {k: obj.pop(k) for k in list(obj) if k not in KNOWN_KEYS}
    if extra:
        meta = obj.get("meta")
        if isinstance(meta, dict) and (both := sorted(extra.keys() & meta.keys())):  # one value would be lost
            raise ValueError(f"key {both[0]!r} is both beside the known keys and in 'meta': keep one of them")
        obj["meta"] = {**extra, **meta} if isinstance(meta, dict) else (meta if meta is not None else extra)
    depth = _depth(obj.get("meta"))
    if depth > MAX_META_DEPTH:  # deeper values broke the SQL insert's JSON encoder with a RecursionError
        raise ValueError(f"field 'meta' (or a key beside the known ones) nests {depth} levels, over {MAX_META_DEPTH}")
    return validated_line(_plain(obj))


class DuplicateKey(ValueError):
    pass


def _check_key_spelling(obj: dict[str, Any]) -> None:
    """Refuse a known key with a space or an invisible character in it ("answer " or "answer" and a U+200B): it went
    to meta, and the row had no answer."""
    for key in obj:
        bare = "".join(c for c in key if not _invisible(c)).strip()
        if bare != key and bare in KNOWN_KEYS | ALPACA_KEYS:
            odd = next((c for c in key if _invisible(c)), None)
            what = f"an invisible U+{ord(odd):04X}" if odd else "white space at its end or start"
            raise ValueError(f"key {key!r} is {bare!r} with {what}: remove it")


def one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict (json.loads' object_pairs_hook), refused where a key appears twice: json keeps the
    last value unsaid, and an answer or a meta field was silently replaced."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise DuplicateKey(f"key {twice!r} appears twice in one object: keep one")
    return obj


def _invisible_at(text: str, position: int) -> str:
    """What to add to a JSON error where it stopped at a character that does not show (a zero-width space, a
    byte-order mark, a no-break space: text copied from a web page): its code point, to remove."""
    char = text[position] if position < len(text) else ""
    return f", an invisible U+{ord(char):04X} there: remove it" if char and _invisible(char) else ""


def _invisible(char: str) -> bool:
    """A format character (zero-width space, byte-order mark, word joiner) or a space other than " " (no-break)."""
    return unicodedata.category(char) in ("Cf", "Zs") and char != " "


def validated_line(obj: dict[str, Any]) -> DatasetLine:
    """`obj` as a data set line, or a ValueError that says which field is wrong and why, in one line."""
    try:
        return DatasetLine.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "line"
        if len(err["loc"]) > 1 and field in UNION_HINTS:  # a union type: say what is allowed
            message = UNION_HINTS[field]
        else:
            message = err["msg"].removeprefix("Value error, ")
            message = message[:1].lower() + message[1:]  # "Field required" reads "field 'question': field required"
        value = repr(obj.get(field))
        value = value if len(value) <= 200 else f"{value[:200]}... ({len(value)} characters)"  # one readable line
        got = "" if err["type"] == "missing" else f" (got {value})"
        if field == "question" and err["type"] == "missing":
            got = _named_otherwise(obj.get("meta"), QUESTION_NAMES, "question")
        raise ValueError(f"field '{field}': {message}{got}") from None


# What other data sets call a question and its answer (MATH, Alpaca, Hugging Face sets): a hint, never a guess.
QUESTION_NAMES = ("problem", "Question", "prompt", "query", "input", "instruction")
ANSWER_NAMES = ("solution", "Answer", "final_answer", "output", "target", "label", "gold")


def _named_otherwise(extra: object, names: tuple[str, ...], field: str) -> str:
    """The hint that the line has one of `names` beside the known keys ("'problem': rename it to question")."""
    found = [name for name in names if isinstance(extra, dict) and name in extra]
    if not found:
        return ""
    alpaca = " (or pass --data_format llamafactory)" if "instruction" in found else ""
    return f"; the line has {found[0]!r}: rename it to {field}{alpaca}"


def _not_json(constant: str) -> NoReturn:
    """NaN and Infinity, which Python's reader takes and JSON has not: an answer "nan" is no answer."""
    raise ValueError(f"{constant} is not a JSON value: write a number, or the text in quotes")


def _whole(text: str) -> int:
    """A JSON integer; one longer than Python reads (4300 digits) is refused as such, not with its advice to call
    sys.set_int_max_str_digits."""
    if len(text.lstrip("-")) > sys.get_int_max_str_digits() > 0:
        raise ValueError(f"a number of {len(text.lstrip('-'))} digits: write it as text, in quotes")
    return int(text)


def _depth(value: Any) -> int:
    """How deep lists and objects nest in `value` (0 for a scalar), counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            todo += [(child, level + 1) for child in children]
    return deepest


def _from_alpaca(obj: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(obj.get("instruction"), str) or "output" not in obj:
        raise ValueError("--data_format llamafactory: expected fields 'instruction' (text), 'input' and 'output'")
    for taken, by in (("question", "instruction"), ("answer", "output")):
        if taken in obj:  # it would be replaced unsaid
            raise ValueError(f"--data_format llamafactory: the line has {taken!r} beside {by!r}: keep one of them")
    kinds = {"input": (str, type(None)), "output": (str, int, float, type(None))}  # (a bool is an int: below)
    for field, kind in kinds.items():  # named as the line names them (a list input was dropped unsaid)
        if not isinstance(obj.get(field), kind) or isinstance(obj.get(field), bool):
            allowed = "text" if field == "input" else "text or a number"
            raise ValueError(f"--data_format llamafactory: field {field!r} must be {allowed}")
    parts = [obj.pop("instruction"), obj.pop("input", None) or ""]
    question = "\n\n".join(p for p in parts if isinstance(p, str) and p.strip())
    answer = obj.pop("output")  # before the rest goes to meta: the answer is not kept twice
    return {**obj, "question": question, "answer": answer}


def answer_text(answer: str | int | float | None) -> str | None:
    if answer is None or isinstance(answer, str):
        return answer
    if isinstance(answer, float) and answer.is_integer():
        return str(int(answer))
    return str(answer)


async def dataset_size(db: Database, name: str) -> int:
    async with db.sessions() as session:
        count = select(func.count()).select_from(DatasetSample).where(DatasetSample.dataset == name)
        return (await session.execute(count)).scalar_one()


async def store_dataset(
    db: Database, name: str, rows: list[DatasetLine], mode: Literal["new", "replace", "append"] = "new"
) -> int:
    """Write the rows in one transaction. `new` refuses an existing data set. Returns rows written."""
    try:
        replaced = await _store(db, name, rows, mode)
    except IntegrityError as e:  # a writer that takes no lock (an older utu) took the same row indexes meanwhile
        raise DataError(
            f"data set {name!r} changed while this upload wrote it (another upload at the same time?); nothing of "
            "this one was kept: run it again"
        ) from e
    if replaced:
        log.info("data set %r: its %d earlier rows were replaced", name, replaced)
    return len(rows)


async def _store(db: Database, name: str, rows: list[DatasetLine], mode: Literal["new", "replace", "append"]) -> int:
    """Returns how many earlier rows were replaced."""
    async with db.transaction() as session:
        if not db.is_sqlite:  # one writer of a data set at a time (SQLite's BEGIN IMMEDIATE already makes it so)
            await session.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"utu data set {name}"))))
        count = select(func.count()).select_from(DatasetSample).where(DatasetSample.dataset == name)
        existing = await session.scalar(count) or 0
        if existing and mode == "new":
            raise DataError(
                f"data set {name!r} already has {existing} rows in {db.describe()}: pass --replace to overwrite it "
                "or --append to add to it"
            )
        start = 0
        if mode == "replace":
            await session.execute(delete(DatasetSample).where(DatasetSample.dataset == name))
        elif existing:
            last = select(func.max(DatasetSample.index)).where(DatasetSample.dataset == name)
            start = 1 + (await session.execute(last)).scalar_one()  # not NULL: the data set has rows
        values = (
            {
                "dataset": name,
                "index": start + i,
                "source": row.source,
                "question": row.question,
                "answer": answer_text(row.answer),
                "level": None if row.level is None else str(row.level),
                "topic": row.topic,
                "meta": row.meta,
                "source_index": row.source_index,
                "file_name": row.file_name,
            }
            for i, row in enumerate(rows)
        )
        # Core inserts in batches, not ORM objects: a million-line upload held them all (about 5 KB a row)
        for batch in iter(lambda: list(itertools.islice(values, INSERT_BATCH)), []):
            await session.execute(insert(DatasetSample), batch)
    return existing if mode == "replace" else 0


BUNDLED_DIR = Path(str(importlib.resources.files("utu") / "_dataset")).resolve()  # dataset/, shipped in the package


def bundled_datasets() -> dict[str, Path]:
    """The data sets shipped in `dataset/`, by name."""
    return {p.stem: p for p in sorted(BUNDLED_DIR.glob("*.jsonl"))}


def check_dataset_reachable(db: Database, name: str) -> None:
    """Before anything is written: a data set that is not bundled can only come from a database that exists
    (a run of an unknown set once left an empty database behind)."""
    if name not in bundled_datasets() and not db.exists():
        raise _not_there(db, name)


def _not_there(db: Database, name: str) -> DataError:
    if name in HUB_SET_NAMES:
        return DataError(f"data set {name!r} is not in {db.describe()}: load it from the hub: {load_command(name)}")
    return DataError(
        f"data set {name!r} is not in {db.describe()} and not bundled: upload it with "
        f"`python scripts/data/upload_dataset.py --file_path FILE --dataset_name {name}`"
    )


async def ensure_dataset(db: Database, name: str) -> int:
    """Make sure `name` is in the database, loading the bundled file of that name if needed. Returns its size."""
    size = await dataset_size(db, name)
    if size:
        return size
    path = bundled_datasets().get(name)
    if path is None:
        raise _not_there(db, name)
    try:
        return await store_dataset(db, name, parse_dataset_file(path, name)[1])
    except (DataError, IntegrityError):  # another run loaded the same bundled set meanwhile: use theirs
        if size := await dataset_size(db, name):
            return size
        raise


async def select_questions(db: Database, name: str, limit: int | None = None, offset: int = 0) -> list[DatasetSample]:
    """The first `limit` questions of a data set after its first `offset` (all without a limit), in index order."""
    query = select(DatasetSample).where(DatasetSample.dataset == name).order_by(DatasetSample.index).offset(offset)
    if limit:
        query = query.limit(limit)
    async with db.sessions() as s:
        return list(await s.scalars(query))


def content_digest(questions: list[DatasetSample]) -> dict[str, Any]:
    """What a fingerprint needs of a selection: its size and a hash of its indices, questions and answers, so
    that a data set replaced under the same name (or a changed limit) is noticed, not silently reused."""
    h = hashlib.sha256()
    for q in questions:
        h.update(json.dumps([q.index, q.question, q.answer], ensure_ascii=False).encode())
    return {"questions": len(questions), "sha256": h.hexdigest()}
