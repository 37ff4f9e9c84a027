"""Experiment records and config fingerprints: resume only under the config that made the results."""

import hashlib
import json
from typing import Any

from utu.db.engine import Database
from utu.db.models import Experiment
from utu.errors import ConfigError


def fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def changed_fields(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two nested dicts differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += changed_fields(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


async def register_experiment(db: Database, exp_id: str, kind: str, shaping_config: dict[str, Any]) -> bool:
    """Record a new experiment, or check that a resumed one has the same shaping config.

    Returns True if the experiment already existed. Raises `ConfigError` naming the changed fields.
    """
    print_ = fingerprint(shaping_config)
    async with db.transaction() as session:
        existing = await session.get(Experiment, exp_id)
        if existing is None:
            session.add(Experiment(exp_id=exp_id, kind=kind, fingerprint=print_, config=shaping_config))
            return False
    if existing.kind != kind:
        raise ConfigError(f"exp_id {exp_id!r} is a {existing.kind} experiment; choose another --exp_id")
    if existing.fingerprint != print_:
        fields = changed_fields(existing.config, shaping_config) or ["(config)"]
        raise ConfigError(
            f"exp_id {exp_id!r} was run with a different config (changed: {', '.join(fields)}); "
            "pass --fresh to start over, or use a new --exp_id"
        )
    return True


async def forget_experiment(db: Database, exp_id: str) -> None:
    async with db.transaction() as session:
        existing = await session.get(Experiment, exp_id)
        if existing is not None:
            await session.delete(existing)
