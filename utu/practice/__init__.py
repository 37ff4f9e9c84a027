"""Training-Free GRPO practice: rollouts, verification, the experience updater and the library.

from utu.practice import TrainingFreeGRPO, run_practice, load_practice_config
(and Youtu-Agent's utilities: TaskRecorder, parse_training_free_grpo_config)
"""

import importlib

_HOMES = {
    "PracticeOutcome": "training_free_grpo",
    "TrainingFreeGRPO": "training_free_grpo",
    "load_practice_config": "training_free_grpo",
    "run_practice": "training_free_grpo",
    "TaskRecorder": "types",
    "parse_training_free_grpo_config": "arguments",
}
__all__ = list(_HOMES)


def __getattr__(name: str):
    # Imported on first use, so that importing one module of this package (screening, library) stays light.
    if name in _HOMES:
        return getattr(importlib.import_module(f"utu.practice.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'utu.practice' has no attribute {name!r}")
