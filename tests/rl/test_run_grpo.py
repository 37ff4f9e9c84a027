"""scripts/run_grpo.py end to end: the toy config in seconds, and the embedded SmolLM2 (integration)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_grpo(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "run_grpo.py"),
            "--output_dir",
            str(tmp_path / "runs"),
            "--db_url",
            f"sqlite:///{tmp_path / 'utu.db'}",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def records(tmp_path: Path, exp_id: str) -> list[dict]:
    lines = (tmp_path / "runs" / exp_id / "grpo" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_toy_run_learns_logs_and_resumes(tmp_path):
    first = run_grpo(tmp_path, "--config_name", "toy", "--steps", "12")
    assert first.returncode == 0, first.stderr[-2000:]
    out = tmp_path / "runs" / "grpo_toy" / "grpo"
    assert [r["step"] for r in records(tmp_path, "grpo_toy")] == list(range(1, 13))
    assert (out / "checkpoint" / "trainer_state.pt").is_file()
    assert any((out / "tensorboard").iterdir())
    keys = {
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "completions/mean_length",
        "entropy",
        "gen_time",
        "clip_ratio/low",
        "clip_ratio/high",
        "grad_norm",
        "lr",
    }
    assert keys <= set(records(tmp_path, "grpo_toy")[-1])

    again = run_grpo(tmp_path, "--config_name", "toy", "--steps", "30")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stderr
    assert [r["step"] for r in records(tmp_path, "grpo_toy")] == list(range(1, 31))  # no step twice, none lost
    result = json.loads((out / "test.json").read_text())
    assert result["steps"] == 30
    assert result["after"]["Mean@4"] > result["before"]["Mean@4"] + 0.3


def test_resuming_under_changed_settings_is_refused(tmp_path):
    assert run_grpo(tmp_path, "--config_name", "toy", "--steps", "2").returncode == 0
    changed = run_grpo(tmp_path, "--config_name", "toy", "--steps", "4", "trainer.lr=0.5")
    assert changed.returncode == 2
    assert "error:" in changed.stderr and "lr" in changed.stderr and "--fresh" in changed.stderr
    assert len(records(tmp_path, "grpo_toy")) == 2  # nothing written by the refused run
    # other held-out questions would make "before" and "after" answer different questions
    other_data = run_grpo(tmp_path, "--config_name", "toy", "--steps", "4", "data.test_size=3")
    assert other_data.returncode == 2 and "changed: data.test_size" in other_data.stderr
    more_steps = run_grpo(tmp_path, "--config_name", "toy", "--steps", "3")
    assert more_steps.returncode == 0 and "resuming" in more_steps.stderr
    assert [r["step"] for r in records(tmp_path, "grpo_toy")] == [1, 2, 3]


class RunsCodeOnLoad:
    """What a pickle can do when loaded: call any function, here one that writes a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.write_text, (self.marker, "ran")


@pytest.mark.parametrize("file", ["trainer_state.pt", "rng_state_0.pt"])
def test_a_checkpoint_that_would_run_code_when_loaded_is_refused_in_one_line_and_runs_nothing(tmp_path, file):
    import torch

    assert run_grpo(tmp_path, "--config_name", "toy", "--steps", "2").returncode == 0
    state = tmp_path / "runs" / "grpo_toy" / "grpo" / "checkpoint" / file
    marker = tmp_path / "marker"
    torch.save({**torch.load(state, weights_only=False), "extra": RunsCodeOnLoad(marker)}, state)
    resumed = run_grpo(tmp_path, "--config_name", "toy", "--steps", "4")
    assert resumed.returncode == 2 and not marker.exists()
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and file in errors[0] and "names getattr" in errors[0] and "run code" in errors[0], (
        resumed.stderr
    )
    assert len(records(tmp_path, "grpo_toy")) == 2  # nothing written by the refused run


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.loss_type=ppo", "trainer.loss_type"),
        ("trainer.group_size=1", "trainer.group_size"),
        ("data.test_size=100", "data.test_size"),
        ("agent.instructions=hi", "data.system and agent both give the system message"),  # toy sets data.system
        ("trainer.lr=inf", "trainer.lr"),  # (it wrote NaN weights into the checkpoint)
        ("data.test_size=0", "data.test_size"),  # (it reported Mean@k 0.000 on no question)
        ("model.device=cuda:7", "model.device"),
        ("verify_func_name=nope", "nope"),
    ],
)
def test_bad_settings_give_one_line_and_exit_2(tmp_path, override, expected):
    result = run_grpo(tmp_path, "--config_name", "toy", override)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr[-2000:]


def test_fresh_deletes_nothing_until_the_run_can_start(tmp_path):
    assert run_grpo(tmp_path, "--config_name", "toy", "--steps", "2").returncode == 0
    for typo in ("verify_func_name=nope", f"model.path={tmp_path}/no_such_model"):
        refused = run_grpo(tmp_path, "--config_name", "toy", "--steps", "2", "--fresh", typo)
        assert refused.returncode == 2 and len(records(tmp_path, "grpo_toy")) == 2  # the finished run is kept
    assert "no_such_model: no such folder" in refused.stderr
    (tmp_path / "file").write_text("not a folder")
    into_a_file = run_grpo(tmp_path, "--config_name", "toy", "--output_dir", str(tmp_path / "file"))
    errors = [line for line in into_a_file.stderr.splitlines() if line.startswith("error:")]
    assert into_a_file.returncode == 2 and len(errors) == 1 and "cannot create it (Not a directory)" in errors[0]


def test_a_save_cut_between_its_renames_resumes_from_the_checkpoint_before_it(tmp_path):
    assert run_grpo(tmp_path, "--config_name", "toy", "--steps", "2").returncode == 0
    out = tmp_path / "runs" / "grpo_toy" / "grpo"
    (out / "checkpoint").rename(out / "checkpoint.old")  # as a kill after the first rename leaves it
    resumed = run_grpo(tmp_path, "--config_name", "toy", "--steps", "3")
    assert resumed.returncode == 0 and "resuming" in resumed.stderr, resumed.stderr[-2000:]
    assert [r["step"] for r in records(tmp_path, "grpo_toy")] == [1, 2, 3]


@pytest.mark.parametrize("damage", ["test.json", "run.json", "checkpoint/trainer_state.pt"])
def test_a_damaged_run_folder_is_one_line_that_says_to_start_over(tmp_path, damage):
    assert run_grpo(tmp_path, "--config_name", "toy", "--steps", "2").returncode == 0
    path = tmp_path / "runs" / "grpo_toy" / "grpo" / damage
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # cut short, as a kill mid-write would
    resumed = run_grpo(tmp_path, "--config_name", "toy", "--steps", "3")
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("error:")]
    assert resumed.returncode == 2 and len(errors) == 1 and "--fresh" in errors[0], resumed.stderr[-2000:]


def test_a_verify_function_that_fails_on_every_completion_fails_the_run(tmp_path):
    (tmp_path / "broken.py").write_text(
        "def verify_func(sample, timeout_score=0, **kwargs):\n    raise KeyError('x')\n"
    )
    result = run_grpo(tmp_path, "--config_name", "toy", "--steps", "2", f"verify_filename={tmp_path / 'broken.py'}")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert "the verify function failed on every completion" in errors[0]


@pytest.mark.integration
def test_embedded_smollm2_trains_a_lora_step_on_mawps(tmp_path):
    result = run_grpo(
        tmp_path,
        "--steps",
        "2",
        "prompts_per_step=1",
        "trainer.group_size=2",
        "trainer.max_new_tokens=16",
        "trainer.filter_zero_std_groups=false",
        "data.test_size=2",
        "test_k=1",
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "runs" / "grpo_smollm2_mawps" / "grpo"
    assert (out / "checkpoint" / "model" / "adapter_config.json").is_file()  # LoRA: the adapter, not 540 MB
    steps = records(tmp_path, "grpo_smollm2_mawps")
    assert [r["step"] for r in steps] == [1, 2] and all(r["completions"] == 2 for r in steps)
    test = json.loads((out / "test.json").read_text())
    assert set(test) == {"before", "after", "steps"} and "tools" not in test["after"]["per_prompt"][0]


@pytest.mark.integration
def test_the_embedded_qwen_trains_as_an_agent_with_its_tools(tmp_path):
    """configs/rl/qwen05b_unit_tools.yaml as shipped, made small: the agent config's tools are offered, the
    completions run in turns, and the step records the tool metrics."""
    result = run_grpo(
        tmp_path,
        "--config_name",
        "qwen05b_unit_tools",
        "--steps",
        "1",
        "prompts_per_step=1",
        "trainer.group_size=2",
        "trainer.max_new_tokens=48",
        "trainer.filter_zero_std_groups=false",
        "data.test_size=1",
        "test_k=1",
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (step,) = records(tmp_path, "grpo_qwen05b_unit_tools")
    assert step["completions"] == 2 and {"turns/mean", "tool_time", "results_time"} <= set(step)
    test = json.loads((tmp_path / "runs" / "grpo_qwen05b_unit_tools" / "grpo" / "test.json").read_text())
    assert [len(p["tools"]) for p in test["after"]["per_prompt"]] == [1]  # each completion's tool calls


def test_an_llm_judged_verifier_is_a_reward(tmp_path, stub, monkeypatch):
    from utu.llm.stub import StubScript

    judge = stub(StubScript(reply_fn=lambda body: "yes" if "say" in str(body["messages"]) else "no"))
    verifier = tmp_path / "judged.py"
    verifier.write_text(
        "async def verify_func(sample, timeout_score=0, **kwargs):\n"
        "    verdict = await kwargs['llm'].query_one(messages=[{'role': 'user', 'content':\n"
        "        f'Did the reply to {sample.raw_question!r} say a? {sample.response!r}'}])\n"
        "    return {'reward': 1.0 if verdict == 'yes' else 0.0, 'reasoning': verdict}\n"
    )
    for key, value in {
        "JUDGE_LLM_BASE_URL": judge.base_url,
        "JUDGE_LLM_MODEL": "judge",
        "JUDGE_LLM_API_KEY": "k",
    }.items():
        monkeypatch.setenv(key, value)
    result = run_grpo(tmp_path, "--config_name", "toy", "--steps", "2", f"verify_filename={verifier}")
    assert result.returncode == 0, result.stderr
    assert judge.request_count > 0 and all(r["model"] == "judge" for r in judge.requests)
    assert [r["reward"] for r in records(tmp_path, "grpo_toy")] == [1.0, 1.0]  # every completion judged "yes"
