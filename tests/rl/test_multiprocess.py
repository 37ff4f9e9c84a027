"""GRPO on two CPU processes (gloo), launched as users launch it: parity with one process for every loss type,
with and without gradient accumulation and LoRA; the real command end to end; resume; main-process-only writes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from tests.rl import parity_cases
from tests.rl.test_run_grpo import records

ROOT = Path(__file__).resolve().parents[2]
# `--cpu --num_processes 2` would start ONE process (Accelerate needs MPI for that); this is torchrun's launcher.
LAUNCH = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]


def launch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*LAUNCH, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def two_process_params(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parity")
    done = launch(str(ROOT / "tests" / "rl" / "parity_cases.py"), str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("case", sorted(parity_cases.cases()))
def test_two_processes_with_half_the_prompts_equal_one_with_all(two_process_params, case):
    knobs = parity_cases.cases()[case]
    one = parity_cases.run_case(Accelerator(cpu=True), knobs)
    two = torch.load(two_process_params / f"{case}.pt")
    start = parity_cases.run_case(Accelerator(cpu=True), knobs, steps=0)  # the initial parameters
    assert one.keys() == two.keys() and one
    for name in [k for k in one if k.startswith("metrics/")]:
        assert one.pop(name).item() == pytest.approx(two.pop(name).item(), rel=1e-4, abs=1e-6), name
    moved = max((one[k] - start[k]).abs().max().item() for k in one)
    assert moved > 1e-3, "the updates must change the parameters, or parity means nothing"
    for name, value in one.items():
        assert torch.allclose(value, two[name], atol=1e-5, rtol=0), (name, (value - two[name]).abs().max().item())


def run_grpo_two(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return launch(
        str(ROOT / "scripts" / "run_grpo.py"), "--config_name", "toy", "--output_dir", str(tmp_path / "runs"), *args
    )


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(checkpoint / "model" / "model.safetensors")


def test_the_command_on_two_processes_writes_once_and_resumes_exactly(tmp_path):
    whole = run_grpo_two(tmp_path, "--exp_id", "whole", "--steps", "6")
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "runs" / "whole" / "grpo"
    assert [r["step"] for r in records(tmp_path, "whole")] == list(range(1, 7))  # one writer, not two
    assert all(r["completions"] == 16 for r in records(tmp_path, "whole"))  # both processes' 2 x 8 rows
    assert sorted(p.name for p in (out / "checkpoint").glob("rng_state_*.pt")) == ["rng_state_0.pt", "rng_state_1.pt"]
    assert len(list((out / "tensorboard").iterdir())) == 1
    assert whole.stdout.count("held-out test") == 1

    part = run_grpo_two(tmp_path, "--exp_id", "resumed", "--steps", "3")
    assert part.returncode == 0, part.stderr[-3000:]
    rest = run_grpo_two(tmp_path, "--exp_id", "resumed", "--steps", "6")
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "resuming" in rest.stderr
    assert [r["step"] for r in records(tmp_path, "resumed")] == list(range(1, 7))
    resumed = weights(tmp_path / "runs" / "resumed" / "grpo" / "checkpoint")
    uninterrupted = weights(out / "checkpoint")
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)  # bit-identical

    one = subprocess.run(
        [
            sys.executable,
            "scripts/run_grpo.py",
            "--config_name",
            "toy",
            "--exp_id",
            "resumed",
            "--steps",
            "8",
            "--output_dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert one.returncode == 2
    assert "saved by 2 process(es)" in one.stderr and "--num_processes 2" in one.stderr


def test_an_evolving_population_stays_one_population_across_processes(tmp_path):
    """Under 2 processes each draws its own tournaments and mutations (no seed), and each samples its own test
    completions; the main process's draws and the fitness over both processes' prompts are what every process
    uses, so both hold the same population, generation after generation."""
    done = launch(str(ROOT / "tests" / "rl" / "population_cases.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"population_rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]
    lrs = {member["lr"] for generation in ranks[0] for member in generation}
    assert lrs - {0.03}, "no learning rate mutated: the comparison would mean little"
