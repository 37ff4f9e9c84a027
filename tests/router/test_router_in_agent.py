"""An agent config with a tool_router, through run_training_free_GRPO.py and run_eval.py on the stub (whose
/v1/embeddings gives hashed bags of words): the LLM is offered only what the router chose, practice teaches the
router from the verify function's rewards, the enhanced agent names the trained router, and eval uses it frozen."""

import json
import re

import yaml

from tests.conftest import ROOT, run_script
from tests.practice.helpers import evolving_learner, query, run_practice, setup_workspace
from utu.llm.stub import StubScript
from utu.router.router import Router

CONFIG = """# @package _global_
defaults:
  - /eval/local@evaluation: unit_tools_router
  - _self_
exp_id: t
evaluation:
  pass_k: 1
practice:
  epochs: 1
  batch_size: 6
  grpo_n: 3
  rollout_concurrency: 6
  task_timeout: 30
  num_experiences_per_query: 1
  learner_model:
    model_provider: {base_url: "${oc.env:LEARNER_URL}", model: learner, api_key: k}
    retry_base_delay: 0.01
    max_retries: 1
data:
  practice_dataset_name: UnitConversion
  rollout_data_truncate: 18
"""
# The right choice is not the first: an untrained router takes the first for every question.
CHOICES = "    rough: [quick_convert]\n    alone: []\n    exact: [convert_units]\n"
QUESTION = re.compile(r"Convert (\S+) (.+?) to (.+), rounded")


def agent_reply(body):
    """Calls the one tool offered, then boxes its result; offered none, it boxes the question's number."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return f"\\boxed{{{json.loads(messages[-1]['content']).get('value', 0):.2f}}}"
    value, a, b = QUESTION.search(messages[1]["content"]).groups()
    if not body.get("tools"):
        return f"\\boxed{{{value}}}"
    (tool,) = [t["function"]["name"] for t in body["tools"]]
    arguments = json.dumps(
        {"value": float(value), "from_unit": a.removeprefix("degrees "), "to_unit": b.removeprefix("degrees ")}
    )
    return {"tool_calls": [{"id": "c", "type": "function", "function": {"name": tool, "arguments": arguments}}]}


def workspace(tmp_path):
    """The practice workspace, its router agent choosing between the trap, no tool and the right tool."""
    configs, db_url = setup_workspace(tmp_path, CONFIG)
    agent_file = configs / "agents/practice/unit_tools_router_agent.yaml"
    text = agent_file.read_text()
    start = text.index("  choices:")
    end = text.index("  embeddings:")
    agent_file.write_text(text[:start] + "  choices:\n" + CHOICES + text[end:])
    return configs, db_url


def evaluate(tmp_path, configs, db_url, server, exp_id, *args, limit: int = 24):
    env = {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": server.base_url,
        "UTU_LLM_MODEL": "a",
        "UTU_LLM_API_KEY": "k",
        "UTU_EMBED_BASE_URL": server.base_url,
        "UTU_EMBED_MODEL": "stub",
    }
    argv = ["--config_name", "local/unit_tools_router", "--offset", "60", "--limit", str(limit), "--pass_k", "1"]
    argv += ["--exp_id", exp_id, "--db_url", db_url, *args]
    return run_script(str(ROOT / "scripts/run_eval.py"), *argv, env=env, cwd=tmp_path)


def test_practice_teaches_the_router_and_the_enhanced_agent_uses_it_frozen(stub, tmp_path, monkeypatch):
    configs, db_url = workspace(tmp_path)
    agent, learner = stub(StubScript(reply_fn=agent_reply)), stub(evolving_learner())
    monkeypatch.setenv("UTU_EMBED_BASE_URL", agent.base_url)
    monkeypatch.setenv("UTU_EMBED_MODEL", "stub")

    untrained = evaluate(tmp_path, configs, db_url, agent, "before")
    assert untrained.returncode == 0, untrained.stderr
    assert "tool_router has no state" in untrained.stderr
    before = json.loads((tmp_path / "runs/before/eval_metrics.json").read_text())
    assert set(before["routes"]) == {"rough"}  # the first choice, everywhere
    offered = [[t["function"]["name"] for t in r.get("tools") or []] for r in agent.requests if "tools" in r]
    assert offered and all(o == ["quick_convert"] for o in offered)

    result = run_practice(tmp_path, configs, db_url, agent, learner)
    assert result.returncode == 0, result.stderr
    state = tmp_path / "runs/t/tool_router.pt"
    assert state.is_file()
    enhanced = yaml.safe_load((tmp_path / "runs/t/enhanced_agent.yaml").read_text())
    assert enhanced["tool_router"]["state"] == str(state)
    # Each question's three attempts tried the three choices: the group whose rewards are compared.
    rows = query(db_url, "SELECT dataset_index, meta FROM evaluation_data WHERE exp_id LIKE 't%' AND stage='judged'")
    tried: dict[int, set[str]] = {}
    for index, meta in rows:
        tried.setdefault(index, set()).add(json.loads(meta)["route"]["choice"])
    assert len(tried) == 18 and all(choices == {"rough", "alone", "exact"} for choices in tried.values())

    assert Router.load(state).updates == 3  # one per step
    assert sorted(p.name for p in state.parent.glob("tool_router.step*.pt")) == [
        f"tool_router.step{i}.pt" for i in range(3)
    ]
    again = run_practice(tmp_path, configs, db_url, agent, learner, "--restart_step", "2")
    assert again.returncode == 0, again.stderr
    assert Router.load(state).updates == 3  # step 1's router, then step 2 learned once more: not 4
    fresh = run_practice(tmp_path, configs, db_url, agent, learner, "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert Router.load(state).updates == 3 and Router.load(state).observed == 54  # a new router, not 6 updates

    after = evaluate(tmp_path, configs, db_url, agent, "after", "--agent_config", "runs/t/enhanced_agent.yaml")
    assert after.returncode == 0, after.stderr
    metrics = json.loads((tmp_path / "runs/after/eval_metrics.json").read_text())
    assert metrics["routes"]["exact"]["attempts"] >= 22 and metrics["routes"]["exact"]["mean_reward"] == 1.0
    assert metrics["mean_at_k"] > before["mean_at_k"]


def test_a_router_naming_a_missing_tool_or_a_broken_state_is_one_clear_error(stub, tmp_path):
    configs, db_url = workspace(tmp_path)
    agent = stub(StubScript(reply_fn=agent_reply))
    missing = evaluate(
        tmp_path, configs, db_url, agent, "m", "agent.tool_router.choices={a: [convert_units], b: [teleport]}"
    )
    assert missing.returncode != 0
    assert "tool_router.choices names teleport, which the agent's toolkits do not offer" in missing.stderr
    assert "Traceback" not in missing.stderr
    (tmp_path / "broken.pt").write_bytes(b"not a router")
    broken = evaluate(tmp_path, configs, db_url, agent, "b", f"agent.tool_router.state={tmp_path / 'broken.pt'}")
    assert broken.returncode != 0
    assert "broken.pt: not a usable router state" in broken.stderr and "Traceback" not in broken.stderr
