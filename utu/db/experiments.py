"""Experiment records and config fingerprints: resume only under the config that made the results."""

import fnmatch
import hashlib
import json
from typing import Any, cast

from sqlalchemy import CursorResult, delete, or_, select, update

from utu.db.engine import Database
from utu.db.models import EvaluationSample, Experiment, PracticeStep
from utu.errors import ConfigError
from utu.tracing.redact import Redactor


def fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def changed_fields(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two nested dicts differ. A key the old one lacks and the new one leaves off or empty
    (None, False, {}, []) is no change: a knob added by a later version of utu, set as that version behaved
    (a knob added later is off when it is False or None); so is a key the new one lacks that the old one left
    empty, and one a later version no longer records whatever its value (`NO_LONGER_RECORDED`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in old and _empty(new[key]):
                continue
            if key not in new and (_empty(old[key]) or _no_longer_recorded(f"{prefix}{key}")):
                continue
            out += changed_fields(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):  # e.g. toolkits, one by one
        return [f for i, (a, b) in enumerate(zip(old, new, strict=True)) for f in changed_fields(a, b, f"{prefix}{i}.")]
    return [] if old == new else [prefix.rstrip(".")]


def _empty(value: Any) -> bool:
    return value is False or value in (None, {}, [])  # (0 == False: `is`)


# Fields older versions recorded and this one leaves out of the fingerprint (they may hold keys): a run recorded
# with them resumes, and its record is rewritten without them.
NO_LONGER_RECORDED = ("*toolkits.*.env", "*toolkits.*.headers")


def _no_longer_recorded(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in NO_LONGER_RECORDED)


# What a later version records of the same config (digests of its data): a run recorded without them resumes,
# and records them then.
RECORDED_LATER = {"practice.validation.content", "evaluation.verify_file_sha256"}


# Kept in an experiment's config, outside its fingerprint: what a run may change without being another
# experiment (an eval's verifier file: a fixed verifier judges the same attempts again).
BESIDE_THE_FINGERPRINT = {"verify_file_sha256"}


def _has_path(config: Any, dotted: str) -> bool:
    for key in dotted.split("."):
        if isinstance(config, list) and key.isdigit() and int(key) < len(config):  # toolkits.0.timeout
            config = config[int(key)]
        elif isinstance(config, dict) and key in config:
            config = config[key]
        else:
            return False
    return True


async def register_experiment(db: Database, exp_id: str, kind: str, shaping_config: dict[str, Any]) -> bool:
    """Record a new experiment, or check that a resumed one has the same shaping config.

    Returns True if the experiment already existed. Raises `ConfigError` naming the changed fields. The config
    is stored masked of keys (an MCP server's token in its command or url), its fingerprint taken unmasked.
    """
    print_ = fingerprint(shaping_config)
    shaping_config = Redactor().value(shaping_config)
    async with db.transaction() as session:
        existing = await session.get(Experiment, exp_id)
        if existing is None:
            session.add(Experiment(exp_id=exp_id, kind=kind, fingerprint=print_, config=shaping_config))
            return False
    if existing.kind != kind:
        raise _other_kind(exp_id, existing.kind, kind)
    if existing.fingerprint != print_:
        # Allowed: only knobs a later version added, at their defaults; or nothing was computed under the old config
        # (a run refused by its endpoint, then fixed): the same experiment, its unrun rows made anew
        fields = await _resumable_changes(db, existing, shaping_config)
        if fields:
            await delete_rows(db, exp_id)
        async with db.transaction() as session:
            stored = await session.get_one(Experiment, exp_id)  # read above; delete_rows keeps it
            beside = {k: v for k, v in stored.config.items() if k in BESIDE_THE_FINGERPRINT}
            stored.fingerprint, stored.config = print_, shaping_config | beside
    return True


async def check_resumable(db: Database, exp_id: str, kind: str, shaping_config: dict[str, Any]) -> None:
    """What `register_experiment` would refuse (another kind, a changed config), refused; nothing written."""
    async with db.sessions() as session:
        existing = await session.get(Experiment, exp_id)
    if existing is None:
        return
    if existing.kind != kind:
        raise _other_kind(exp_id, existing.kind, kind)
    if existing.fingerprint != fingerprint(shaping_config):
        await _resumable_changes(db, existing, Redactor().value(shaping_config))


async def _resumable_changes(db: Database, existing: Experiment, shaping_config: dict[str, Any]) -> list[str]:
    """The fields of `shaping_config` (masked) that differ from the recorded experiment's, if a run may resume
    under them; `ConfigError` naming them if they change results already computed."""
    recorded = {k: v for k, v in existing.config.items() if k not in BESIDE_THE_FINGERPRINT}
    fields = [f for f in changed_fields(recorded, shaping_config) if f not in RECORDED_LATER or _has_path(recorded, f)]
    if not fields or not await _has_results(db, existing.exp_id):
        return fields
    added = [f for f in fields if not _has_path(existing.config, f)]
    resume = (
        f"; {', '.join(added)} came after that run: set it off (false or none) to resume the run as it was"
        if added
        else ""
    )
    raise ConfigError(
        f"exp_id {existing.exp_id!r} was run with a different config (changed: {', '.join(fields)}){resume}; "
        "pass --fresh to start over, or use a new --exp_id"
    )


async def _has_results(db: Database, exp_id: str) -> bool:
    """Whether anything was computed for `exp_id`: a rolled-out attempt or a practice step."""
    async with db.sessions() as s:
        done = EvaluationSample.stage.in_(("rollout", "judged"))
        attempt = await s.scalar(select(EvaluationSample.id).where(EvaluationSample.owner == exp_id, done).limit(1))
        step = await s.scalar(select(PracticeStep.exp_id).where(PracticeStep.exp_id == exp_id).limit(1))
    return attempt is not None or step is not None


async def check_kind(db: Database, exp_id: str, kind: str) -> None:
    """Refuse `exp_id` if another kind of experiment holds it (before --fresh could delete that one's work)."""
    async with db.sessions() as session:
        existing = await session.get(Experiment, exp_id)
    if existing is not None and existing.kind != kind:
        raise _other_kind(exp_id, existing.kind, kind)


def _other_kind(exp_id: str, existing: str, kind: str) -> ConfigError:
    return ConfigError(
        f"exp_id {exp_id!r} is {_a(existing)} experiment, not {_a(kind)}; nothing was changed "
        f"(--fresh forgets only {_a(kind)} of that name): choose another --exp_id"
    )


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


async def forget_experiment(db: Database, exp_id: str) -> None:
    async with db.transaction() as session:
        existing = await session.get(Experiment, exp_id)
        if existing is not None:
            await session.delete(existing)


async def check_row_owner(db: Database, exp_ids: list[str], owner: str, prefixes: tuple[str, ...] = ()) -> None:
    """Refuse to touch attempt rows stored under one of `exp_ids`, or an exp_id that starts with one of
    `prefixes`, by another experiment."""
    named = or_(
        EvaluationSample.exp_id.in_(exp_ids),
        *(EvaluationSample.exp_id.startswith(p, autoescape=True) for p in prefixes),
    )
    async with db.sessions() as s:
        row = (
            await s.execute(
                select(EvaluationSample.exp_id, EvaluationSample.owner)
                .where(
                    named,
                    or_(EvaluationSample.owner != owner, EvaluationSample.owner.is_(None)),
                )
                .limit(1)
            )
        ).first()
    if row is not None:
        raise ConfigError(
            f"exp_id {row.exp_id!r} holds attempts of experiment {row.owner!r}; they are not {owner!r}'s to read, "
            "reuse or delete: choose another --exp_id"
        )


async def delete_rows(db: Database, owner: str) -> None:
    """Every attempt row `owner` made (an eval's own, or a practice's epochs and step evaluations)."""
    async with db.transaction() as s:
        await s.execute(delete(EvaluationSample).where(EvaluationSample.owner == owner))


async def judge_again_if_the_verifier_changed(db: Database, exp_id: str, digest: str | None) -> int:
    """Record the verifier file an eval's attempts are judged by (`verify_file_sha256`, BESIDE_THE_FINGERPRINT: a
    fixed verifier is no new experiment); if it changed since, its judged attempts are judged again by this one
    (set back to rolled out). Returns how many. (A run recorded before utu kept the digest records it, and judges
    nothing again: what judged it is not known.)"""
    async with db.transaction() as s:
        experiment = await s.get_one(Experiment, exp_id)
        before = experiment.config.get("verify_file_sha256")
        if before == digest:
            return 0
        experiment.config = experiment.config | {"verify_file_sha256": digest}
        if before is None or digest is None:  # (recorded by an older utu, or judged by utu's own verifier)
            return 0
        judged = (EvaluationSample.owner == exp_id) & (EvaluationSample.stage == "judged")
        result = cast(CursorResult, await s.execute(update(EvaluationSample).where(judged).values(stage="rollout")))
    return result.rowcount
