"""SQLAlchemy 2.x typed models. Table names match Youtu-Agent (`data`, `evaluation_data`) so users find them.

Unique keys make retries idempotent: a data set row is (dataset, index); an attempt is
(exp_id, dataset_index, attempt).
"""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class DatasetSample(Base):
    """One question of an uploaded data set."""

    __tablename__ = "data"
    __table_args__ = (UniqueConstraint("dataset", "index", name="uq_data_dataset_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset: Mapped[str] = mapped_column(String(200), index=True)
    index: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(100), default="training_free_grpo")
    question: Mapped[str] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    topic: Mapped[str | None] = mapped_column(String(200), nullable=True)
    level: Mapped[str | None] = mapped_column(String(50), nullable=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    source_index: Mapped[int | None] = mapped_column(Integer, nullable=True)  # its index in the original source
    file_name: Mapped[str | None] = mapped_column(Text, nullable=True)  # a file the question comes with
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EvaluationSample(Base):
    """One attempt at one question within an experiment: the rollout, then its judgement.

    `stage` moves init -> rollout -> judged; a failed attempt keeps its `error` and stays out of rewards.
    """

    __tablename__ = "evaluation_data"
    __table_args__ = (
        UniqueConstraint("owner", "exp_id", "dataset_index", "attempt", name="uq_eval_owner_exp_index_attempt"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    # The experiment that made the row and alone may read, reuse or delete it: an eval's own exp_id, or the
    # practice experiment for its `<P>_epoch_<e>` and `<P>_eval_step<N>` rows. Not derived from names.
    owner: Mapped[str] = mapped_column(String(200), index=True)
    dataset: Mapped[str] = mapped_column(String(200))
    dataset_index: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)  # practice step (None in evals)
    source: Mapped[str] = mapped_column(String(100), default="training_free_grpo")
    level: Mapped[str | None] = mapped_column(String(50), nullable=True)
    raw_question: Mapped[str] = mapped_column(Text)
    augmented_question: Mapped[str | None] = mapped_column(Text, nullable=True)
    correct_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    response: Mapped[str | None] = mapped_column(Text, nullable=True)
    trajectories: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    reasoning: Mapped[str | None] = mapped_column(Text, nullable=True)
    correct: Mapped[bool | None] = mapped_column(nullable=True)
    stage: Mapped[str] = mapped_column(String(20), default="init", index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    time_cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    tool_calls: Mapped[int | None] = mapped_column(Integer, nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    trace_url: Mapped[str | None] = mapped_column(Text, nullable=True)  # the attempt's trace in Phoenix's UI
    # Youtu-Agent's judgement columns: "Correct"/"Incorrect", and what a verifier reports, when it does
    judged_response: Mapped[str | None] = mapped_column(String(20), nullable=True)
    extracted_final_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    confidence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class Experiment(Base):
    """One evaluation or practice run, with the fingerprint of the config that shapes its results.

    Resuming an experiment under a config with another fingerprint is refused (the reference silently
    mixed old and new results).
    """

    __tablename__ = "experiments"

    exp_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # "eval" | "practice"
    fingerprint: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ExperimentLease(Base):
    """Who is running an experiment right now. A live lease refuses a second run of the same exp_id; a run
    that died leaves a lease that expires (or is taken over at once on the same host when its pid is gone)."""

    __tablename__ = "experiment_leases"

    exp_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(100))  # a random id of the holding run
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class EvalResult(Base):
    """Metrics of an evaluation, stored each time it completes."""

    __tablename__ = "eval_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ExperienceSnapshot(Base):
    """The experience library after a practice step. Ids are stable across steps (never renumbered)."""

    __tablename__ = "experience_snapshots"
    __table_args__ = (UniqueConstraint("exp_id", "step", name="uq_snapshot_exp_step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(Integer)
    experiences: Mapped[dict[str, Any]] = mapped_column(JSON)  # id -> text, in insertion order
    next_id: Mapped[int] = mapped_column(Integer)  # the number of the next new id ("G<next_id>")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ExperienceOperation(Base):
    """One operation the learner proposed for the library at a step: applied, or refused with the reason."""

    __tablename__ = "experience_operations"

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(10))  # ADD | UPDATE | DELETE | NONE
    experience_id: Mapped[str | None] = mapped_column(String(20), nullable=True)
    old_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    new_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    source_questions: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # dataset indices
    rationale: Mapped[str | None] = mapped_column(Text, nullable=True)
    status: Mapped[str] = mapped_column(String(10))  # applied | refused
    # a refusal's kind (utu.practice.outcomes.Refusal: screened, gate, gate_alone, library_full, ...), to count by
    refusal: Mapped[str | None] = mapped_column(String(30), nullable=True, index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # for people: rendered from kind and detail
    learner_try: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 0; n: the learner's n-th second look
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PracticeStep(Base):
    """Statistics of one completed practice step."""

    __tablename__ = "practice_steps"
    __table_args__ = (UniqueConstraint("exp_id", "step", name="uq_practice_step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(Integer)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LearnerError(Base):
    """A learner call that failed (after its retry): recorded, and the step went on without it."""

    __tablename__ = "learner_errors"

    id: Mapped[int] = mapped_column(primary_key=True)
    exp_id: Mapped[str] = mapped_column(String(200), index=True)
    step: Mapped[int] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(30))
    dataset_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str] = mapped_column(Text)
    raw_reply: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
