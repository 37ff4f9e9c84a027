"""One source per knob: descriptions on every field; docs/configuration.md tables and flags derived from the models."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_script
from utu.config.docs import MODELS, render
from utu.config.models import PracticeArguments, ScreeningConfig, shaping_dump


@pytest.mark.parametrize("name", MODELS)
def test_every_knob_is_described(name):
    model = MODELS[name]
    assert not [field for field, info in model.model_fields.items() if not info.description]


def test_the_readme_tables_match_the_models():
    text = (ROOT / "docs/configuration.md").read_text()
    assert text.count("<!-- knobs ") == len(MODELS)
    assert render(text) == text, "run: python -m utu.config.docs docs/configuration.md"
    check = subprocess.run([sys.executable, "-m", "utu.config.docs", "--check", str(ROOT / "docs/configuration.md")])
    assert check.returncode == 0


def test_every_plain_practice_knob_is_a_flag():
    help_text = run_script("scripts/run_training_free_GRPO.py", "--help").stdout
    for name in PracticeArguments.model_fields:
        if name not in ("learner_model", "screening"):
            assert f"--{name}" in help_text, name
    for name in ScreeningConfig.model_fields:
        assert f"--screening_{name}" in help_text, name
    assert "Trajectory tokens shown to the summariser" in " ".join(help_text.split())


def test_an_unknown_flag_is_one_line():
    result = run_script("scripts/run_training_free_GRPO.py", "--config_name", "local_mawps", "--summary_budget", "3")
    assert result.returncode == 2 and "unrecognized arguments: --summary_budget" in result.stderr


def test_fingerprints_leave_out_what_may_change_on_resume():
    shaped = shaping_dump(PracticeArguments())
    assert "grpo_n" in shaped and "rollout_temperature" in shaped
    assert not {"epochs", "restart_step", "rollout_concurrency", "task_timeout", "do_eval"} & set(shaped)
