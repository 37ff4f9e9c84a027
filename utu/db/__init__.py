from utu.db.engine import Database, database_url
from utu.db.models import Base, DatasetSample, EvaluationSample

__all__ = ["Base", "Database", "DatasetSample", "EvaluationSample", "database_url"]
