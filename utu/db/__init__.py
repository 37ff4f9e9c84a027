from utu.db.engine import Database, database_url
from utu.db.models import Base, DatasetSample, EvalResult, EvaluationSample, Experiment

__all__ = ["Base", "Database", "DatasetSample", "EvalResult", "EvaluationSample", "Experiment", "database_url"]
