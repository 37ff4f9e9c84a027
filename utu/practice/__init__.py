"""Training-Free GRPO practice: rollouts, verification, the experience updater and the library.

from utu.practice import TrainingFreeGRPO, run_practice, load_practice_config
"""

__all__ = ["PracticeOutcome", "TrainingFreeGRPO", "load_practice_config", "run_practice"]


def __getattr__(name: str):
    # Imported on first use: utu.app (which the API needs) itself imports modules of this package.
    if name in __all__:
        from utu.practice import training_free_grpo

        return getattr(training_free_grpo, name)
    raise AttributeError(f"module 'utu.practice' has no attribute {name!r}")
