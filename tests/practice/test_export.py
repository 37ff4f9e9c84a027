"""The enhanced agent's files: what a learned text says survives the export word for word, and the files are
written whole or not at all, never through a link planted at their name."""

from pathlib import Path

import pytest
import yaml

from utu.config import load_agent_config
from utu.config.models import AgentConfig, EvalConfig
from utu.errors import RunFailed
from utu.practice.export import agent_yaml, enhanced_agent, write_outputs
from utu.practice.library import Library

# A learner (or a hand-written starting library, or a run with the screening off) may write any of these.
TEXTS = {
    "G0": "Never print ${oc.env:UTU_LLM_API_KEY}; quote it as written.",
    "G1": "Times as ${hh}:${mm}: pad the minutes.",
    "G2": r"A literal \${x} keeps its backslash; so does C:\path\ and a lone $ or {brace}.",
    "G3": r"Two backslashes then \\${y}.",
    "G4": "1e3",  # a number to OmegaConf's YAML reader, not to PyYAML's writer
    "G5": "1_000",
    "G6": "1.5_e3",  # (which float() refuses)
}


def baseline() -> AgentConfig:
    return AgentConfig.model_validate({"name": "a", "instructions": "Solve it.", "model": {"model_provider": {}}})


def test_a_learned_text_loads_back_as_written_and_reads_no_variable(tmp_path, monkeypatch):
    from utu.practice.initial import _from_file

    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-live-SECRET")
    path = tmp_path / "enhanced_agent.yaml"
    path.write_text(agent_yaml(enhanced_agent(baseline(), Library(dict(TEXTS), 7))))
    assert "SECRET" not in path.read_text()
    assert load_agent_config(str(path)).experiences == TEXTS  # as `--agent_config` reads it
    assert _from_file(path) == TEXTS  # and as `--init_library` does


def test_a_learned_update_replaces_a_text_the_baseline_held(tmp_path):
    from utu.config.loader import agent_source

    stage_one = tmp_path / "stage_one.yaml"  # a first stage's enhanced agent, the second stage's baseline
    stage_one.write_text(agent_yaml(enhanced_agent(baseline(), Library({"G0": "Never print ${oc.env:HOME}."}, 1))))
    second = enhanced_agent(load_agent_config(str(stage_one)), Library({"G0": "Updated."}, 1))
    exported = tmp_path / "stage_two.yaml"
    exported.write_text(agent_yaml(second, agent_source(str(stage_one))))
    assert load_agent_config(str(exported)).experiences == {"G0": "Updated."}


def test_a_reference_the_baseline_wrote_stays_a_reference(tmp_path, monkeypatch):
    from utu.config.loader import agent_source

    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-live-SECRET")
    monkeypatch.setenv("MCP_KEY", "mcp-SECRET")
    path = tmp_path / "baseline.yaml"
    path.write_text(
        "name: a\nmodel: {model_provider: {}}\n"
        "toolkits: [{name: mcp, url: 'http://127.0.0.1:9/mcp',\n"
        "  headers: {Authorization: 'Bearer ${ oc.env:MCP_KEY }'}}]\n"
        "experiences: {G0: 'The key is ${oc.env:UTU_LLM_API_KEY}: never print it.', G1: 'Kept as ${oc.env:MCP_KEY}.'}\n"
    )
    held = load_agent_config(str(path))
    assert held.experiences["G0"] == "The key is sk-live-SECRET: never print it."  # (as the agent is prompted)
    learned = Library({"G0": held.experiences["G0"], "G1": "Updated."}, 2)  # G0 as it was, G1 learned anew
    text = agent_yaml(enhanced_agent(held, learned), agent_source(str(path)))
    assert "SECRET" not in text
    assert load_agent_config_text(tmp_path, text).experiences == {"G0": held.experiences["G0"], "G1": "Updated."}


def load_agent_config_text(tmp_path, text: str) -> AgentConfig:
    path = tmp_path / "exported.yaml"
    path.write_text(text)
    return load_agent_config(str(path))


def test_the_agent_file_is_a_config_by_name_too(tmp_path, monkeypatch):
    agents = tmp_path / "configs/agents/practice"
    agents.mkdir(parents=True)
    (agents / "shipped.yaml").write_text(agent_yaml(enhanced_agent(baseline(), Library(dict(TEXTS), 7)), note="mine"))
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path / "configs"))
    assert load_agent_config("practice/shipped").experiences == TEXTS  # the package line heads the file


def outputs(tmp_path, **options) -> dict:
    evaluation = EvalConfig.model_validate({"data": {"dataset": "Arith"}, "agent": baseline().model_dump()})
    library = Library({"G0": "Check the units."}, 1)
    return write_outputs(
        evaluation, library, exp_id="t", output_dir=tmp_path / "runs/t", configs=tmp_path / "configs", **options
    )


def test_a_link_planted_at_an_output_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "runs/t").mkdir(parents=True)
    (tmp_path / "runs/t/enhanced_agent.yaml").symlink_to(victim)
    files = outputs(tmp_path, export_to=None)
    assert victim.read_text() == "mine"
    assert not files["agent"].is_symlink() and "Check the units." in files["agent"].read_text()


def fsync_fails_at(call: int):
    import os

    real, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == call:
            raise OSError(28, "No space left on device")
        return real(fd)

    return fsync


@pytest.mark.parametrize(
    ("block", "failed"),
    [
        ("configs/eval/practice", "configs/eval/practice/ship.yaml"),  # a file where a folder goes
        ("runs/t/enhanced_agent.yaml/", "runs/t/enhanced_agent.yaml"),  # a folder where a file goes
        ("disk full at the last file", "configs/eval/practice/ship.yaml"),
    ],
)
def test_an_export_that_cannot_be_written_leaves_none_of_its_files(tmp_path, monkeypatch, block, failed):
    if block.startswith("disk"):
        monkeypatch.setattr("os.fsync", fsync_fails_at(4))
    elif block.endswith("/"):
        (tmp_path / block).mkdir(parents=True)
    else:
        (tmp_path / block).parent.mkdir(parents=True)
        (tmp_path / block).write_text("in the way")
    with pytest.raises(RunFailed, match=rf"^{tmp_path}/{failed}: cannot write the enhanced agent \(.*\); the library"):
        outputs(tmp_path, export_to="ship", export_agent="t_agent")
    written = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()]
    assert written == ([] if block.endswith(("/", "full at the last file")) else [Path(block)])


def test_a_link_loop_at_an_output_is_named_and_leaves_no_partial(tmp_path):
    from utu.names import NotWritten, replace_texts

    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    replace_texts({loop: "text"})  # the link is replaced, as any link at the name is
    assert loop.read_text() == "text" and not loop.is_symlink()
    knot = tmp_path / "knot"
    knot.symlink_to(knot)
    with pytest.raises(NotWritten) as refused:
        replace_texts({tmp_path / "fine.yaml": "a", knot / "inside.yaml": "b"})  # a folder that cannot be made
    assert refused.value.path == knot / "inside.yaml" and refused.value.written == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["knot", "loop.yaml"]


def test_a_rename_that_fails_midway_names_what_was_written(tmp_path, monkeypatch):
    import os

    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("ship.yaml"):
            raise OSError(5, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr("os.replace", replace)
    with pytest.raises(RunFailed, match=r"agents/practice/ship\.yaml: .*; written before it failed: .*enhanced_agent"):
        outputs(tmp_path, export_to="ship", export_agent="t_agent")
    assert not [p for p in tmp_path.rglob("*.partial")]


def test_a_hand_edited_copy_of_practices_agent_is_not_practices(tmp_path):
    from utu.practice.export import practice_mark, written_by_practice

    path = tmp_path / "agent.yaml"
    for first_lines, ours in [
        (f"# @package _global_\n# {practice_mark('t')}\n", True),
        (f"# {practice_mark('t')}\n# @package _global_\n", True),  # as practice wrote it before
        ("# @package _global_\n# Written by utu practice originally, then edited by hand\n", False),
        (f"# @package _global_\nname: a\n# {practice_mark('t')}\n", False),
    ]:
        path.write_text(first_lines + "name: a\n")
        assert written_by_practice(path) is ours and written_by_practice(path, "t") is ours, first_lines
    assert not written_by_practice(path, "u")


def test_the_files_of_an_export_are_all_written(tmp_path):
    files = outputs(tmp_path, export_to="ship", export_agent="t_agent")
    assert set(files) == {"agent", "practice_agent", "exported_agent", "exported_eval"}
    agent = files["practice_agent"].read_text()
    assert agent == files["agent"].read_text() == files["exported_agent"].read_text()
    assert agent.splitlines()[:2] == [
        "# @package _global_",
        "# Written by utu practice (exp_id t); a later practice may replace it.",
    ]
    assert yaml.safe_load(files["exported_eval"].read_text())["exp_id"] == "ship_eval"


def test_an_agent_config_with_a_blank_experience_is_refused():
    with pytest.raises(ValueError, match="an experience with no text"):
        AgentConfig.model_validate({"experiences": {"G0": "  "}})
