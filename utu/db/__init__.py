from utu.db.engine import Database, database_url
from utu.db.models import (
    Base,
    DatasetSample,
    EvalResult,
    EvaluationSample,
    ExperienceOperation,
    ExperienceSnapshot,
    Experiment,
    LearnerError,
    PracticeStep,
)

__all__ = [
    "Base",
    "Database",
    "DatasetSample",
    "EvalResult",
    "EvaluationSample",
    "ExperienceOperation",
    "ExperienceSnapshot",
    "Experiment",
    "LearnerError",
    "PracticeStep",
    "database_url",
]
