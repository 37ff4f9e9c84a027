"""One source per knob: descriptions on every field; docs/configuration.md tables and flags derived from the models."""

import subprocess
import sys
import typing

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from tests.conftest import ROOT, run_script
from utu.config import load_config
from utu.config.docs import MODELS, render
from utu.config.models import (
    AgentConfig,
    EvalConfig,
    ModelConfig,
    PracticeArguments,
    ScreeningConfig,
    TrainingFreeGRPOConfig,
    shaping_dump,
)


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


def repeated_defaults(data: dict, model: type[BaseModel], where: str = "") -> list[str]:
    """The keys of a YAML mapping that set a knob to its default (nested models followed)."""
    found = []
    for key, value in (data or {}).items():
        field = model.model_fields.get(key)
        if field is None:
            continue
        nested = next(
            (
                a
                for a in (field.annotation, *typing.get_args(field.annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
        if nested and isinstance(value, dict):
            found += repeated_defaults(value, nested, f"{where}{key}.")
        elif (default := field.get_default(call_default_factory=True)) is not PydanticUndefined and value == default:
            found.append(f"{where}{key}: {value!r}")
    return found


SHIPPED = [
    ("model/*.yaml", ModelConfig),
    ("agents/**/*.yaml", AgentConfig),
    ("eval/**/*.yaml", EvalConfig),
    ("practice/*.yaml", TrainingFreeGRPOConfig),
]


@pytest.mark.parametrize(("pattern", "model"), SHIPPED, ids=[p for p, _ in SHIPPED])
def test_no_shipped_config_repeats_a_default(pattern, model):
    """A default written again in a YAML file is a second place to change it (and to forget)."""
    # Agents that practice exports beside the shipped ones (git-ignored) carry every field on purpose.
    files = sorted(f for f in (ROOT / "configs").glob(pattern) if not f.name.endswith("_practice_agent.yaml"))
    assert files
    repeats = {str(f.relative_to(ROOT)): repeated_defaults(yaml.safe_load(f.read_text()), model) for f in files}
    assert {f: r for f, r in repeats.items() if r} == {}


def test_practice_takes_its_attempt_bounds_from_the_evaluation_unless_set():
    practice = load_config("practice", "web_search", TrainingFreeGRPOConfig)
    assert practice.rollout_concurrency == practice.evaluation.concurrency == 128
    assert practice.task_timeout == practice.evaluation.task_timeout == 1800
    own = load_config("practice", "local_mawps", TrainingFreeGRPOConfig, ["practice.rollout_concurrency=3"])
    assert (own.rollout_concurrency, own.task_timeout) == (3, 300)
    # a config built in code, or copied with another practice, still reads "unset" as the evaluation's
    copied = practice.model_copy(update={"practice": PracticeArguments()})
    assert (copied.rollout_concurrency, copied.task_timeout) == (128, 1800)
    assert copied.practice.rollout_concurrency is None  # nothing was written into it


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["practice.grpo_n=400000"], "a step of 50 questions × K=400000 = 20,000,000 attempts"),
        (["practice.batch_size=2000000", "practice.grpo_n=1"], "lower practice.grpo_n or batch_size"),
        (
            ["+practice.validation.dataset=X", "practice.validation.size=500", "practice.validation.pass_k=4000"],
            "a validation of 500 questions × K=4000",
        ),
    ],
)
def test_a_practice_whose_step_or_validation_holds_more_attempts_than_a_run_takes_is_refused(overrides, said):
    """Every attempt is a row held in memory: a typo's K=100000 grew by 75 MiB a second until the machine ran out."""
    from utu.errors import ConfigError

    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        load_config("practice", "math_reasoning", TrainingFreeGRPOConfig, overrides)
    load_config("practice", "math_reasoning", TrainingFreeGRPOConfig, ["practice.grpo_n=64"])  # a large one runs


def test_an_override_sets_a_knob_no_yaml_file_wrote():
    config = load_config("eval", "web/web", EvalConfig, ["agent.model.retry_max_delay=5", "max_failed_share=0.5"])
    assert (config.agent.model.retry_max_delay, config.max_failed_share) == (5, 0.5)


def test_none_on_the_command_line_overrides_a_value_the_yaml_set():
    from utu.config.loader import compose_config
    from utu.practice.arguments import build_config, parse_args

    argv = ["run", "--config_name", "local_mawps", "--max_experiences", "none", "--restart_step", "none"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        args, overrides = parse_args()
    config = build_config(args, compose_config("practice", "local_mawps", overrides))
    assert compose_config("practice", "local_mawps").data["practice"]["max_experiences"] is not None
    assert config.practice.max_experiences is None and config.practice.restart_step is None
