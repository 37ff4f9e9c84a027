"""Multi-stage practice (the guide's "practise on an easier set, then continue on harder examples"): a
second practice starts from the first one's library, whether given as its enhanced agent or as
practice.init_library, rolls out with it, records it as the state before step 0, and never drops it."""

import json
import re

import pytest

from tests.practice.helpers import agent_script, evolving_learner, query, run_practice, setup_workspace

FIRST = "When adding, line up the digits."
SECOND = "When adding, check the sum by subtracting."


def first_stage(tmp_path, stub):
    configs, db_url = setup_workspace(tmp_path)
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        stub(agent_script()),
        stub(evolving_learner(experiences=[FIRST])),
        "--epochs",
        "1",
        "--batch_size",
        "4",
    )
    assert result.returncode == 0, result.stderr
    return configs, db_url


def adds(text):
    return evolving_learner(group_update=lambda library: [{"operation": "ADD", "content": text}], experiences=[text])


def test_practice_from_an_enhanced_agent_starts_from_its_library(tmp_path, stub):
    configs, db_url = first_stage(tmp_path, stub)
    agent = stub(agent_script())
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        agent,
        stub(adds(SECOND)),
        "--exp_id",
        "t2",
        "--epochs",
        "1",
        "--batch_size",
        "4",
        "--agent_config",
        "runs/t/enhanced_agent.yaml",
    )
    assert result.returncode == 0, result.stderr
    # every rollout carried the first stage's library
    rollouts = [r for r in agent.requests if "What is" in r["messages"][-1]["content"]]
    assert rollouts and all(FIRST in r["messages"][0]["content"] for r in rollouts)
    (initial,) = query(db_url, "SELECT experiences, next_id FROM experience_snapshots WHERE exp_id='t2' AND step=-1")
    assert json.loads(initial[0]) == {"G0": FIRST} and initial[1] == 1
    exported = (tmp_path / "runs/t2/enhanced_agent.yaml").read_text()
    assert FIRST in exported and SECOND in exported  # kept, and the new one got the next id
    (last,) = query(db_url, "SELECT experiences FROM experience_snapshots WHERE exp_id='t2' AND step=0")
    assert json.loads(last[0]) == {"G0": FIRST, "G1": SECOND}


def test_init_library_names_an_experiment_and_step(tmp_path, stub):
    configs, db_url = first_stage(tmp_path, stub)
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        stub(agent_script()),
        stub(adds(SECOND)),
        "--exp_id",
        "t2",
        "--epochs",
        "1",
        "--batch_size",
        "4",
        "--init_library",
        "t@last",
    )
    assert result.returncode == 0, result.stderr
    (initial,) = query(db_url, "SELECT experiences FROM experience_snapshots WHERE exp_id='t2' AND step=-1")
    assert json.loads(initial[0]) == {"G0": FIRST}


def test_two_starting_libraries_or_a_missing_one_are_refused(tmp_path, stub):
    configs, db_url = first_stage(tmp_path, stub)
    both = run_practice(
        tmp_path,
        configs,
        db_url,
        stub(agent_script()),
        stub(adds(SECOND)),
        "--exp_id",
        "t2",
        "--agent_config",
        "runs/t/enhanced_agent.yaml",
        "--init_library",
        "t@last",
    )
    assert both.returncode == 2 and "both give a starting library" in both.stderr
    for spec, message in (
        ("nowhere@last", "no practice step has been recorded"),
        ("missing.yaml", "no such file"),
        ("t@7", "no step 7; the steps recorded are 0 to"),
        ("t@99999999999999999999", "practice.init_library t@99999999999999999999: expected a step number"),
    ):
        result = run_practice(
            tmp_path,
            configs,
            db_url,
            stub(agent_script()),
            stub(adds(SECOND)),
            "--exp_id",
            "t3",
            "--init_library",
            spec,
        )
        assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not query(db_url, "SELECT * FROM experience_snapshots WHERE exp_id IN ('t2', 't3')")


def test_a_second_stage_that_learns_nothing_fails(tmp_path, stub):
    configs, db_url = first_stage(tmp_path, stub)
    same = stub(agent_script(pattern=("right",)))  # no contrast: nothing to learn
    result = run_practice(
        tmp_path,
        configs,
        db_url,
        same,
        stub(adds(SECOND)),
        "--exp_id",
        "t2",
        "--epochs",
        "1",
        "--agent_config",
        "runs/t/enhanced_agent.yaml",
    )
    assert result.returncode != 0 and "still the 1 it started from" in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "twice.yaml",
            "G0: first\nG1: other\nG0: second\n",
            "twice.yaml:3: practice.init_library: cannot read it: the key 'G0' is given twice",
        ),
        ("twice.json", '{"experiences": {"G0": "first", "G0": "second"}}', "key 'G0' appears twice in one object"),
        (
            "as_one_id.yaml",
            "1: first\n'1': second\n",
            "as_one_id.yaml:2: practice.init_library: cannot read it: the key '1' is given twice",
        ),  # both the id '1'
        ("my@lib.yaml", None, "no such file"),  # an @ in a file's name is no EXP@STEP
        ("lib.md", "# Experiences of t, step 3\n\n- **[G0]** a rule\n", "a Markdown export is for reading"),
        ("empty.yaml", "experiences: {}\n", "it holds no experience"),
        ("agent.yaml", "name: a\ninstructions: Be brief.\nmodel: {}\n", "an agent config without `experiences`"),
        ("list.yaml", "- one\n- two\n", "expected a mapping id -> experience text"),
        ("number.yaml", "G0: 1\n", "experience G0: expected its text, got int 1"),
        ("blank.yaml", 'G0: "   "\n', "experience G0: expected its text"),
        ("none.yaml", "null: a rule\n", "None is no experience id"),
        ("spaced.yaml", '" G0": a rule\n', "' G0' is no experience id"),
        ("huge.yaml", "G99999999999999999999: a rule\n", "too large a number; renumber the library from G0"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("folder.yaml", None, "that is a folder"),
        ("unclosed.yaml", "G0: a rule\nG1: [never closed\n", "unclosed.yaml:3: practice.init_library: cannot read it"),
        ("unset.yaml", "name: a\nexperiences: {G0: 'Use ${oc.env:UTU_TEST_UNSET_42}.'}\n", "UTU_TEST_UNSET_42"),
    ],
)
def test_a_library_file_that_would_lose_or_garble_an_experience_is_refused(tmp_path, name, text, message):
    from utu.errors import ConfigError

    path = tmp_path / name
    if text is None and name.endswith("folder.yaml"):
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        start_from(tmp_path, path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_experiences": 1}, "2 experiences, more than practice.max_experiences (1); raise the cap"),
        ({"screening": {"max_chars": 20}}, "experience G1 is 22 characters long, more than the screening lets"),
    ],
)
def test_a_starting_library_the_run_could_not_have_grown_is_refused(tmp_path, overrides, message):
    from utu.config.models import PracticeArguments
    from utu.errors import ConfigError
    from utu.practice.initial import check_starting_library

    path = tmp_path / "lib.yaml"
    path.write_text("G0: Check the units.\nG1: Check the units twice.\n")
    library = start_from(tmp_path, path)
    check_starting_library(library, PracticeArguments(init_library=str(path)))
    if "screening" in overrides:  # with the screening off, no length is imposed
        check_starting_library(library, PracticeArguments(screening={"enabled": False, "max_chars": 20}))
    with pytest.raises(ConfigError, match=re.escape(f"practice.init_library {path}: " + message)):
        check_starting_library(library, PracticeArguments(init_library=str(path), **overrides))


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("plain.yaml", "G0: 'At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}.'\n"),
        ("plain.json", '{"G0": "At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}."}'),
        (
            "export.yaml",
            "exp_id: t\nstep: 2\nexperiences: {G0: 'At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}.'}\n",
        ),
        ("notes.yaml", "source: notes\nexperiences: {G0: 'At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}.'}\n"),
        (
            "agent.json",
            '{"name": "a", "experiences": {"G0": "At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}."}}',
        ),
    ],
)
def test_a_library_file_that_is_no_agent_is_read_as_written(tmp_path, monkeypatch, name, text):
    monkeypatch.setenv("UTU_TEST_SECRET", "sk-SECRET")
    path = tmp_path / name
    path.write_text(text)
    assert start_from(tmp_path, path).experiences == {"G0": "At ${hh}:${mm}, never print ${oc.env:UTU_TEST_SECRET}."}


def test_a_yaml_merge_key_may_be_overridden(tmp_path):
    path = tmp_path / "merged.yaml"
    path.write_text("base: &b {G0: one, G1: kept}\nexperiences: {<<: *b, G0: two}\n")
    assert start_from(tmp_path, path).experiences == {"G0": "two", "G1": "kept"}


def test_a_library_file_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_text('\ufeff{"G0": "Check the units."}', encoding="utf-8")
    assert start_from(tmp_path, path).experiences == {"G0": "Check the units."}


def start_from(tmp_path, path):
    """The library a practice would start from with `--init_library path`."""
    import asyncio

    from utu.db import Database
    from utu.practice.initial import initial_library

    async def start():
        async with Database(f"sqlite:///{tmp_path}/t.db") as db:
            return await initial_library(db, str(path), {})

    return asyncio.run(start())
