"""scripts/data/upload_dataset.py as a user runs it: bad lines, all-or-nothing, refusing to overwrite."""

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.conftest import ROOT, run_script
from utu.db import Database, DatasetSample
from utu.db.dataset_io import dataset_size

UPLOAD = str(ROOT / "scripts/data/upload_dataset.py")

BAD_LINES = {
    "not json": ("{oops", "not valid JSON"),
    "a key with an invisible character": (
        '{"question": "q", "answer\u200b": "1"}',
        "is 'answer' with an invisible U+200B",
    ),
    "a key with a space": ('{"question ": "q"}', "key 'question ' is 'question' with white space at its end or start"),
    "a huge whole number": ('{"question": "q", "answer": ' + "9" * 5000 + "}", "a number of 5000 digits: write it as"),
    "a comma after it": ('{"question": "q", "answer": "1"},', "a comma after the object: remove it"),
    "a key twice": ('{"question": "q", "answer": "1", "answer": "2"}', "key 'answer' appears twice in one object"),
    "a meta key twice": ('{"question": "q", "meta": {"a": 1, "a": 2}}', "key 'a' appears twice in one object"),
    "an invisible character": ('\u200b{"question": "q"}', "column 1, an invisible U+200B there: remove it"),
    "a no-break space": ('{"question":\u00a0"q"}', "column 13, an invisible U+00A0 there: remove it"),
    "not an object": ("[1, 2]", "expected a JSON object, got list"),
    "no question": ('{"answer": "3"}', "field 'question': field required"),
    "question named otherwise": ('{"problem": "1+2?", "answer": "3"}', "the line has 'problem': rename it to question"),
    "alpaca": ('{"instruction": "Add.", "output": "3"}', "rename it to question (or pass --data_format llamafactory)"),
    "empty question": ('{"question": "", "answer": "3"}', "field 'question'"),
    "blank question": ('{"question": "   ", "answer": "3"}', "field 'question': must not be blank"),
    "question not a string": ('{"question": 12, "answer": "3"}', "field 'question'"),
    "boolean answer": ('{"question": "q", "answer": true}', "field 'answer'"),
    "list answer": ('{"question": "q", "answer": [1]}', "field 'answer'"),
    "meta not an object": ('{"question": "q", "meta": 3}', "field 'meta'"),
    "a key beside the known ones and in meta": (
        '{"question": "q", "id": 1, "meta": {"id": 2}}',
        "key 'id' is both beside the known keys and in 'meta': keep one of them",
    ),
    # what the table's columns hold: past it SQLite raised OverflowError and Postgres refuses mid-write
    "huge source index": ('{"question": "q", "source_index": 99999999999999999999}', "field 'source_index'"),
    "long level": ('{"question": "q", "level": "' + "x" * 51 + '"}', "field 'level': must be at most 50 characters"),
    "long numeric level": ('{"question": "q", "level": ' + "9" * 51 + "}", "field 'level': must be at most 50"),
    "long topic": ('{"question": "q", "topic": "' + "x" * 201 + '"}', "field 'topic'"),
    "NUL in question": ('{"question": "q\\u0000", "answer": "3"}', "field 'question': contains a NUL character"),
    "NUL in answer": ('{"question": "q", "answer": "3\\u0000"}', "field 'answer': contains a NUL character"),
}


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def rows(db_url: str, name: str) -> list[DatasetSample]:
    async def fetch():
        db = Database(db_url)
        await db.create_tables()
        async with db.sessions() as s:
            result = list(
                await s.scalars(
                    select(DatasetSample).where(DatasetSample.dataset == name).order_by(DatasetSample.index)
                )
            )
        await db.dispose()
        return result

    return asyncio.run(fetch())


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'upload.db'}"


GOOD = [
    '{"dataset": "T", "source": "training_free_grpo", "question": "1+1?", "answer": "2"}',
    '{"question": "2+2?", "answer": 4, "level": 1, "topic": "add"}',
    '{"question": "Name it.", "answer": null, "meta": {"k": "v"}, "id": 17}',
]


@pytest.mark.parametrize("kind", BAD_LINES)
def test_each_bad_line_is_reported_with_file_and_line_and_nothing_is_written(tmp_path, db_url, kind):
    bad, reason = BAD_LINES[kind]
    path = write(tmp_path / "data.jsonl", [GOOD[0], bad, GOOD[1]])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [line for line in lines if line.startswith(f"error: {path}:2: ")], result.stderr
    assert reason in result.stderr
    assert rows(db_url, "T") == []


def test_every_bad_line_is_listed(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", ["{oops", GOOD[0], "[1]", '{"answer": 1}'])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2
    assert [line.split(": ")[1] for line in result.stderr.strip().splitlines()] == [
        f"{path}:1",
        f"{path}:3",
        f"{path}:4",
    ]


def test_a_good_file_gives_exactly_its_rows(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", GOOD)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    stored = rows(db_url, "T")
    assert [(r.index, r.question, r.answer, r.level, r.topic) for r in stored] == [
        (0, "1+1?", "2", None, None),
        (1, "2+2?", "4", "1", "add"),
        (2, "Name it.", None, None, None),
    ]
    assert stored[2].meta == {"id": 17, "k": "v"}  # unknown keys are kept in meta
    assert {r.source for r in stored} == {"training_free_grpo"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (__import__("gzip").compress(b'{"question": "q"}\n'), "gzip-compressed: decompress it first"),
        ('{"question": "q"}\n'.encode("utf-16"), "UTF-16 text: save it as UTF-8"),
        ('{"question": "q"}\n'.encode("utf-32"), "UTF-32 text: save it as UTF-8"),
        ('{"question": "q"}\n'.encode("utf-16-le"), "text without a byte-order mark: save it as UTF-8"),
        ('{"question": "q"}\n'.encode("utf-16-be"), "text without a byte-order mark: save it as UTF-8"),
        (b'[\n  {"question": "q", "answer": "1"},\n  {"question": "r", "answer": "2"}\n]\n', "a JSON array, not JSON"),
        (b"question,answer\n1+1?,2\n2+2?,4\n", "looks like CSV or TSV, not JSON Lines"),
        (b'\n\n[\n  {"question": "q", "answer": "1"}\n]\n', "a JSON array, not JSON"),  # below blank lines
        (b'{\n  "question": "q",\n  "answer": "1"\n}\n', "JSON objects written over several lines: write each on"),
        # copied from a web page: what the JSON error calls invisible is passed over here too
        ('\u00a0\u200b [{"question": "q"},\n{"question": "r"}]\n'.encode(), "a JSON array, not JSON"),
    ],
)
def test_a_file_of_another_kind_is_named_in_one_line(tmp_path, db_url, content, message):
    path = tmp_path / "data.jsonl"
    path.write_bytes(content)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_file_whose_lines_read_gets_its_lines_errors_not_a_guess(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", ["# data, v2", '{"question": "q"}', '{"question": 3}'])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2 and f"{path}:3: field 'question'" in result.stderr and "CSV" not in result.stderr


def test_a_numeric_answer_is_stored_as_its_value(tmp_path, db_url):
    """Its shortest text (a string-matching verifier compares texts), as written where a float cannot hold it."""
    written = ["123456789012345678.0", "1e400", "2.50", "4.0", "4", "-0.5"]
    stored = ["123456789012345678.0", "1e400", "2.5", "4", "4", "-0.5"]  # (through float: ...680, inf)
    path = write(tmp_path / "data.jsonl", [f'{{"question": "q{i}", "answer": {a}}}' for i, a in enumerate(written)])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    assert [r.answer for r in rows(db_url, "T")] == stored
    meta = write(tmp_path / "meta.jsonl", ['{"question": "q", "x": 1.5}', '{"question": "r", "y": 1e400}'])
    refused = run_script(UPLOAD, "--file_path", str(meta), "--dataset_name", "M", "--db_url", db_url)
    assert refused.returncode == 2 and "meta.jsonl:2: 1e400 is too large a number for a float" in refused.stderr


def test_answers_under_another_name_are_said_at_upload(tmp_path, db_url):
    path = write(
        tmp_path / "math.jsonl", ['{"question": "1+2?", "solution": "3"}', '{"question": "2+2?", "solution": "4"}']
    )
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 0, result.stderr  # stored as given: the hint is a warning, never a guess
    said = " ".join(result.stderr.split())
    assert "no line has an 'answer', and 2 of 2 have 'solution' (kept in meta)" in said and "--replace" in said
    assert [r.answer for r in rows(db_url, "T")] == [None, None]


def test_an_upload_under_a_bundled_sets_name_is_warned(tmp_path, db_url):
    path = write(tmp_path / "mine.jsonl", GOOD)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "AIME24", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    assert "'AIME24' is also a bundled data set's name" in " ".join(result.stderr.split())
    mine = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "Mine", "--db_url", db_url)
    assert "also a bundled" not in " ".join(mine.stderr.split())


def test_second_upload_is_refused_unless_replace_or_append(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", GOOD)
    args = [UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url]
    assert run_script(*args).returncode == 0
    again = run_script(*args)
    assert again.returncode == 2 and "--replace" in again.stderr
    assert len(rows(db_url, "T")) == 3
    assert run_script(*args, "--append").returncode == 0
    assert [r.index for r in rows(db_url, "T")] == list(range(6))
    one = write(tmp_path / "one.jsonl", [GOOD[0]])
    replaced = run_script(UPLOAD, "--file_path", str(one), "--dataset_name", "T", "--db_url", db_url, "--replace")
    assert replaced.returncode == 0 and "its 6 earlier rows were replaced" in " ".join(replaced.stderr.split())
    assert len(rows(db_url, "T")) == 1


def test_dataset_name_defaults_to_the_lines_field(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", ['{"dataset": "FromFile", "question": "q"}'])
    assert run_script(UPLOAD, "--file_path", str(path), "--db_url", db_url).returncode == 0
    assert len(rows(db_url, "FromFile")) == 1


def test_dataset_name_renames_the_lines_own_names(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", ['{"dataset": "Other", "question": "q1"}', '{"question": "q2"}'])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    assert [r.question for r in rows(db_url, "T")] == ["q1", "q2"] and rows(db_url, "Other") == []
    assert "'Other' are stored as 'T'" in result.stderr


def test_a_line_that_is_not_utf8_is_named(tmp_path, db_url):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"question": "fine"}\n{"question": "caf\xe9"}\n')
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {path}:2: not UTF-8 text (byte 0xe9 at column 18)"
    assert rows(db_url, "T") == []


def test_a_bom_and_windows_line_ends_are_read_nan_is_refused_and_a_cut_line_is_named_where_it_ends(tmp_path, db_url):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "q1", "answer": "1"}\r\n{"question": "q2", "answer": 2}\r\n')
    args = ["--dataset_name", "T", "--db_url", db_url]
    assert run_script(UPLOAD, "--file_path", str(path), *args).returncode == 0
    assert [(r.question, r.answer) for r in rows(db_url, "T")] == [("q1", "1"), ("q2", "2")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q3", "answer": NaN}\n{"question": "q4", "answer": \n')
    result = run_script(UPLOAD, "--file_path", str(bad), *args, "--append")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {bad}:1: NaN is not a JSON value: write a number, or the text in quotes",
        f"error: {bad}:2: not valid JSON (Expecting value at column 30)",
    ]
    assert len(rows(db_url, "T")) == 2


def test_repeated_questions_are_said_and_stored_as_given(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", ['{"question": "q1"}', '{"question": "q2"}', '{"question": "q1"}'])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    assert "1 of 3 questions repeat an earlier one (first: data lines 1 and 3, 'q1')" in " ".join(result.stderr.split())
    assert len(rows(db_url, "T")) == 3


def test_a_directory_is_named_as_such(tmp_path, db_url):
    result = run_script(UPLOAD, "--file_path", str(tmp_path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path}: is a directory; give the JSONL file itself"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("foo://bar", "database URL foo://bar: Can't load plugin"),
        ("not a url", "is not a URL"),
        ("sqlite:///", "names no file: an in-memory database keeps nothing"),
        ("sqlite:////nonexistent/dir/x.db", "the folder /nonexistent/dir does not exist"),
        ("sqlite:///:memory:", "an in-memory database keeps nothing"),
        ("sqlite:///file::memory:?uri=true", "an in-memory database keeps nothing"),
        ("sqlite+aiosqlite:///file::memory:?cache=shared&uri=true", "an in-memory database keeps nothing"),
        ("sqlite:///file:x.db?mode=memory&uri=true", "an in-memory database keeps nothing"),
        ("sqlite:///file:/tmp/x.db?vfs=memdb&uri=true", "an in-memory database keeps nothing"),
        ("sqlite:////dev/null", "/dev/null is not a regular file"),
        ("sqlite:////tmp", "/tmp is not a regular file"),
    ],
)
def test_a_bad_database_url_is_one_line(tmp_path, url, message):
    path = write(tmp_path / "data.jsonl", GOOD)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", url, cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr
    assert not Path("/dev/null-journal").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_metadata_nested_past_the_limit_is_one_line(tmp_path, db_url):
    """About 980 levels passed the JSON reader and broke the SQL insert with a RecursionError."""
    deep = '{"a": ' * 960 + '{"x": 1}' + "}" * 960  # written out: json.dumps would recurse as deep in the test
    path = write(tmp_path / "deep.jsonl", [f'{{"question": "q", "answer": "1", "extra": {deep}}}'])
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "deep.jsonl:1: field 'meta' (or a key beside the known ones) nests 962 levels, over 64" in result.stderr
    assert rows(db_url, "T") == []


def test_a_file_that_is_not_a_database_is_one_line_and_left_alone(tmp_path):
    path = write(tmp_path / "data.jsonl", GOOD)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a database\n" * 100)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", f"sqlite:///{notes}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "cannot open it: file is not a database" in result.stderr
    assert notes.read_text() == "my notes, not a database\n" * 100


def test_a_database_that_refuses_the_write_is_one_line_and_keeps_what_it_held(tmp_path, db_url):
    path = write(tmp_path / "data.jsonl", GOOD)
    assert run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url).returncode == 0
    read_only = f"sqlite:///file:{tmp_path / 'upload.db'}?mode=ro&uri=true"
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--replace", "--db_url", read_only)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "refused (attempt to write a readonly database); nothing of this transaction was kept" in result.stderr
    assert len(rows(db_url, "T")) == len(GOOD)


def test_a_sync_sqlite_driver_is_taken_as_its_async_twin(tmp_path):
    path = write(tmp_path / "data.jsonl", GOOD)
    result = run_script(
        UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", f"sqlite+pysqlite:///{tmp_path / 'x.db'}"
    )
    assert result.returncode == 0, result.stderr
    assert [r.question for r in rows(f"sqlite:///{tmp_path / 'x.db'}", "T")] == ["1+1?", "2+2?", "Name it."]


@pytest.mark.parametrize("name", ["../x", "a/b", "tab\there", "x" * 201, ""])
def test_a_dataset_name_is_a_plain_name(tmp_path, db_url, name):
    path = write(tmp_path / "data.jsonl", GOOD)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", name, "--db_url", db_url)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--dataset_name" in result.stderr and "is not a plain name" in result.stderr
    in_lines = write(tmp_path / "named.jsonl", [json.dumps({"dataset": "../up", "question": "q", "answer": "1"})])
    result = run_script(UPLOAD, "--file_path", str(in_lines), "--db_url", db_url)
    assert result.returncode == 2 and "named.jsonl:1: field 'dataset': '../up' is not a plain name" in result.stderr


def test_a_huge_line_is_refused_without_holding_it(tmp_path, db_url):
    path = tmp_path / "huge.jsonl"
    with path.open("w") as f:
        f.write(GOOD[0] + "\n")
        f.write('{"question": "' + "x" * (3 * 1024 * 1024) + '", "answer": "1"}\n')
        f.write(GOOD[1] + "\n")
    result = run_script(
        UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url, "--max_line_bytes", "100000"
    )
    assert result.returncode == 2 and "huge.jsonl:2: longer than 100000 bytes" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and rows(db_url, "T") == []


def test_many_bad_lines_are_counted_not_all_printed(tmp_path, db_url):
    path = write(tmp_path / "bad.jsonl", ["{oops"] * 5000)
    result = run_script(UPLOAD, "--file_path", str(path), "--dataset_name", "T", "--db_url", db_url)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 21 and lines[-1].endswith("... and 4980 more bad lines")


def test_missing_file_is_one_clear_line(tmp_path, db_url):
    result = run_script(UPLOAD, "--file_path", str(tmp_path / "nope.jsonl"), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nope.jsonl'}: no such file"


def test_bundled_sets_load_offline_and_match_their_files(tmp_path, db_url):
    script = "scripts/data/process_training_free_GRPO_data.py"
    result = run_script(script, "--datasets", "MAWPS_singleop", "AIME25", "--db_url", db_url)
    assert result.returncode == 0, result.stderr
    expected = [json.loads(line) for line in (ROOT / "dataset/AIME25.jsonl").read_text().splitlines()]
    stored = rows(db_url, "AIME25")
    assert [(r.question, r.answer) for r in stored] == [(e["question"], e["answer"]) for e in expected]
    assert stored[0].answer == "70"
    # Loading again skips what is there.
    assert "already loaded" in run_script(script, "--datasets", "AIME25", "--db_url", db_url).stderr


async def test_bundled_sizes(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    await db.create_tables()
    assert await dataset_size(db, "nothing") == 0
    await db.dispose()


def test_youtu_agents_llamafactory_format_and_columns(tmp_path, db_url):
    alpaca = write(
        tmp_path / "alpaca.jsonl",
        [
            '{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5", "source_index": 7}',
            '{"instruction": "What is 10 minus 4?", "input": "", "output": 6, "file_name": "sheet.xlsx"}',
        ],
    )
    result = run_script(
        UPLOAD, "--file_path", str(alpaca), "--dataset_name", "A", "--data_format", "llamafactory", "--db_url", db_url
    )
    assert result.returncode == 0, result.stderr
    first, second = rows(db_url, "A")
    assert (first.question, first.answer, first.source_index) == ("Add the numbers.\n\n2 and 3", "5", 7)
    assert (second.question, second.answer, second.file_name) == ("What is 10 minus 4?", "6", "sheet.xlsx")
    assert not first.meta and not second.meta  # the answer is not kept in meta too
    assert first.source == "training_free_grpo"  # usable for practice (Youtu-Agent left it empty)
    bad = write(tmp_path / "bad.jsonl", ['{"question": "q", "answer": "a"}'])
    result = run_script(
        UPLOAD, "--file_path", str(bad), "--dataset_name", "B", "--data_format", "llamafactory", "--db_url", db_url
    )
    assert result.returncode == 2 and f"{bad}:1: --data_format llamafactory: expected fields" in result.stderr
    both = write(tmp_path / "both.jsonl", ['{"instruction": "i", "input": "", "output": "o", "answer": "x"}'])
    result = run_script(
        UPLOAD, "--file_path", str(both), "--dataset_name", "C", "--data_format", "llamafactory", "--db_url", db_url
    )
    assert result.returncode == 2 and "has 'answer' beside 'output': keep one of them" in result.stderr
    for line, field in (('"input": 5, "output": "o"', "input"), ('"input": ["a"], "output": "o"', "input")) + (
        ('"output": {"a": 1}', "output"),
        ('"output": true', "output"),
    ):  # a number or a list as input was dropped unsaid; an output's error named 'answer', not the user's field
        odd = write(tmp_path / "odd.jsonl", [f'{{"instruction": "i", {line}}}'])
        result = run_script(
            UPLOAD, "--file_path", str(odd), "--dataset_name", "D", "--data_format", "llamafactory", "--db_url", db_url
        )
        assert result.returncode == 2 and f"llamafactory: field '{field}' must be text" in result.stderr, line


def test_a_file_name_too_long_is_one_line(tmp_path, db_url):
    """A name over 255 bytes made `Path.is_dir` raise: a traceback from upload, screen, eval and export alike."""
    long = tmp_path / ("a" * 300 + ".jsonl")
    for command in (
        [UPLOAD, "--file_path", str(long), "--dataset_name", "T", "--db_url", db_url],
        ["-m", "utu.commands.library", "screen", "--file", str(long)],
    ):
        result = run_script(*command)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "a file name too long (a name in a path holds at most 255 bytes, a path 4096)" in result.stderr


def test_a_dangling_link_is_named_as_one(tmp_path, db_url):
    link = tmp_path / "data.jsonl"
    link.symlink_to(tmp_path / "moved.jsonl")
    result = run_script(UPLOAD, "--file_path", str(link), "--dataset_name", "T", "--db_url", db_url)
    assert result.returncode == 2 and f"{link}: a link to nothing (or a loop)" in result.stderr, result.stderr
