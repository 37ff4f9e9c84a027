"""A practice setup against two stub servers: one plays the agent, one the learner (scripted replies)."""

import json
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT, run_script
from utu.llm.rehearsal import is_probe, proposed_operations, schema_of  # noqa: F401 (used by the tests)
from utu.llm.stub import StubScript

PRACTICE = str(ROOT / "scripts/run_training_free_GRPO.py")
QUESTIONS = {f"What is {a} plus {b}?": str(a + b) for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]}

TEST_CONFIG = """# @package _global_
defaults:
  - /eval/local@evaluation: mawps
  - _self_
exp_id: t
evaluation:
  data: {dataset: Arith, limit: 4}
  pass_k: 1
  agent:
    model:
      model_settings: {temperature: 0.3}
      retry_base_delay: 0.01
      max_retries: 1
practice:
  epochs: 2
  batch_size: 2
  grpo_n: 2
  rollout_concurrency: 4
  rollout_temperature: 0.7
  task_timeout: 30
  num_experiences_per_query: 2
  learner_model:
    model_provider: {base_url: "${oc.env:LEARNER_URL}", model: learner, api_key: k}
    retry_base_delay: 0.01
    max_retries: 1
data:
  practice_dataset_name: Arith
"""


def setup_workspace(tmp_path: Path, config: str = TEST_CONFIG) -> tuple[Path, str]:
    """A copy of configs/ with the test practice config, and a database holding the Arith data set."""
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    (configs / "practice" / "test.yaml").write_text(config)
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS.items()))
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    result = run_script(
        "scripts/data/upload_dataset.py", "--file_path", str(data), "--dataset_name", "Arith", "--db_url", db_url
    )
    assert result.returncode == 0, result.stderr
    return configs, db_url


# Longer than a summary may be (utu.practice.schemas.SUMMARY_MAX_CHARS), so the learner summarises it.
WORKING = "I add the two numbers, checking each digit and the carry, then check the sum again. " * 13


def agent_script(pattern=("right", "wrong"), working: str = WORKING) -> StubScript:
    """Each question's attempts answer right, wrong, right, ... in order of arrival, after `working` (`pattern`,
    cycling; or a pattern per question, by its text); a "cut" attempt stops mid-way, as a reply cut by the token
    limit does; an "empty" one says nothing."""
    served = defaultdict(int)

    def reply(body):
        question = next(q for q in QUESTIONS if q in body["messages"][1]["content"])
        kinds = pattern[question] if isinstance(pattern, dict) else pattern
        kind = kinds[served[question] % len(kinds)]
        served[question] += 1
        if kind == "cut":
            return {"content": f"{working}So the", "finish_reason": "length"}
        if kind == "empty":
            return ""
        answer = QUESTIONS[question] if kind == "right" else "0"
        return f"{working}The answer is \\boxed{{{answer}}}."

    return StubScript(reply_fn=reply)


def work_requests(server) -> list[dict]:
    """The requests that did work: all but the structured-output probe."""
    return [r for r in server.requests if not is_probe(r)]


def library_in(body) -> str:
    text = body["messages"][1]["content"]
    match = re.search(r"<existing_library>\n(.*?)\n</existing_library>", text, re.DOTALL)
    return match.group(1) if match else ""


def evolving_learner(
    group_update=None, experiences=("When adding, line up the digits.",), advantage=None, merge: bool = True
) -> StubScript:
    """Summaries and advantages are fixed; operations depend on the library, so the result is predictable:
    step 0 ADD A (the advantage's experience: no call on an empty library); step 1 UPDATE it; step 2 DELETE
    it and ADD C; step 3 UPDATE an unknown id and ADD E. `advantage(prompt)`, if given, picks the experiences
    instead; `merge=False`: the consolidation merges nothing (every proposal goes on as it was)."""

    def default_group_update(library: str) -> list[dict]:
        if "carry" in library:
            return [{"operation": "DELETE", "id": "[G0]"}, {"operation": "ADD", "content": "When unsure, recompute."}]
        if "line up" in library:
            return [
                {
                    "operation": "UPDATE",
                    "id": "G0",
                    "content": "When adding, line up digits and carry.",
                    "rationale": "r1",
                }
            ]
        return [
            {"operation": "UPDATE", "id": "G9", "content": "ghost"},
            {"operation": "ADD", "content": "When done, box it."},
        ]

    def reply(body):
        name = schema_of(body)
        if is_probe(body):
            return '{"ok": true}'
        if name == "AttemptSummary":
            return json.dumps({"summary": "The agent added the numbers."})
        if name == "GroupAdvantage":
            chosen = advantage(body["messages"][1]["content"]) if advantage else experiences
            return json.dumps({"analysis": "one was right", "experiences": list(chosen)})
        if name == "OperationList":
            return json.dumps({"operations": (group_update or default_group_update)(library_in(body))})
        if name == "ConsolidatedList":
            if not merge:
                return json.dumps({"operations": []})
            ops = proposed_operations(body)
            # The groups propose the same operations: keep one copy of each, merged from both.
            half = len(ops) // 2
            return json.dumps({"operations": [op | {"merged_from": [i, i + half]} for i, op in enumerate(ops[:half])]})
        raise AssertionError(f"unexpected learner request {name!r}")

    return StubScript(reply_fn=reply)


def run_practice(tmp_path, configs, db_url, agent, learner, *args, api_key: str = "k"):
    env = {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "agent",
        "UTU_LLM_API_KEY": api_key,
        "LEARNER_URL": learner.base_url,
    }
    return run_script(PRACTICE, "--config_name", "test", "--db_url", db_url, *args, env=env, cwd=tmp_path)


def run_eval(tmp_path, configs, db_url, agent, dataset: str, exp_id: str, *args):
    """`run_eval.py --config_name local/mawps` on `dataset`, with the workspace's configs and the stub `agent`."""
    env = {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "a",
        "UTU_LLM_API_KEY": "k",
    }
    argv = ["--config_name", "local/mawps", "--dataset", dataset, "--exp_id", exp_id, "--db_url", db_url, *args]
    return run_script(str(ROOT / "scripts/run_eval.py"), *argv, env=env, cwd=tmp_path)


def query(db_url: str, sql: str, *params):
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return conn.execute(sql, params).fetchall()
