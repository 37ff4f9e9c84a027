"""One run per experiment at a time: a lease row, renewed while the run lives, released at its end.

A second run of the same exp_id is refused at start with one line naming the holder (host, pid, since
when). A run killed with `kill -9` cannot release its lease: it expires `LEASE_SECONDS` after the last
renewal, and on the same host a lease whose pid is gone is taken over at once. A run whose lease was taken over
while it lived (not renewed for `LEASE_SECONDS`: a machine asleep, a database out of reach) stops at its next
renewal with one line, so two runs never write one experiment at once.
"""

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy import CursorResult, delete, update
from sqlalchemy.exc import IntegrityError

from utu.db.engine import Database
from utu.db.models import ExperimentLease
from utu.errors import ConfigError

log = logging.getLogger(__name__)

LEASE_SECONDS = 90.0
RENEW_EVERY = LEASE_SECONDS / 3


@contextlib.asynccontextmanager
async def experiment_lease(db: Database, exp_id: str) -> AsyncIterator[None]:
    """Hold the lease on `exp_id` for the body; `ConfigError` if another live run holds it, or takes it over
    while the body runs (the body is cancelled)."""
    holder = uuid.uuid4().hex
    await _acquire(db, exp_id, holder)
    run = asyncio.current_task()
    taken_by: list[str] = []  # the run that took the lease over, once for each time this run was cancelled for it

    def stop(taker: str) -> None:
        taken_by.append(taker)
        if run is not None:
            run.cancel()

    renewer = asyncio.create_task(_renew_forever(db, exp_id, holder, stop))
    try:
        yield
    except asyncio.CancelledError:
        if not taken_by:
            raise
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # the renewer's, or this run's own once it is stopped
            await renewer
        async with db.transaction() as s:
            await s.execute(
                delete(ExperimentLease).where(ExperimentLease.exp_id == exp_id, ExperimentLease.holder == holder)
            )
    if taken_by:
        for _ in taken_by:  # each cancellation `stop` asked for undone (only those): the stop is an error
            if run is not None and run.cancelling():
                run.uncancel()
        raise ConfigError(
            f"exp_id {exp_id!r}: stopped, its lease was taken over by {taken_by[0]} (not renewed for "
            f"{LEASE_SECONDS:.0f} s: a machine asleep, a database out of reach); what this run finished is saved: "
            "run it again once the other is done"
        )


async def _acquire(db: Database, exp_id: str, holder: str) -> None:
    now = datetime.now(UTC)
    host = socket.gethostname()
    try:
        async with db.transaction() as s:
            lease = await s.get(ExperimentLease, exp_id)
            if lease is not None and _alive(lease, now, host):
                raise _held(exp_id, lease)
            if lease is not None:
                await s.delete(lease)
                await s.flush()
            s.add(
                ExperimentLease(
                    exp_id=exp_id,
                    holder=holder,
                    host=host,
                    pid=os.getpid(),
                    since=now,
                    expires_at=now + timedelta(seconds=LEASE_SECONDS),
                )
            )
    except IntegrityError:  # another run inserted its lease between our read and our write
        raise ConfigError(f"exp_id {exp_id!r} was just started by another run: use another --exp_id") from None


async def check_free(db: Database, exp_id: str) -> None:
    """`ConfigError` if a live run holds `exp_id`'s lease, as taking it would be refused; nothing written."""
    async with db.sessions() as s:
        lease = await s.get(ExperimentLease, exp_id)
    if lease is not None and _alive(lease, datetime.now(UTC), socket.gethostname()):
        raise _held(exp_id, lease)


def _held(exp_id: str, lease: ExperimentLease) -> ConfigError:
    since = _aware(lease.since).strftime("%Y-%m-%d %H:%M:%S UTC")
    return ConfigError(
        f"exp_id {exp_id!r} is being run by pid {lease.pid} on {lease.host} since {since}: wait for it "
        "to finish, stop it, or use another --exp_id"
    )


def _alive(lease: ExperimentLease, now: datetime, host: str) -> bool:
    if _aware(lease.expires_at) <= now:
        return False
    if lease.host == host:
        try:
            os.kill(lease.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return True


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were stored in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def _renew_forever(db: Database, exp_id: str, holder: str, lost: Callable[[str], None]) -> None:
    """Renew every `RENEW_EVERY` seconds; once the lease is no longer this run's, call `lost` with who holds it, every
    period until this task is cancelled."""
    while True:
        await asyncio.sleep(RENEW_EVERY)
        try:
            async with db.transaction() as s:
                renewal = update(ExperimentLease).where(
                    ExperimentLease.exp_id == exp_id, ExperimentLease.holder == holder
                )
                later = datetime.now(UTC) + timedelta(seconds=LEASE_SECONDS)
                renewed = cast(CursorResult, await s.execute(renewal.values(expires_at=later))).rowcount == 1
                lease = None if renewed else await s.get(ExperimentLease, exp_id)
        except Exception as e:  # a passing database error: the next renewal may succeed
            log.warning("could not renew the lease on %s: %s", exp_id, e)
            continue
        if not renewed:  # said again each period, in case the body absorbed one cancellation (asyncio.wait_for can)
            taker = f"pid {lease.pid} on {lease.host}" if lease is not None else "another run, since finished"
            while True:
                lost(taker)
                await asyncio.sleep(RENEW_EVERY)
