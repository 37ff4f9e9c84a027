"""Youtu-Agent users switch without editing: its agent and eval YAML formats, its run_eval flags, the guide's
enhanced-agent eval configs. The fixtures are written from the guide and ../shared/reference notes."""

import json
import shutil

import pytest

from tests.conftest import ROOT, run_script
from tests.practice.helpers import (
    QUESTIONS,
    TEST_CONFIG,
    agent_script,
    evolving_learner,
    run_practice,
    setup_workspace,
)
from utu.config import EvalConfig, load_agent_config, load_config
from utu.errors import ConfigError
from utu.llm.stub import StubScript

RUN_EVAL = str(ROOT / "scripts/run_eval.py")
YOUTU_AGENT = """# @package _global_
defaults:
  - /model/base@model
  - /tools/python_executor@toolkits.python_executor
  - _self_

type: simple
agent:
  name: my_math_agent
  instructions: "Solve step by step. End with <answer>\\\\boxed{...}</answer>."
model:
  model_settings:
    top_p: 0.95
    extra_args:
      timeout: 3000
  model_params:
    temperature: 0.6
    parallel_tool_calls: false
toolkits:
  python_executor:
    mode: builtin
    env_mode: local
max_turns: 50
context_manager:
  name: base
"""

YOUTU_EVAL = """# @package _global_
defaults:
  - /agents/practice/my_agent@agent
  - _self_

exp_id: "my_eval"
data:
  dataset: "Arith"
  type: "single"
concurrency: 4
pass_k: 1
verify_filename: "math.py"
verify_func_name: "verify_func"
judge_concurrency: 3
eval_method: "training_free_grpo"
judge_model:
  model_provider:
    type: ${oc.env:JUDGE_LLM_TYPE,chat.completions}
    model: ${oc.env:JUDGE_LLM_MODEL,judge}
    base_url: ${oc.env:JUDGE_LLM_BASE_URL,null}
    api_key: ${oc.env:JUDGE_LLM_API_KEY,null}
  model_params:
    temperature: 0.5
"""


@pytest.fixture
def configs(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    (configs / "agents/practice/my_agent.yaml").write_text(YOUTU_AGENT)
    (configs / "eval/my_domain").mkdir()
    (configs / "eval/my_domain/my_eval.yaml").write_text(YOUTU_EVAL)
    monkeypatch.setenv("UTU_CONFIG_DIR", str(configs))
    return configs


def test_an_agent_in_youtu_format_by_name_and_by_path(configs, tmp_path):
    by_name = load_agent_config("practice/my_agent")
    outside = tmp_path / "elsewhere" / "agent.yaml"
    outside.parent.mkdir()
    outside.write_text(YOUTU_AGENT)
    by_path = load_agent_config(str(outside))  # its defaults are composed too
    for agent in (by_name, by_path):
        assert agent.name == "my_math_agent" and agent.instructions.startswith("Solve step by step")
        settings = agent.model.model_settings
        assert (settings.temperature, settings.top_p, settings.extra_body) == (
            0.6,
            0.95,
            {"parallel_tool_calls": False},
        )
        assert agent.model.timeout == 3000 and agent.max_turns == 50
        assert [t.name for t in agent.toolkits] == ["python_executor"]


def test_an_eval_config_in_youtu_format(configs):
    config = load_config("eval", "my_domain/my_eval", EvalConfig)
    assert config.data.type == "single" and config.judge_concurrency == 3
    assert config.judge_model.model_settings.temperature == 0.5  # model_params are the judge's settings
    assert config.agent.name == "my_math_agent"


def test_what_cannot_be_used_is_refused_naming_the_agent_file(configs):
    path = configs / "agents/practice/my_agent.yaml"
    path.write_text(YOUTU_AGENT.replace("python_executor:\n    mode", "image_tool:\n    mode"))
    with pytest.raises(ConfigError, match=r"my_agent.yaml: agent.*toolkit 'image_tool' is not available"):
        load_config("eval", "my_domain/my_eval", EvalConfig)
    path.write_text(YOUTU_AGENT.replace("type: simple", "type: orchestra"))
    with pytest.raises(ConfigError, match="agent type 'orchestra' is not supported"):
        load_config("eval", "my_domain/my_eval", EvalConfig)
    path.write_text(YOUTU_AGENT)
    (configs / "eval/my_domain/my_eval.yaml").write_text(YOUTU_EVAL.replace('type: "single"', "question_field: q"))
    with pytest.raises(ConfigError, match="data.question_field"):
        load_config("eval", "my_domain/my_eval", EvalConfig)


def test_run_eval_takes_youtus_flags(configs, tmp_path, stub):
    agent = stub(StubScript(reply_fn=lambda body: "\\boxed{3}"))
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS.items()))
    db_url = f"sqlite:///{tmp_path / 'e.db'}"
    env = {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "from-env",
        "UTU_LLM_API_KEY": "k",
        "JUDGE_LLM_BASE_URL": agent.base_url,
    }
    assert (
        run_script(
            "scripts/data/upload_dataset.py",
            "--file_path",
            str(data),
            "--dataset_name",
            "Arith",
            "--db_url",
            db_url,
            env=env,
        ).returncode
        == 0
    )
    result = run_script(
        RUN_EVAL,
        "--config_name",
        "my_domain/my_eval",
        "--agent_model",
        "my-model",
        "--dataset_type",
        "mixed",
        "--judge_concurrency",
        "2",
        "--limit",
        "2",
        "--db_url",
        db_url,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert {r["model"] for r in agent.requests} == {"my-model"}
    assert result.stderr.count("eval_method 'training_free_grpo' is Youtu-Agent's") == 1  # said once
    typo = run_script("scripts/run_eval.py", "--config_name", "my_domain/my_eval", "--agent_modle", "x", env=env)
    assert typo.returncode == 2 and typo.stderr.strip().splitlines()[-1].endswith(
        "unrecognized arguments: --agent_modle (Hydra overrides are written key=value)"
    )


def test_the_guides_enhanced_eval_before_practice_names_the_command():
    for config, practice in (
        ("math/math_practice_AIME24", "math_reasoning"),
        ("math/math_practice_AIME25", "math_reasoning"),
        ("web/web_practice", "web_search"),
    ):
        result = run_script("scripts/run_eval.py", "--config_name", config)
        assert result.returncode == 2
        assert f"--config_name {practice}`" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_hint_holds_in_a_users_own_configs_folder(tmp_path):
    """Youtu-Agent's form: the agent named in the defaults path, written by a practice config's exp_id."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/eval/web/mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /agents/practice/my_practice_agent@agent\n  - _self_\n"
        "exp_id: mine_eval\ndata:\n  dataset: WebWalkerQA\n"
    )
    (tmp_path / "configs/practice/mine.yaml").write_text('# @package _global_\nexp_id: "my_practice"\n')
    env = {"UTU_CONFIG_DIR": str(tmp_path / "configs")}
    result = run_script(RUN_EVAL, "--config_name", "web/mine", env=env, cwd=tmp_path)
    assert result.returncode == 2 and "--config_name mine`" in result.stderr, result.stderr


def test_practice_writes_the_agent_the_guides_eval_configs_use(tmp_path, stub):
    config = TEST_CONFIG.replace("exp_id: t\n", "exp_id: t\nexport_agent: my_practice_agent\n")
    configs, db_url = setup_workspace(tmp_path, config)
    agent_file = configs / "agents/practice/my_practice_agent.yaml"
    agent_file.write_text("# my own agent\nname: mine\n")  # written by hand: never replaced
    args = (tmp_path, configs, db_url, stub(agent_script()), stub(evolving_learner()), "--epochs", "1")
    refused = run_practice(*args)
    assert refused.returncode == 2 and "was not written by practice" in refused.stderr
    assert agent_file.read_text() == "# my own agent\nname: mine\n"
    agent_file.write_text("# Written by utu practice (exp_id t); a later practice may replace it.\nname: old\n")
    for _ in range(2):  # replaced (a file of an older version, its mark on the first line), then replaced again
        result = run_practice(*args, "--fresh")
        assert result.returncode == 0, result.stderr
        assert agent_file.read_text().splitlines()[1].startswith("# Written by utu practice (exp_id t)")
    (configs / "eval/practice").mkdir(exist_ok=True)
    (configs / "eval/practice/mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /agents/practice@agent: my_practice_agent\n  - _self_\n"
        "data: {dataset: Arith}\n"
    )
    env = {"UTU_CONFIG_DIR": str(configs)}
    code = "from utu.config import EvalConfig, load_config as l; print(len(l('eval', 'practice/mine', EvalConfig)"
    check = run_script("-c", code + ".agent.experiences))", env=env)
    assert check.returncode == 0 and int(check.stdout) >= 1, check.stderr
    by_name = "from utu.config import load_agent_config as l; print(len(l('practice/my_practice_agent').experiences))"
    check = run_script("-c", by_name, env=env)  # as `--agent_config practice/my_practice_agent` loads it
    assert check.returncode == 0 and int(check.stdout) >= 1, check.stderr
