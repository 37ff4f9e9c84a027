"""A non-editable `pip install` of utu, in a fresh venv, runs the workflow from a folder with no checkout."""

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from tests.conftest import ROOT
from tests.practice.helpers import QUESTIONS, agent_script, evolving_learner, schema_of
from utu.llm.stub import StubScript

COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "runs", "build", "*.egg-info", "utu.db*", ".utu", "__pycache__")


def run(*command, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv with utu installed from a built wheel; its dependencies are borrowed from this environment."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=COPY_IGNORE)
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "wheel", source
    )
    assert built.returncode == 0, built.stderr
    venv = tmp / "venv"
    assert run(sys.executable, "-m", "venv", "--without-pip", venv).returncode == 0
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((tmp / "wheel").glob("utu-*.whl"))
    pip = run(venv / "bin/python", "-m", "pip", "install", "--no-deps", "-q", wheel)  # pip is borrowed too
    assert pip.returncode == 0, pip.stderr
    return venv


@pytest.mark.integration
def test_a_wheel_install_runs_upload_practice_and_eval_without_a_checkout(installed, tmp_path, stub):
    where = run(installed / "bin/python", "-c", "import utu; print(utu.__file__)", cwd=tmp_path)
    assert str(installed) in where.stdout, where.stdout + where.stderr  # the installed copy, not the checkout
    agent, learner = agent_script().reply_fn, evolving_learner().reply_fn
    server = stub(StubScript(reply_fn=lambda body: learner(body) if schema_of(body) else agent(body)))
    env = {**os.environ, "UTU_LLM_BASE_URL": server.base_url, "UTU_LLM_MODEL": "stub", "UTU_LLM_API_KEY": "k"}
    env.pop("UTU_CONFIG_DIR", None)
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(f'{{"question": "{q}", "answer": "{a}"}}\n' for q, a in QUESTIONS.items()))
    db = f"sqlite:///{tmp_path / 'utu.db'}"
    bin_ = installed / "bin"
    upload = run(
        bin_ / "utu-upload", "--file_path", data, "--dataset_name", "Arith", "--db_url", db, cwd=tmp_path, env=env
    )
    assert upload.returncode == 0, upload.stderr
    practice = run(
        bin_ / "utu-practice",
        "--config_name",
        "local_mawps",
        "--practice_dataset_name",
        "Arith",
        "--batch_size",
        "4",
        "--grpo_n",
        "2",
        "--db_url",
        db,
        cwd=tmp_path,
        env=env,
    )
    assert practice.returncode == 0, practice.stderr
    enhanced = tmp_path / "runs/local_mawps_practice/enhanced_agent.yaml"
    assert enhanced.is_file()
    evaluate = run(
        bin_ / "utu-eval",
        "--config_name",
        "local/mawps",
        "--dataset",
        "Arith",
        "--agent_config",
        enhanced,
        "--exp_id",
        "enhanced",
        "--db_url",
        db,
        cwd=tmp_path,
        env=env,
    )
    assert evaluate.returncode == 0, evaluate.stderr
    assert (tmp_path / "runs/enhanced/eval_metrics.json").is_file()
    assert not (tmp_path / "configs").exists()  # the packaged configs were used, nothing was written there
    rows = tmp_path / "rows.jsonl"  # the screening's word lists ship in the wheel
    rows.write_text('{"experience": "当题目涉及正六边形时，先把它分成六个等边三角形。"}\n', encoding="utf-8")
    screen = run(bin_ / "python", "-m", "utu.commands.library", "screen", "--file", rows, cwd=tmp_path, env=env)
    assert screen.returncode == 0 and screen.stdout.startswith("KEPT"), screen.stdout + screen.stderr
