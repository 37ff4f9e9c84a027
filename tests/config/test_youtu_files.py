"""Files in Youtu-Agent's formats, written by us to use every key of its schemas (AgentConfig, ToolkitConfig,
ModelConfigs, its practice and eval configs), run through eval, practice, warm start and export against the
stub, with the endpoint in the environment as its `.env` sets it. (The check with Youtu-Agent's own files,
unchanged, is in the issue's note: they cannot be shipped here.)"""

import json

import pytest
import yaml
from pydantic import ValidationError

from tests.conftest import ROOT, run_script
from tests.practice.helpers import QUESTIONS, agent_script, evolving_learner, query, setup_workspace
from utu.config import load_agent_config
from utu.llm.stub import StubScript

RUN_EVAL = str(ROOT / "scripts/run_eval.py")
PRACTICE = str(ROOT / "scripts/run_training_free_GRPO.py")

# Its configs/model/base.yaml: base_url and api_key left out on purpose, for the environment (.env).
MODEL_BASE = """model_provider:
  type: ${oc.env:UTU_LLM_TYPE}
  model: ${oc.env:UTU_LLM_MODEL}
model_settings:
  include_usage: True
"""
TOOL = """name: python_executor
mode: builtin
activated_tools: null
"""
# Every key of its AgentConfig for a simple agent, and of its ToolkitConfig.
AGENT = """# @package _global_
defaults:
  - /model/base@model
  - /tools/python_executor@toolkits.python_executor
  - _self_

type: simple
agent:
  name: yt_agent
  instructions: "Add the numbers. End with \\\\boxed{answer}."
model:
  model_settings:
    temperature: 0.3
    top_p: 0.95
    extra_args:
      timeout: 300
  model_params: {}
  termination_max_tokens: 2000
context_manager:
  name: null
  config: {}
env:
  name: null
  config: {}
enabled_skills: []
toolkits:
  python_executor:
    env_mode: local
    config: {}
    config_llm: null
    customized_filepath: null
    customized_classname: null
    mcp_transport: stdio
    mcp_client_session_timeout_seconds: 20
max_turns: 50
stop_at_tool_names: null
runner: openai
"""
# Every key of its EvalConfig but db_url (utu takes the database from --db_url or UTU_DB_URL).
EVAL = """# @package _global_
defaults:
  - /agents/practice/yt_agent@agent
  - _self_

exp_id: "yt_eval"
data:
  dataset: "Arith"
  type: single
  question_field: question
  gt_field: answer
concurrency: 4
pass_k: 1
judge_model:
  model_provider:
    type: ${oc.env:UTU_LLM_TYPE}
    model: ${oc.env:UTU_LLM_MODEL}
  model_params:
    temperature: 0.5
judge_concurrency: 4
eval_method: null
verify_filename: "yt_verify.py"
verify_func_name: "verify_func"
"""
# Every key of its PracticeArguments (the truncations under practice, as it keeps them) and DataArguments.
PRACTICE_CONFIG = """# @package _global_
defaults:
  - /eval/yt/yt_eval@evaluation
  - _self_

exp_id: "yt_practice"
practice:
  epochs: 1
  batch_size: 2
  grpo_n: 2
  rollout_concurrency: 4
  rollout_temperature: 0.7
  rollout_data_truncate: 4
  task_timeout: 60
  shuffle_data: true
  restart_step: null
  agent_objective: |
    input: an addition question
    output: the sum
  learning_objective: |
    Help the agent to add correctly.
  given_ground_truth: true
  num_experiences_per_query: 1
  do_eval: false
  eval_strategy: epoch
  eval_steps: 1
  eval_data_truncate: 2
data:
  practice_dataset_name: "Arith"
"""
# A sync verify function on math-verify, in its guide's place (utu/practice/verify/), as its math.py is.
VERIFY = """from math_verify.metric import math_metric
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig


def verify_func(sample, timeout_score: float = 0, **kwargs) -> dict:
    check = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()))
    score = 0.0
    try:
        score, _ = check(["\\\\boxed{" + str(sample.correct_answer) + "}"], [sample.response])
    except Exception:
        pass
    return {"reward": float(score), "reasoning": None}
"""


def youtu_workspace(tmp_path):
    configs, db_url = setup_workspace(tmp_path)
    (configs / "model/base.yaml").write_text(MODEL_BASE)
    (configs / "tools").mkdir(exist_ok=True)
    (configs / "tools/python_executor.yaml").write_text(TOOL)
    (configs / "agents/practice/yt_agent.yaml").write_text(AGENT)
    (configs / "eval/yt").mkdir()
    (configs / "eval/yt/yt_eval.yaml").write_text(EVAL)
    (configs / "practice/yt_practice.yaml").write_text(PRACTICE_CONFIG)
    verify = tmp_path / "utu/practice/verify"
    verify.mkdir(parents=True)
    (verify / "yt_verify.py").write_text(VERIFY)
    return configs, db_url


def agent_and_learner() -> StubScript:
    """One endpoint, as in Youtu-Agent (its learner is the agent's model): learner requests carry a schema."""
    agent, learner = agent_script(), evolving_learner()

    def reply(body):
        return learner.reply_fn(body) if body.get("response_format") else agent.reply_fn(body)

    return StubScript(reply_fn=reply)


def env_for(server, configs) -> dict[str, str]:
    return {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_TYPE": "chat.completions",
        "UTU_LLM_MODEL": "deepseek-chat",
        "UTU_LLM_BASE_URL": server.base_url,
        "UTU_LLM_API_KEY": "sk-youtu-user-0123456789",
    }


def test_youtu_format_files_run_eval_practice_warm_start_and_export(tmp_path, stub):
    configs, db_url = youtu_workspace(tmp_path)
    server = stub(agent_and_learner())
    env = env_for(server, configs)
    baseline = run_script(RUN_EVAL, "--config_name", "yt/yt_eval", "--db_url", db_url, env=env, cwd=tmp_path)
    assert baseline.returncode == 0, baseline.stderr
    assert "without effect in utu" in baseline.stderr  # the keys that change nothing are named, once
    metrics = json.loads((tmp_path / "runs/yt_eval/eval_metrics.json").read_text())
    assert metrics["model"] == "deepseek-chat" and metrics["attempts_judged"] == len(QUESTIONS)
    assert metrics["mean_at_k"] == 1.0  # the sync math-verify verifier judged (in a thread it scored 0)
    sent = server.requests[0]
    assert sent["model"] == "deepseek-chat" and sent["temperature"] == 0.3 and sent["max_tokens"] == 2000

    practice = run_script(PRACTICE, "--config_name", "yt_practice", "--db_url", db_url, env=env, cwd=tmp_path)
    assert practice.returncode == 0, practice.stderr
    exported = configs / "agents/practice/yt_practice_agent.yaml"  # where its guide's next eval config looks
    learned = yaml.safe_load(exported.read_text())["experiences"]
    assert learned and query(db_url, "SELECT count(*) FROM practice_steps") == [(2,)]  # 4 questions, batches of 2

    # warm start: the exported agent given to practice starts the library
    warm = run_script(
        PRACTICE,
        "--config_name",
        "yt_practice",
        "--agent_config",
        str(exported),
        "--exp_id",
        "warm",
        "--db_url",
        db_url,
        env=env,
        cwd=tmp_path,
    )
    assert f"starting from a library of {len(learned)} experiences" in warm.stderr, warm.stderr

    enhanced_eval = configs / "eval/yt/yt_practice_eval.yaml"
    enhanced_eval.write_text(EVAL.replace("yt_agent@agent", "yt_practice_agent@agent").replace("yt_eval", "yt_pe"))
    enhanced = run_script(RUN_EVAL, "--config_name", "yt/yt_practice_eval", "--db_url", db_url, env=env, cwd=tmp_path)
    assert enhanced.returncode == 0, enhanced.stderr
    system = server.requests[-1]["messages"][0]["content"]
    assert all(text in system for text in learned.values())


def test_a_youtu_enhanced_agent_is_read_back_with_its_library(tmp_path):
    """Youtu-Agent's practice writes the library into the instructions as `[G0]. text` lines (its pre-learned
    math and web agents hold 27 and 46 of them): they become the agent's library, the instructions its own."""
    header = "\n\nWhen solving problems, you MUST first carefully read and understand the helpful instructions and"
    library = "[G0]. Parity check: test both cases.\n[G1]. 验证答案：代入原方程。\n[G2]. \n[G3].\n[G4]. Last."
    instructions = f"Solve it.{header} experiences:\n{library}"
    path = tmp_path / "pre_learned_agent.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "type": "simple",
                "agent": {"name": "m", "instructions": instructions},
                "model": {"model_provider": {"type": "chat.completions", "model": "x"}},
            },
            allow_unicode=True,
        )
    )
    agent = load_agent_config(str(path))
    assert agent.instructions == "Solve it."
    assert agent.experiences == {
        "G0": "Parity check: test both cases.",
        "G1": "验证答案：代入原方程。",
        "G4": "Last.",
    }  # G2, G3: no text


# The shape of its webwalker.py: its prompt file by name, a Jinja template, query_one(messages=<a string>), and a
# SimplifiedAsyncOpenAI built as the default argument even when the run's judge is handed over.
WEB_VERIFY = """import re

from utu.db import EvaluationSample
from utu.utils import FileUtils, SimplifiedAsyncOpenAI


async def verify_func(sample: EvaluationSample, timeout_score: float = 0, **kwargs) -> dict:
    llm = kwargs.get("llm", SimplifiedAsyncOpenAI())
    template = FileUtils.load_prompts("practice/verify.yaml")["WEBWALKER_JUDGE_TEMPLATE"]
    up = FileUtils.get_jinja_template_str(template).render(
        problem=sample.raw_question, answer=sample.correct_answer, response=sample.response
    )
    response = await llm.query_one(messages=up)
    grade = re.search(r"GRADE:\\s*(\\w+)", response)
    return {"reward": float(bool(grade) and grade.group(1).upper() == "CORRECT"), "reasoning": None}
"""


async def test_a_youtu_web_verifier_runs_on_its_utils(stub, tmp_path):
    from types import SimpleNamespace

    from tests.conftest import client_for
    from utu.verify import Verifier, load_verifier

    path = tmp_path / "web_verify.py"
    path.write_text(WEB_VERIFY)
    judge = stub(StubScript(replies=["EXPLANATION: same city.\nGRADE: CORRECT"]))
    verdict = await Verifier(load_verifier(str(path)), llm=client_for(judge))(
        SimpleNamespace(raw_question="Capital of France?", correct_answer="Paris", response="It is Paris.")
    )
    assert (verdict.reward, verdict.error) == (1.0, None)
    sent = judge.requests[0]["messages"]
    assert len(sent) == 1 and sent[0]["role"] == "user" and "GOLD ANSWER: Paris" in sent[0]["content"]


def test_its_model_settings_keys_that_are_not_request_fields_are_not_sent():
    from utu.config import ModelConfig

    model = ModelConfig.model_validate({"model_settings": {"include_usage": True, "temperature": 0.3}})
    assert model.model_settings.temperature == 0.3 and model.model_settings.extra_body == {}


def test_the_judge_gets_its_own_endpoint_and_key_or_the_agents_together(monkeypatch):
    from utu.config import ModelConfig
    from utu.llm.factory import make_client

    monkeypatch.setenv("UTU_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("UTU_LLM_API_KEY", "sk-agent-key-0123456789")
    monkeypatch.setenv("UTU_LLM_MODEL", "agent-model")
    monkeypatch.setenv("JUDGE_LLM_TYPE", "")  # as Youtu-Agent's .env.full ships it
    judge = ModelConfig.model_validate({"model_provider": {"type": "", "model": "judge-model"}})
    assert judge.model_provider.type == "chat.completions"
    together = make_client(judge, env_prefix="JUDGE_LLM")
    assert (together.base_url, together.model) == ("http://127.0.0.1:9/v1", "judge-model")
    monkeypatch.setenv("JUDGE_LLM_BASE_URL", "http://127.0.0.1:10/v1")
    own = make_client(judge, env_prefix="JUDGE_LLM")
    assert own.base_url == "http://127.0.0.1:10/v1"
    assert own._transport._api_key != "sk-agent-key-0123456789"  # never the agent's key at the judge's URL


def test_a_config_with_its_own_endpoint_but_no_model_names_the_config_not_the_environment(monkeypatch):
    from utu.config import ModelConfig
    from utu.config.loader import load_model_config
    from utu.errors import ConfigError
    from utu.llm.factory import make_client

    monkeypatch.setenv("UTU_LLM_MODEL", "set-in-the-environment")  # not read: the config names its own endpoint
    own = ModelConfig.model_validate({"model_provider": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k"}})
    with pytest.raises(ConfigError, match=r"model_provider.base_url is set \(http://127.0.0.1:9/v1\) but model_pro"):
        make_client(own)
    monkeypatch.delenv("UTU_LLM_MODEL")
    monkeypatch.setenv("UTU_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="UTU_LLM_BASE_URL is set but UTU_LLM_MODEL is not"):
        make_client(ModelConfig())
    with pytest.raises(ConfigError, match="UTU_LLM_BASE_URL is set but UTU_LLM_MODEL is not"):
        make_client(load_model_config("base"))  # which reads the variable into its base_url


def test_a_litellm_model_is_refused_with_what_to_do_instead():
    from utu.config import ModelConfig

    with pytest.raises(ValidationError, match="run a LiteLLM proxy and use chat.completions with its URL"):
        ModelConfig.model_validate({"model_provider": {"type": "litellm", "model": "m"}})


async def test_its_simplified_client_takes_its_endpoint_in_the_constructor(stub):
    from utu.utils import SimplifiedAsyncOpenAI

    server = stub(StubScript(replies=["hi"]))
    client = SimplifiedAsyncOpenAI(
        type="chat.completions", model="m", base_url=server.base_url, api_key="sk-x", temperature=0.2
    )
    assert await client.query_one(messages="hello") == "hi"
    sent = server.requests[0]
    assert sent["model"] == "m" and sent["temperature"] == 0.2 and "api_key" not in sent and "base_url" not in sent


def test_a_saved_agents_default_toolkit_keys_raise_no_warning(caplog):
    from utu.config.youtu import agent_from_youtu

    toolkit = {
        "name": "python_executor",
        "mode": "builtin",
        "env_mode": "local",
        "config": {},
        "config_llm": None,
        "mcp_transport": "stdio",
        "mcp_client_session_timeout_seconds": 20,
    }
    agent_from_youtu({"type": "simple", "toolkits": {"python_executor": toolkit}})
    assert "without effect" not in caplog.text
    agent_from_youtu({"type": "simple", "toolkits": {"python_executor": toolkit | {"env_mode": "e2b"}}})
    assert "without effect in utu: env_mode" in caplog.text
