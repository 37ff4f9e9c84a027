"""`python -m utu.commands.library screen --file F.jsonl [--json]`: what the library's screening says of each row.

A row is {"question": ..., "experience": ...}, with optionally "answer" (the question's) and "library" (the
experiences it must not repeat); the question may be empty. Each row gets one line, KEPT or REFUSED with the
reason; with --json one object per row: {"refused": reason or null, "experience": ...}. The screening's knobs
are flags of the same name (--max_particulars 2, --require_directive false).
"""

import argparse
import contextlib
import json
import stat
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from utu import cli
from utu.config.flags import add_flags, given
from utu.config.models import ScreeningConfig
from utu.db.dataset_io import MAX_LINE_BYTES, DuplicateKey, capped_lines, one_value_per_key
from utu.errors import ConfigError
from utu.practice.screening import Question, Source, screen


class Row(BaseModel):
    """A misspelled key is an error, not a silently different verdict; notes about a row may ride along."""

    model_config = ConfigDict(extra="forbid")
    question: str = ""
    answer: str | int | float | None = None
    experience: str
    library: list[str] = []
    origin: str | None = None  # where a corpus row comes from
    domain: str | None = None
    note: str | None = None


SHOWN_CHARS = 300  # of an experience, in the plain verdict line


def add_parser(commands) -> None:
    parser = commands.add_parser("screen", help="the screening's verdict on each experience of a JSONL file")
    parser.add_argument(
        "--file", required=True, type=Path, help='JSONL rows {"question": ..., "experience": ...} (-: standard input)'
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.set_defaults(screening_flags=add_flags(parser, ScreeningConfig, over_a_config=False))


def read_rows(path: Path) -> list[Row]:
    """The file's rows; a bad file or line is a `ConfigError` naming the file, the line and the field."""
    hint = "give --file a JSONL file of {question, experience} rows, or - for standard input"
    if path.is_dir():
        raise ConfigError(f"{path}: a directory ({hint})")
    if str(path) != "-" and not path.exists():
        raise ConfigError(f"{path}: no such file ({hint})")
    mode = 0 if str(path) == "-" else path.stat().st_mode
    if mode and not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # /dev/zero was read until the memory ran out
        raise ConfigError(f"{path}: not a file or a pipe (a device, a socket; {hint})")
    rows = []
    with contextlib.nullcontext(sys.stdin.buffer) if str(path) == "-" else path.open("rb") as f:
        for number, raw in enumerate(capped_lines(f, MAX_LINE_BYTES), 1):
            if raw is None:
                raise ConfigError(f"{path}:{number}: longer than {MAX_LINE_BYTES} bytes: one row per line")
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark is no part of the first row
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(f"{path}:{number}: not UTF-8 text (byte {raw[e.start]:#x}); {hint}") from None
            if line.strip():
                rows.append(_row(line, f"{path}:{number}"))
    if not rows:
        raise ConfigError(f"{path}: no rows ({hint})")
    return rows


def _row(line: str, where: str) -> Row:
    try:  # only to refuse a key given twice: pydantic reads the line, and says what else is wrong with it
        json.loads(line, object_pairs_hook=one_value_per_key)
    except DuplicateKey as e:
        raise ConfigError(f"{where}: {e}") from None
    except (ValueError, RecursionError):
        pass
    try:
        return Row.model_validate_json(line)
    except ValidationError as e:
        error = e.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "the line"
        raise ConfigError(
            f"{where}: {field}: {error['msg']} (a row is a JSON object with a string 'experience' "
            "and optionally 'question', 'answer', 'library')"
        ) from None


def verdicts(rows: list[Row], config: ScreeningConfig) -> list[str | None]:
    def source(row: Row) -> Source:
        answer = None if row.answer is None else str(row.answer)
        return Source([Question(row.question, answer)] if row.question or answer else [])

    return [screen(row.experience.strip(), source(row), row.library, config) for row in rows]


def run(args: argparse.Namespace) -> int:
    try:
        config = ScreeningConfig(**given(args, args.screening_flags))
    except ValidationError as e:
        error = e.errors()[0]
        raise ConfigError(f"--{error['loc'][0]}: {error['msg']}") from None
    rows = read_rows(args.file)
    results = verdicts(rows, config)
    for row, refused in zip(rows, results, strict=True):
        if args.json:
            print(cli.printed_json({"refused": refused, "experience": row.experience}))
        else:
            shown = row.experience if len(row.experience) <= SHOWN_CHARS else row.experience[:SHOWN_CHARS] + "..."
            print(cli.printable(f"REFUSED ({refused}): {shown}" if refused else f"KEPT: {shown}"))
    refused_count = sum(r is not None for r in results)
    print(f"{args.file}: {refused_count} of {len(rows)} refused", file=sys.stderr)
    return 0
