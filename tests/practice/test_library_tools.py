"""python -m utu.commands.library show|diff|export on a practice whose operations are known (stub learner):
provenance, diffs with the operation log's reasons, exports that --init_library reads back."""

import json

import pytest
import yaml

from tests.conftest import run_script
from tests.practice.helpers import agent_script, evolving_learner, proposed_operations, run_practice, setup_workspace


@pytest.fixture(scope="module")
def practised(tmp_path_factory):
    from utu.llm.stub import StubServer

    tmp_path = tmp_path_factory.mktemp("library")
    configs, db_url = setup_workspace(tmp_path)
    with StubServer(agent_script()) as agent, StubServer(evolving_learner()) as learner:
        result = run_practice(tmp_path, configs, db_url, agent, learner)  # 4 steps: ADD, UPDATE, DELETE+ADD, ADD
    assert result.returncode == 0, result.stderr
    return tmp_path, db_url


def library(db_url, *args):
    return run_script("-m", "utu.commands.library", "--db_url", db_url, *args)


def stored(db_url: str, exp_id: str, experiences: dict[str, str]) -> None:
    """A library stored as step 0 of `exp_id`, as a merge stores one (no practice needed)."""
    import asyncio

    from utu.db import Database
    from utu.practice.initial import library_of
    from utu.practice.store import PracticeStore
    from utu.practice.types import StepStats

    counts = dict.fromkeys(("step", "epoch", "batch", "group_size", "questions", "attempts", "attempts_failed"), 0)
    stats = StepStats(
        **counts,
        mean_at_g=0.0,
        pass_at_g=0.0,
        groups_used=0,
        groups_skipped=0,
        library_size=len(experiences),
        operations={"ADD": len(experiences), "UPDATE": 0, "DELETE": 0},
        operations_refused=0,
        learner_errors=0,
        usage={},
        wall_time=0.0,
    )

    async def save():
        async with Database(db_url) as db:
            await db.create_tables()
            await PracticeStore(db, exp_id).save_step(0, 0, 0, library_of(experiences, "test"), [], [], stats)

    asyncio.run(save())


def test_show_gives_each_experience_its_provenance(practised):
    _, db_url = practised
    result = library(db_url, "show", "--exp_id", "t", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["step"] == 3 and [e["id"] for e in shown["experiences"]] == ["G1", "G2"]
    g1 = shown["experiences"][0]
    assert g1["text"] == "When unsure, recompute." and g1["origin"]["step"] == 2 and g1["origin"]["kind"] == "ADD"
    early = json.loads(library(db_url, "show", "--exp_id", "t", "--step", "1", "--json").stdout)
    (g0,) = early["experiences"]
    assert g0["text"] == "When adding, line up digits and carry." and [u["step"] for u in g0["updates"]] == [1]
    after = run_script("-m", "utu.commands.library", "show", "--exp_id", "t", "--db_url", db_url, "--json")
    assert after.returncode == 0 and json.loads(after.stdout) == shown  # --db_url after the subcommand too
    table = library(db_url, "show", "--exp_id", "t")
    assert table.returncode == 0 and "When unsure, recompute." in table.stdout and "step 2" in table.stdout


def test_diff_between_steps_and_between_references(practised):
    _, db_url = practised
    result = library(db_url, "diff", "--exp_id", "t", "--from", "0", "--to", "3", "--json")
    assert result.returncode == 0, result.stderr
    changes = json.loads(result.stdout)
    assert changes["added"] == {"G1": "When unsure, recompute.", "G2": "When done, box it."}
    assert changes["deleted"] == {"G0": "When adding, line up the digits."} and changes["updated"] == {}
    assert [c["kind"] for c in changes["reasons"]["G0"]] == ["UPDATE", "DELETE"]  # what happened to it, and when
    one_step = json.loads(library(db_url, "diff", "t@0", "t@1", "--json").stdout)
    assert one_step["updated"] == {"G0": ["When adding, line up the digits.", "When adding, line up digits and carry."]}
    same = library(db_url, "diff", "t@3", "t@last")
    assert same.returncode == 0 and "hold the same experiences" in same.stdout


def test_export_writes_what_init_library_reads(practised):
    tmp_path, db_url = practised
    for suffix in ("yaml", "json", "md"):
        result = library(db_url, "export", "--exp_id", "t", "--step", "last", "--to", str(tmp_path / f"lib.{suffix}"))
        assert result.returncode == 0, result.stderr
    assert yaml.safe_load((tmp_path / "lib.yaml").read_text())["experiences"] == {
        "G1": "When unsure, recompute.",
        "G2": "When done, box it.",
    }
    assert json.loads((tmp_path / "lib.json").read_text())["step"] == 3
    upper = library(db_url, "export", "--exp_id", "t", "--to", str(tmp_path / "LIB.JSON"))
    assert upper.returncode == 0 and json.loads((tmp_path / "LIB.JSON").read_text())["step"] == 3
    assert "- **[G2]** When done, box it." in (tmp_path / "lib.md").read_text()

    import asyncio

    from utu.db import Database
    from utu.practice.initial import initial_library

    async def read_back():
        async with Database(db_url) as db:
            return await initial_library(db, str(tmp_path / "lib.yaml"), {})

    start = asyncio.run(read_back())
    assert start.experiences == {"G1": "When unsure, recompute.", "G2": "When done, box it."} and start.next_id == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "--exp_id", "nobody"], "no practice step has been recorded"),
        (["show", "--exp_id", "t", "--step", "9"], "no step 9; the steps recorded are 0 to 3"),
        (["show", "--exp_id", "t", "--step", "99999999999999999999"], "expected a step number, best or last"),
        (["diff", "t@0", "t@99999999999999999999"], "expected a step number, best or last"),
        (["--db_url", "sqlite:///{tmp}/typo.db", "show", "--exp_id", "t"], "typo.db; pass the --db_url practice used"),
        (["diff", "t@0"], "expected two EXP@STEP references"),
        (["diff", "t@0", "t/../x@1"], "expected EXP_ID@STEP"),
        (["diff", "t@0", "t@1", "--from", "0"], "give either two EXP@STEP references or --exp_id"),
        (["export", "--exp_id", "t", "--to", "lib.txt"], "must end in .yaml, .json or .md"),
        (["show", "--exp_id", "t", "--step", "abc"], "expected a step number, best or last, got 'abc'"),
        (["diff", "--exp_id", "t", "--from", "first"], "expected a step number, best or last, got 'first'"),
        (["export", "--exp_id", "t", "--step", "-1", "--to", "x.yaml"], "expected a step number, best or last"),
        (["export", "--exp_id", "t", "--to", "{tmp}/folder.yaml"], "that is a folder; name a file"),
        (["export", "--exp_id", "t", "--to", "{tmp}/kept.yaml"], "the file exists; pass --force to replace it"),
        (["export", "--exp_id", "t", "--to", "~nobody_here/x.yaml"], "argument --to: Could not determine home"),
    ],
)
def test_bad_requests_get_one_line(practised, args, message):
    tmp_path, db_url = practised
    (tmp_path / "folder.yaml").mkdir(exist_ok=True)
    (tmp_path / "kept.yaml").write_text("mine\n")
    result = library(db_url, *(a.format(tmp=tmp_path) for a in args))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and message in result.stderr.strip().splitlines()[-1]
    assert (tmp_path / "kept.yaml").read_text() == "mine\n"
    assert not (tmp_path / "typo.db").exists()  # reading made no database


def test_export_replaces_a_file_only_when_told(practised):
    tmp_path, db_url = practised
    target = tmp_path / "again.yaml"
    target.write_text("old\n")
    result = library(db_url, "export", "--exp_id", "t", "--to", str(target), "--force")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(target.read_text())["experiences"]["G2"] == "When done, box it."


def test_the_report_refuses_a_comparison_with_runs_it_does_not_hold(practised):
    tmp_path, db_url = practised
    report = ["-m", "utu.practice.report", "--db_url", db_url, "--output_dir", str(tmp_path / "r"), "--exp_id", "t"]
    result = run_script(*report, "--baseline", "nothere", "--enhanced", "alsonot")
    assert result.returncode == 2 and "no attempts stored for exp_id 'nothere'" in result.stderr, result.stderr
    assert not (tmp_path / "r/t/report.md").exists()
    alone = run_script(*report, "--baseline", "nothere")
    assert alone.returncode == 2 and "--baseline and --enhanced go together" in alone.stderr
    missing = run_script(*report[:-1], "nobody")
    assert missing.returncode == 2 and "--exp_id 'nobody': no practice steps stored" in missing.stderr
    assert run_script(*report).returncode == 0 and (tmp_path / "r/t/report.md").is_file()


def test_serve_an_experiment_with_the_library_of_a_step(practised, stub):
    import os
    import subprocess
    import sys

    import openai

    from utu.llm.stub import StubScript

    tmp_path, db_url = practised
    model = stub(StubScript(replies=["4"]))
    env = {**os.environ, "UTU_LLM_BASE_URL": model.base_url, "UTU_LLM_MODEL": "stub", "UTU_LLM_API_KEY": "k"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "utu.serve", "--exp_id", "t", "--step", "1", "--db_url", db_url, "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].strip()
        reply = openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
            model="t", messages=[{"role": "user", "content": "What is 2 plus 2?"}]
        )
        assert reply.choices[0].message.content == "4"
        assert "When adding, line up digits and carry." in model.requests[-1]["messages"][0]["content"]  # step 1's
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_merge_combines_libraries_into_a_new_experiment(practised, stub):
    import os

    from tests.conftest import run_script as run
    from utu.llm.stub import StubScript

    tmp_path, db_url = practised

    def consolidate(body):  # the learner merges what says the same thing: here ops 0 and 2 (same text twice)
        if '{"ok": true}' in body["messages"][-1]["content"]:
            return '{"ok": true}'
        ops = proposed_operations(body)
        merged = [ops[0] | {"merged_from": [0, 2]}, ops[1] | {"merged_from": [1]}, ops[3] | {"merged_from": [3]}]
        return json.dumps({"operations": merged})

    learner = stub(StubScript(reply_fn=consolidate))
    env = {**os.environ, "UTU_LLM_BASE_URL": learner.base_url, "UTU_LLM_MODEL": "learner", "UTU_LLM_API_KEY": "k"}
    # t@3 and t@2 share "When unsure, recompute."; t@1 brings G0 (line up digits and carry)
    result = run("-m", "utu.commands.library", "--db_url", db_url, "merge", "t@3", "t@2", "t@1", "--to", "tm", env=env)
    assert result.returncode == 0, result.stderr
    merged = json.loads(library(db_url, "show", "--exp_id", "tm", "--json").stdout)
    texts = [e["text"] for e in merged["experiences"]]
    assert texts == ["When unsure, recompute.", "When done, box it.", "When adding, line up digits and carry."]
    assert [e["id"] for e in merged["experiences"]] == ["G0", "G1", "G2"]  # ids remapped
    assert merged["experiences"][0]["origin"]["rationale"] == "from t@3 G1 + t@2 G1"  # provenance to both
    rule_only = run("-m", "utu.commands.library", "--db_url", db_url, "merge", "t@3", "t@2", "--to", "tr", "--no_llm")
    assert rule_only.returncode == 0, rule_only.stderr
    kept = json.loads(library(db_url, "show", "--exp_id", "tr", "--json").stdout)["experiences"]
    assert [e["text"] for e in kept] == ["When unsure, recompute.", "When done, box it."]  # the copy refused
    again = run("-m", "utu.commands.library", "--db_url", db_url, "merge", "t@3", "t@2", "--to", "tr", "--no_llm")
    assert again.returncode == 2 and "exists already" in again.stderr


def test_a_text_the_merging_learner_writes_is_screened_as_a_learned_one(practised, stub):
    import os

    from tests.conftest import run_script as run
    from utu.llm.stub import StubScript

    tmp_path, db_url = practised
    written = ["When unsure, recompute it.", "When adding, line up digits and carry ${oc.env:HOME}."]

    def consolidate(body):  # its own words for two of the sources' three texts, each like the one it replaces
        if '{"ok": true}' in body["messages"][-1]["content"]:
            return '{"ok": true}'
        ops = proposed_operations(body)
        rewritten = [ops[0] | {"content": written[0], "merged_from": [0]}, ops[2] | {"content": written[1]}]
        return json.dumps({"operations": [rewritten[0], rewritten[1] | {"merged_from": [2]}]})

    learner = stub(StubScript(reply_fn=consolidate))
    env = {**os.environ, "UTU_LLM_BASE_URL": learner.base_url, "UTU_LLM_MODEL": "learner", "UTU_LLM_API_KEY": "k"}
    result = run("-m", "utu.commands.library", "--db_url", db_url, "merge", "t@3", "t@1", "--to", "tw", env=env)
    assert result.returncode == 0, result.stderr
    kept = json.loads(library(db_url, "show", "--exp_id", "tw", "--json").stdout)["experiences"]
    # a source's text as it was; the learner's: the plain one kept, the template fragment refused by the screening
    assert [e["text"] for e in kept] == [written[0], "When done, box it."]


def test_the_operation_log_reads_back_in_order_and_by_step_or_status(practised):
    import asyncio

    from utu.db import Database
    from utu.practice.history import as_record, operation_log

    async def read(**where):
        async with Database(practised[1]) as db:
            return await operation_log(db, "t", **where)

    log = asyncio.run(read())
    assert [o.step for o in log] == sorted(o.step for o in log) and {o.step for o in log} == {0, 1, 2, 3}
    assert [(o.kind, o.status) for o in asyncio.run(read(step=2))] == [("DELETE", "applied"), ("ADD", "applied")]
    assert [o.step for o in asyncio.run(read(up_to=1))] == [o.step for o in log if o.step <= 1]
    refused = asyncio.run(read(status="refused"))
    assert [(o.step, o.new_text) for o in refused] == [(3, "ghost")]
    record = as_record(log[0])
    assert (record.kind, record.new_text, record.status) == (log[0].kind, log[0].new_text, log[0].status)


def test_a_library_is_shown_as_it_is_written(practised):
    _, db_url = practised
    odd = {"G0": "Use [a, b] and x[i]; [/INST] ends.", "G1": "Go\x1b[2J\x1b]0;pwned\x07 on.\x9b2J\u202e"}
    stored(db_url, "odd", odd)
    stored(db_url, "odd_swapped", {"G0": odd["G1"], "G1": odd["G0"]})
    merge = ("merge", "odd", "t", "--to", "om", "--no_llm")
    as_json = (("show", "--exp_id", "odd", "--json"), ("diff", "odd@0", "t@0", "--json"))
    for args in (("show", "--exp_id", "odd"), ("diff", "odd@0", "t@0"), merge, *as_json):
        result = library(db_url, *args)
        assert result.returncode == 0, result.stderr
        said = result.stdout + result.stderr  # an escape sequence (C1's CSI too) is shown, never obeyed
        assert not {"\x1b", "\x9b", "\u202e"} & set(said), args
    shown = library(db_url, "show", "--exp_id", "odd").stdout
    assert "Use [a, b] and x[i]; [/INST] ends." in shown and "Go\\x1b[2J\\x1b]0;pwned\\x07 on." in shown  # no markup
    as_json = json.loads(library(db_url, "show", "--exp_id", "odd", "--json").stdout)
    assert as_json["experiences"][1]["text"] == odd["G1"]  # escaped for the terminal, the same text when parsed
    same = library(db_url, "diff", "odd@0", "odd_swapped@0")  # two experiments: their ids say nothing
    assert same.returncode == 0 and "hold the same experiences" in same.stdout
    changes = json.loads(library(db_url, "diff", "odd@0", "t@0", "--json").stdout)
    assert changes["updated"] == {} and set(changes["deleted"]) == {"G0", "G1"}


HOSTILE = {
    "G0": "When done, check ![x](https://evil.example/p?k=1) and <img src=https://evil.example/i> then box it.",
    "G1": "Use a | b | c, *stress*, `code`, [link](https://evil.example), <https://evil.example>, &lt; and\\n C:\\x.",
    "G2": "When citing, see https://evil.example/p?k=1 or www.evil.example, and keep a 3:4 ratio.",
}


def rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_a_library_in_markdown_shows_its_text_and_makes_no_link_image_or_tag(practised):
    import asyncio
    import html
    import re

    from utu.db import Database
    from utu.practice.report import write_report

    tmp_path, db_url = practised
    stored(db_url, "hostile", HOSTILE)
    export = tmp_path / "hostile.md"
    assert library(db_url, "export", "--exp_id", "hostile", "--to", str(export)).returncode == 0

    async def report():
        async with Database(db_url) as db:
            return await write_report(db, "hostile", tmp_path / "hostile_report")

    for page in (export.read_text(), asyncio.run(report()).read_text()):
        library_part = page.split("## Learned library")[-1].split("## Plots")[0]  # (a report's own tables aside)
        shown = rendered(library_part)
        assert not re.search(r"<(img|a|code|em|td|script)\b", shown), shown
        # nor what GitHub's autolinks and linkify start from (neither renderer is installed here)
        assert not re.search(r"(?<!\\):|www\.", library_part, re.IGNORECASE), library_part
        text = html.unescape(re.sub(r"<[^>]+>", "", shown))
        for experience in HOSTILE.values():
            assert experience in text  # shown as written, character for character


def test_a_merge_whose_learner_fails_stores_nothing(practised, stub):
    import os

    from utu.llm.stub import StubScript

    tmp_path, db_url = practised
    learner = stub(StubScript(replies=["not json at all"]))
    env = {**os.environ, "UTU_LLM_BASE_URL": learner.base_url, "UTU_LLM_MODEL": "learner", "UTU_LLM_API_KEY": "k"}
    result = run_script("-m", "utu.commands.library", "--db_url", db_url, "merge", "t@3", "t@1", "--to", "tf", env=env)
    assert result.returncode == 2 and "the learner could not consolidate" in result.stderr, result.stderr
    assert "--no_llm" in result.stderr.strip().splitlines()[-1]
    missing = library(db_url, "show", "--exp_id", "tf")
    assert missing.returncode == 2 and "no practice step has been recorded" in missing.stderr


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    import os

    from utu.names import replace_text

    target = tmp_path / "lib.yaml"
    target.write_text("experiences: {G0: kept}\n")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError):
        replace_text(target, "experiences: {G0: new, G1: cut")
    assert target.read_text() == "experiences: {G0: kept}\n" and [f.name for f in tmp_path.iterdir()] == ["lib.yaml"]


def test_a_write_never_follows_a_link_planted_beside_its_file(tmp_path):
    """`library export --to lib.yaml` with lib.yaml.partial a symlink to another file once overwrote that file."""
    import os

    from utu.names import replace_text

    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (tmp_path / "lib.yaml.partial").symlink_to(precious)
    replace_text(tmp_path / "lib.yaml", "experiences: {G0: new}\n")
    assert precious.read_text() == "precious\n"
    written = tmp_path / "lib.yaml"
    assert not written.is_symlink() and written.read_text() == "experiences: {G0: new}\n"
    assert written.stat().st_mode & 0o777 == 0o666 & ~_umask()  # as a plain open() makes it, not private
    longest = tmp_path / ("n" * 250 + ".yaml")  # 255 bytes: its temporary name must fit too
    replace_text(longest, "x\n")
    assert longest.read_text() == "x\n"
    written.chmod(0o600)
    replace_text(written, "experiences: {G0: private}\n")
    assert written.stat().st_mode & 0o777 == 0o600  # a file made private stays private when it is replaced
    latin1 = tmp_path / os.fsdecode(b"caf\xe9.yaml")  # a name that is not UTF-8, as the command line can give it
    replace_text(latin1, "x\n")
    assert latin1.read_text() == "x\n"


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("json_flag", [["--json"], []])
def test_output_cut_short_by_its_reader_ends_quietly(tmp_path, json_flag):
    """`library show --json | head`: the reader closes the pipe; no BrokenPipeError traceback, exit code 1."""
    import subprocess
    import sys

    db_url = f"sqlite:///{tmp_path / 'u.db'}"
    stored(db_url, "big", {f"G{i}": f"Rule number {i}: check the units before dividing." for i in range(2000)})
    command = [sys.executable, "-m", "utu.commands.library", "--db_url", db_url, "show", "--exp_id", "big", *json_flag]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # as `head` does once it has its lines
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1 and "Traceback" not in stderr and "Error" not in stderr, stderr


def test_a_command_started_with_its_output_closed_ends_without_a_traceback(tmp_path):
    """`library show --json >&-`: Python has no sys.stdout at all; the exit must not flush it."""
    import os
    import subprocess
    import sys

    db_url = f"sqlite:///{tmp_path / 'u.db'}"
    stored(db_url, "one", {"G1": "Check the units."})
    command = [sys.executable, "-m", "utu.commands.library", "--db_url", db_url, "show", "--exp_id", "one", "--json"]
    result = subprocess.run(command, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=120)
    assert "Traceback" not in result.stderr and result.returncode == 0, result.stderr


def test_output_to_a_socket_whose_reader_left_ends_quietly_too(tmp_path):
    """A socket's writing end polls as a hang-up, not an error, once its reader has gone."""
    import socket
    import subprocess
    import sys

    db_url = f"sqlite:///{tmp_path / 'u.db'}"
    stored(db_url, "big", {f"G{i}": f"Rule number {i}: check the units before dividing." for i in range(2000)})
    command = [sys.executable, "-m", "utu.commands.library", "--db_url", db_url, "show", "--exp_id", "big", "--json"]
    ours, theirs = socket.socketpair()
    theirs.close()  # the reader is gone before anything is written
    process = subprocess.Popen(command, stdout=ours.fileno(), stderr=subprocess.PIPE)
    ours.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1 and "Traceback" not in stderr, stderr


def test_a_closing_line_whose_reader_left_does_not_fail_the_command(tmp_path):
    """`library export ... 2>&1 | head -0`-like: the summary line on standard error found no reader and the finished
    export exited 1; an error line found none and the exit code was 1, not 2."""
    import os
    import subprocess
    import sys

    db_url = f"sqlite:///{tmp_path / 'u.db'}"
    stored(db_url, "t", {"G0": "When dividing, convert the units first."})
    command = [sys.executable, "-m", "utu.commands.library", "--db_url", db_url, "export", "--exp_id", "t", "--to"]
    for target, code in ((tmp_path / "lib.yaml", 0), (tmp_path / "lib.txt", 2)):
        reader, writer = os.pipe()
        os.close(reader)
        done = subprocess.run([*command, str(target)], stdout=subprocess.PIPE, stderr=writer, timeout=120)
        os.close(writer)
        assert done.returncode == code, done.stdout
    assert "When dividing" in (tmp_path / "lib.yaml").read_text()
