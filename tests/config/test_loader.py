"""Hydra compose + pydantic: shipped configs load, env vars resolve, bad fields name their file."""

import re
import shutil
from pathlib import Path

import pytest

from utu.config import EvalConfig, config_root, load_config
from utu.errors import ConfigError

SHIPPED_EVALS = sorted(
    str(p.relative_to(config_root() / "eval").with_suffix("")) for p in (config_root() / "eval").rglob("*.yaml")
)


# eval configs of an enhanced agent, whose agent config a practice writes (export_agent)
WRITTEN_BY = {
    "math_practice_agent": ("math_agent", "math_reasoning"),
    "web_practice_agent": ("web_agent", "web_search"),
}


@pytest.mark.parametrize("name", SHIPPED_EVALS)
def test_every_shipped_eval_config_loads(name, tmp_path, monkeypatch):
    text = (config_root() / "eval" / f"{name}.yaml").read_text()
    agent = next((a for a in WRITTEN_BY if f"@agent: {a}" in text), None)
    if agent:  # before practice: one line naming the command; after it: loads
        base, practice = WRITTEN_BY[agent]
        if not (config_root() / "agents/practice" / f"{agent}.yaml").exists():  # (a practice of yours wrote none)
            with pytest.raises(ConfigError, match=f"--config_name {practice}`$"):
                load_config("eval", name, EvalConfig)
        configs = tmp_path / "configs"
        shutil.copytree(config_root(), configs)
        written = (configs / "agents/practice" / f"{base}.yaml").read_text()
        (configs / "agents/practice" / f"{agent}.yaml").write_text("# Written by utu practice\n" + written)
        monkeypatch.setenv("UTU_CONFIG_DIR", str(configs))
    config = load_config("eval", name, EvalConfig)
    assert config.agent.max_turns > 0 and config.data.dataset


@pytest.mark.parametrize("name", sorted(p.stem for p in (config_root() / "rl").glob("*.yaml")))
def test_every_shipped_rl_config_loads(name):
    from utu.config.rl import RLConfig

    config = load_config("rl", name, RLConfig)
    assert config.steps > 0 and config.trainer.group_size > 1


def test_agent_and_model_land_in_their_packages():
    config = load_config("eval", "math/math_AIME24", EvalConfig)
    assert config.agent.name == "math_agent"
    assert config.agent.model.model_settings.max_tokens == 8192  # the agent file overrides the model file
    assert config.agent.model.max_retries == 4  # from configs/model/base.yaml


def test_env_vars_resolve_at_load(monkeypatch):
    monkeypatch.setenv("UTU_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("UTU_LLM_MODEL", "some-model")
    monkeypatch.setenv("UTU_LLM_CONCURRENCY", "7")
    monkeypatch.setenv("UTU_LLM_API_KEY", "")
    provider = load_config("eval", "math/math_AIME24", EvalConfig).agent.model
    assert provider.model_provider.base_url == "http://127.0.0.1:9/v1"
    assert provider.model_provider.model == "some-model"
    assert provider.model_provider.api_key is None  # an empty variable counts as unset
    assert provider.concurrency == 7


def test_overrides_apply():
    config = load_config("eval", "math/math_AIME24", EvalConfig, ["pass_k=4", "agents/practice@agent=web_agent"])
    assert config.pass_k == 4 and config.agent.name == "web_agent"


def test_one_line_per_bad_field_naming_where_it_was_given(tmp_path, monkeypatch):
    """A bad value written in a file names that file; one given as key=value names the command line, not the
    file whose value it replaced."""
    (tmp_path / "agents/practice").mkdir(parents=True)
    (tmp_path / "eval/math").mkdir(parents=True)  # a user's eval config finds the user's agent first
    shutil.copy(config_root() / "eval/math/math_AIME24.yaml", tmp_path / "eval/math")
    shipped = (config_root() / "agents/practice/math_agent.yaml").read_text()
    bad = re.sub(r"(?m)^max_turns: .*$", "max_turns: abc\nbogus: 1", shipped)
    assert bad != shipped
    (tmp_path / "agents/practice/math_agent.yaml").write_text(bad)
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_config("eval", "math/math_AIME24", EvalConfig, ["pass_k=0", "agent.model.timeout=-1"])
    lines = str(info.value).splitlines()
    assert len(lines) == 4
    by_field = {line.split(": ")[1]: line.split(": ")[0] for line in lines}
    assert by_field["agent.max_turns"] == str(tmp_path / "agents/practice/math_agent.yaml")
    assert by_field["agent.bogus"] == str(tmp_path / "agents/practice/math_agent.yaml")
    assert by_field["pass_k"] == "command line (pass_k=0)"
    assert by_field["agent.model.timeout"] == "command line (agent.model.timeout=-1)"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["pass_k=4", "pass_k=0"], "command line (pass_k=0): pass_k: "),  # the later one is the one used
        (["agent.model={timeout: -1}"], "command line (agent.model={timeout: -1}): agent.model.timeout: "),
        (["~data.dataset"], "command line (~data.dataset): data.dataset: Field required"),
        (["foo.bar=1"], "command line (foo.bar=1): foo: Extra inputs are not permitted"),
        (["pass_k"], "command line (pass_k): cannot parse it"),  # no "=": not an override
        (["data.dataset=a b"], "command line (data.dataset=a b): data.dataset: not a plain name"),
        # overrides Hydra cannot apply: the command line's, not the config file's
        (["~nonexistent"], "command line (~nonexistent): Could not delete from config. 'nonexistent' does not"),
        (["pass_k=3", "~data.limit=41"], "command line (~data.limit=41): Could not delete from config. The value"),
        (["+pass_k=3"], "command line (+pass_k=3): Could not append to config."),
        (["data@foo=bar"], "command line (data@foo=bar): Override data@foo=bar looks like a config group override"),
        (["data.limit=5", "+data.limit=3"], "command line (+data.limit=3): Could not append to config."),
        (["agents/practice@agent=nosuch"], "command line (agents/practice@agent=nosuch): In 'eval/local/mawps'"),
        (["eval.limit=3"], "command line (eval.limit=3): eval: Extra inputs"),  # not "put # @package on line 1"
        (["~agents/nosuch"], "command line (~agents/nosuch): Could not delete from config."),
        # Hydra's bare ValueError for a group choice of null: a traceback before
        (["agents/practice@agent=null"], "command line (agents/practice@agent=null): Config group override must be"),
        (
            ["model@agent.model=nosuch"],
            "command line (model@agent.model=nosuch): In 'agents/practice/local_math_agent'",
        ),
    ],
)
def test_a_bad_value_given_on_the_command_line_names_the_override_as_typed(overrides, line):
    with pytest.raises(ConfigError) as info:
        load_config("eval", "local/mawps", EvalConfig, overrides)
    assert str(info.value).startswith(line)


def test_an_override_beside_a_bad_value_of_a_file_leaves_the_file_named(tmp_path, monkeypatch):
    monkeypatch.setenv("UTU_LLM_TYPE", "litellm")  # configs/model/base.yaml reads it
    with pytest.raises(ConfigError) as info:
        load_config("eval", "local/mawps", EvalConfig, ["agent.model.model_provider={model: gpt-4o}"])
    assert str(info.value).startswith(f"{config_root() / 'model/base.yaml'}: agent.model.model_provider.type: ")


def test_a_value_a_config_writes_over_its_agents_names_that_config(tmp_path, monkeypatch):
    """Hydra reads a config's own keys after its defaults: a bad agent value written in the eval config is the
    eval config's, not the agent file's it replaced; a bad value read from the environment names its variable."""
    base = config_root() / "model/base.yaml"  # the packaged one: the user's folder has no model/
    (tmp_path / "eval/my").mkdir(parents=True)
    mine = tmp_path / "eval/my/e6.yaml"
    mine.write_text(
        "# @package _global_\ndefaults:\n  - /agents/practice@agent: math_agent\n  - _self_\n"
        "exp_id: e6\ndata:\n  dataset: D\nagent:\n  max_turns: abc\n"
    )
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("UTU_LLM_PRICE_INPUT", "cheap")
    with pytest.raises(ConfigError) as info:
        load_config("eval", "my/e6", EvalConfig)
    by_field = {line.split(": ")[1]: line for line in str(info.value).splitlines()}
    assert by_field["agent.max_turns"].startswith(f"{mine}: agent.max_turns: ")
    price = by_field["agent.model.pricing.input_per_million"]
    assert price.startswith(f"{base}: ")
    assert price.endswith("(got 'cheap') (from UTU_LLM_PRICE_INPUT, in the environment or .env)")


def test_the_file_named_is_the_one_whose_value_hydra_kept(tmp_path, monkeypatch):
    """An agent file's value over its model file's is the agent file's; a config that lists `_self_` before its
    defaults yields to them, so the agent file's value is the one kept and named."""
    (tmp_path / "eval/my").mkdir(parents=True)
    (tmp_path / "agents/practice").mkdir(parents=True)
    agent = tmp_path / "agents/practice/hot_agent.yaml"
    agent.write_text(
        "defaults:\n  - /model/base@model\n  - _self_\nname: hot\ninstructions: x\nmax_turns: many\n"
        "model:\n  model_settings:\n    temperature: hot\n"
    )
    first = tmp_path / "eval/my/first.yaml"
    first.write_text(
        "# @package _global_\ndefaults:\n  - _self_\n  - /agents/practice@agent: hot_agent\n"
        "exp_id: e\ndata:\n  dataset: D\nagent:\n  max_turns: 3\n"
    )
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_config("eval", "my/first", EvalConfig)
    by_field = {line.split(": ")[1]: line.split(": ")[0] for line in str(info.value).splitlines()}
    assert by_field["agent.model.model_settings.temperature"] == str(agent)
    assert by_field["agent.max_turns"] == str(agent)  # the eval config's 3 was overridden by the agent's "many"


def test_unknown_config_lists_the_available_ones():
    with pytest.raises(ConfigError, match="math/math_AIME24"):
        load_config("eval", "math/nope", EvalConfig)


def test_broken_yaml_is_a_config_error(tmp_path, monkeypatch):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "broken.yaml").write_text("data: [unclosed\n")
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=str(Path(tmp_path) / "eval" / "broken.yaml")):
        load_config("eval", "broken", EvalConfig)


def test_missing_env_var_without_default_names_the_field(tmp_path, monkeypatch):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "e.yaml").write_text(
        "# @package _global_\ndata:\n  dataset: ${oc.env:UTU_TEST_SURELY_UNSET}\n"
    )
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="data.dataset.*UTU_TEST_SURELY_UNSET"):
        load_config("eval", "e", EvalConfig)


def test_a_missing_agent_file_is_named_as_a_file():
    from utu.config import load_agent_config

    with pytest.raises(ConfigError) as e:
        load_agent_config("runs/x/enhanced_agent.yaml")
    assert str(e.value).startswith("runs/x/enhanced_agent.yaml: no such file")
    assert load_agent_config("practice/math_agent.yaml").name == "math_agent"  # a config name with its suffix


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "{}\n"])
def test_an_agent_file_with_no_settings_is_refused_not_run_as_a_default_agent(tmp_path, text):
    from utu.config import load_agent_config

    empty = tmp_path / "agent.yaml"
    empty.write_text(text)
    with pytest.raises(ConfigError, match="the file holds no agent settings"):
        load_agent_config(str(empty))


def test_a_users_configs_folder_with_a_few_files_still_finds_the_packaged_ones(tmp_path, monkeypatch):
    """--export_to (or practice) writes into ./configs: the packaged eval configs must still load after that."""
    (tmp_path / "configs/agents/practice").mkdir(parents=True)
    (tmp_path / "configs/agents/practice/mine.yaml").write_text("name: mine\ninstructions: hi\n")
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path / "configs"))
    config = load_config("eval", "local/mawps", EvalConfig)
    assert config.data.dataset == "MAWPS_singleop"


def test_a_config_reached_through_a_symlink_loads_and_a_path_is_not_a_name(tmp_path, monkeypatch):
    (tmp_path / "eval/my").mkdir(parents=True)
    (tmp_path / "shelf").mkdir()
    (tmp_path / "shelf/real.yaml").write_text("# @package _global_\ndata:\n  dataset: MAWPS_singleop\n")
    (tmp_path / "eval/my/link.yaml").symlink_to(tmp_path / "shelf/real.yaml")
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    assert load_config("eval", "my/link", EvalConfig).data.dataset == "MAWPS_singleop"
    for name in ("/etc/hostname", "../shelf/real"):
        with pytest.raises(ConfigError, match="a config name under eval/, not a path"):
            load_config("eval", name, EvalConfig)


def test_a_default_that_is_not_utf8_is_named_not_another_file(tmp_path, monkeypatch):
    (tmp_path / "eval").mkdir()
    (tmp_path / "agents").mkdir()
    (tmp_path / "aaa_unrelated.yaml").write_bytes(b"# \xff unrelated\n")
    (tmp_path / "agents/mine.yaml").write_bytes(b"instructions: caf\xe9\n")
    (tmp_path / "eval/e.yaml").write_text("defaults:\n  - /agents/mine@agent\n  - _self_\n")
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"agents/mine.yaml: not UTF-8 text \(byte 0xe9\)"):
        load_config("eval", "e", EvalConfig)


def test_a_package_line_below_another_comment_is_named_not_left_to_fail_as_missing_fields(tmp_path, monkeypatch):
    (tmp_path / "eval/my").mkdir(parents=True)
    config = "# @package _global_\ndata:\n  dataset: MAWPS_singleop\n"
    (tmp_path / "eval/my/good.yaml").write_text("\n# @seen before\n" + config + "# a comment after it\n")
    (tmp_path / "eval/my/late.yaml").write_text("# eval/my/late.yaml\n\n" + config)
    (tmp_path / "eval/my/indented.yaml").write_text("# a comment\n  # @package _global_\ndata:\n  dataset: x\n")
    (tmp_path / "eval/my/bom.yaml").write_text("\ufeff" + config, encoding="utf-8")
    # a package line where Hydra reads it, and another further down (a note, a line of a text block): loaded
    quoted = config + '# @package _global_ is needed above\nagent:\n  instructions: "a\n   # @package x\n   b"\n'
    (tmp_path / "eval/my/noted.yaml").write_text(quoted)
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    assert load_config("eval", "my/good", EvalConfig).data.dataset == "MAWPS_singleop"
    assert load_config("eval", "my/noted", EvalConfig).data.dataset == "MAWPS_singleop"
    with pytest.raises(ConfigError, match=r"eval/my/late.yaml:3: Hydra reads '# @package' only at the top"):
        load_config("eval", "my/late", EvalConfig)
    with pytest.raises(ConfigError, match=r"eval/my/indented.yaml:2: Hydra reads '# @package' only at the top"):
        load_config("eval", "my/indented", EvalConfig)
    with pytest.raises(ConfigError, match=r"eval/my/bom.yaml:1: .* behind a byte-order mark: save the file as UTF-8"):
        load_config("eval", "my/bom", EvalConfig)
    # a comment after the header line: Hydra raised "Too many components", a traceback
    (tmp_path / "eval/my/trailing.yaml").write_text(config.replace("_global_", "_global_ # mine", 1))
    with pytest.raises(ConfigError, match=r"eval/my/trailing.yaml:1: a '# @key value' line holds exactly two words"):
        load_config("eval", "my/trailing", EvalConfig)
    # the same in a default the config names (an agent): its file and line, not Hydra's ValueError traceback
    (tmp_path / "agents/practice").mkdir(parents=True)
    (tmp_path / "agents/practice/mine.yaml").write_text("# @package _global_ # my agent\nname: a\ninstructions: b\n")
    (tmp_path / "eval/my/with_agent.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /agents/practice/mine@agent\n  - _self_\ndata:\n  dataset: x\n"
    )
    with pytest.raises(ConfigError, match=r"agents/practice/mine.yaml:1: a '# @key value' line holds exactly two"):
        load_config("eval", "my/with_agent", EvalConfig)
    # no package line at the top, and one inside a text block: not the line to point at (as a comment it would be)
    in_text = "agent:\n  instructions: |\n    Answer.\n    # @package _global_\ndata:\n  dataset: x\n"
    (tmp_path / "eval/my/in_text.yaml").write_text(in_text)
    with pytest.raises(ConfigError) as refused:
        load_config("eval", "my/in_text", EvalConfig)
    assert "in_text.yaml:4" not in str(refused.value)
    # with no package line its settings land under eval: said so, in one line, not as "data: Field required"
    assert str(refused.value).count("\n") == 0 and "put '# @package _global_' on its first line" in str(refused.value)


def test_a_bad_header_is_blamed_on_its_own_file_only(tmp_path, monkeypatch):
    """Hydra's ValueError for a header line names no file: the one blamed is the one whose header holds the line,
    never another file with a bad header that the config does not use; an agent file given by path is checked too."""
    (tmp_path / "eval/my").mkdir(parents=True)
    (tmp_path / "eval/my/unused.yaml").write_text("# @package _global_ # old\n")
    (tmp_path / "eval/my/fine.yaml").write_text("# @package _global_\ndata:\n  dataset: MAWPS_singleop\n")
    monkeypatch.setenv("UTU_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as refused:
        load_config("eval", "my/fine", EvalConfig, ["agents/practice@agent=null"])
    assert "unused.yaml" not in str(refused.value) and str(refused.value).startswith("command line (")
    agent = tmp_path / "agent.yaml"
    agent.write_text("# @package _global_ # mine\ndefaults:\n  - /model/base@model\n  - _self_\nname: a\n")
    from utu.config import load_agent_config

    with pytest.raises(ConfigError, match=r"agent.yaml:1: a '# @key value' line holds exactly two words"):
        load_agent_config(str(agent))
    (tmp_path / "eval/my/colon.yaml").write_text("# @package: _global_\ndata:\n  dataset: MAWPS_singleop\n")
    with pytest.raises(ConfigError, match=r"colon.yaml:1: Hydra reads '# @package' as '# @package _global_', its word"):
        load_config("eval", "my/colon", EvalConfig)
