"""The Python API: `from utu.practice import TrainingFreeGRPO` (as in Youtu-Agent) and the example of docs/practice.md,
run verbatim against stub LLMs."""

import re

import pytest
import yaml

from tests.conftest import ROOT
from tests.practice.helpers import QUESTIONS, TEST_CONFIG, agent_script, evolving_learner, setup_workspace
from utu.errors import RunFailed


def readme_example() -> str:
    text = (ROOT / "docs/practice.md").read_text()
    return re.search(r"<!-- python-api .*?```python\n(.*?)```", text, re.DOTALL).group(1)


@pytest.fixture
def workspace(tmp_path, stub, monkeypatch):
    configs, _ = setup_workspace(tmp_path, TEST_CONFIG.replace("exp_id: t", "exp_id: my_practice"))
    (configs / "practice" / "test.yaml").rename(configs / "practice" / "my_practice.yaml")
    agent, learner = stub(agent_script()), stub(evolving_learner())
    monkeypatch.chdir(tmp_path)
    for key, value in {
        "UTU_CONFIG_DIR": str(configs),
        "UTU_LLM_BASE_URL": agent.base_url,
        "UTU_LLM_MODEL": "agent",
        "UTU_LLM_API_KEY": "k",
        "LEARNER_URL": learner.base_url,
    }.items():
        monkeypatch.setenv(key, value)
    return tmp_path


def test_the_readme_example_runs_verbatim(workspace, capsys):
    upload(workspace, "my.db")
    exec(compile(readme_example(), "docs/practice.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("runs/my_run/enhanced_agent.yaml") and (workspace / out[0]).is_file()
    assert out[1].startswith("0 ") and any(line.startswith("G0 When adding") for line in out)
    provider = yaml.safe_load((workspace / out[0]).read_text())["model"]["model_provider"]
    assert provider["base_url"].startswith("${oc.env:UTU_LLM_BASE_URL")  # as the command exports it, not the URL


def test_the_class_from_a_config_object_and_a_run_that_learns_nothing(workspace, stub, monkeypatch):
    import asyncio

    from utu.practice import TrainingFreeGRPO, load_practice_config

    upload(workspace, "p.db")
    monkeypatch.setenv("UTU_LLM_BASE_URL", stub(agent_script(pattern=("right",))).base_url)  # no contrast
    config = load_practice_config("my_practice", ["practice.epochs=1"])
    practice = TrainingFreeGRPO(config, db_url="sqlite:///p.db")
    with pytest.raises(RunFailed, match="none of 4 groups carried contrast"):
        asyncio.run(practice.run())
    assert not (workspace / "runs/my_practice/enhanced_agent.yaml").exists()


def test_fresh_recomputes_every_step_as_the_command_does(workspace, stub, monkeypatch):
    """`fresh=True` forgot the experiment and its attempts but, unlike `--fresh`, reused the saved libraries."""
    import asyncio

    from utu.practice import TrainingFreeGRPO, load_practice_config

    upload(workspace, "p.db")
    agent = stub(agent_script())
    monkeypatch.setenv("UTU_LLM_BASE_URL", agent.base_url)
    config = load_practice_config("my_practice", ["practice.epochs=1"])
    asyncio.run(TrainingFreeGRPO(config, db_url="sqlite:///p.db").run())
    first = agent.request_count
    again = TrainingFreeGRPO(config, db_url="sqlite:///p.db", fresh=True)
    assert asyncio.run(again.plan()).saved == 0
    asyncio.run(again.run())
    assert agent.request_count == 2 * first and config.practice.restart_step is None  # the caller's config untouched


def upload(workspace, db_file: str) -> None:
    from tests.conftest import run_script

    data = workspace / "arith.jsonl"
    result = run_script(
        "scripts/data/upload_dataset.py",
        "--file_path",
        str(data),
        "--dataset_name",
        "Arith",
        "--db_url",
        f"sqlite:///{workspace / db_file}",
        "--replace",
    )
    assert result.returncode == 0, result.stderr
    assert len(data.read_text().splitlines()) == len(QUESTIONS)


def test_youtu_agents_practice_utilities_import_from_utu_practice(monkeypatch):
    from utu.practice import TaskRecorder, parse_training_free_grpo_config

    monkeypatch.setattr(
        "sys.argv",
        [
            "x.py",
            "--config_name",
            "math_reasoning",
            "--experiment_name",
            "mine",
            "--epochs",
            "2",
            "--rollout_data_truncate",
            "10",
        ],
    )
    config = parse_training_free_grpo_config()
    assert (config.exp_id, config.practice.epochs, config.data.rollout_data_truncate) == ("mine", 2, 10)
    recorder = TaskRecorder("mine")
    recorder.experiences_update({"G0": "Check parity."})
    recorder.stat_update({"step": 0})
    recorder.stat_update({"mean": 0.5})
    assert (recorder.experiences, recorder.stats) == ({"G0": "Check parity."}, {"step": 0, "mean": 0.5})
