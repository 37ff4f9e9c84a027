"""Whether a run did its job. A run with failed attempts beyond the allowed share, or with nothing judged,
is a failure: the scripts exit non-zero with one line, and rerunning the same command retries what failed."""

from collections.abc import Sequence
from typing import Any

from utu.errors import RunFailed


def empty_reply(row: Any) -> bool:
    """An `evaluation_data` row whose agent's final reply is empty (or only whitespace)."""
    return not (row.response or "").strip()


RERUN = "fix the cause and run the same command again (failed attempts are retried)"
ROLL_OUT_AGAIN = "fix the cause and roll them out again with --step rollout (or no --step), then judge"


def check_attempts(
    rows: Sequence[Any], max_failed_share: float, where: str, judged_expected: bool = True, remedy: str = RERUN
) -> None:
    """Raise `RunFailed` if more than `max_failed_share` of `rows` failed, or (when judging was asked for)
    none was judged; `remedy` says what to do about it. `rows` are `evaluation_data` rows (stage, error)."""
    failed = [r for r in rows if r.stage == "failed"]
    if rows and len(failed) / len(rows) > max_failed_share:
        allowed = f" (allowed: {max_failed_share:.0%})" if max_failed_share else ""
        raise RunFailed(
            f"{where}: {len(failed)} of {len(rows)} attempts failed{allowed}; first error: {failed[0].error}; {remedy}"
        )
    judged = [r for r in rows if r.stage == "judged"]
    if judged_expected and rows and not judged:
        raise RunFailed(f"{where}: no result: none of {len(rows)} attempts was judged; {remedy}")
    verifier_failed = [r for r in judged if (r.error or "").startswith("verify:")]
    if judged and len(verifier_failed) == len(judged):
        raise RunFailed(
            f"{where}: no result: the verifier failed on all {len(judged)} attempts; first error: "
            f"{verifier_failed[0].error}; fix the verify function and run the same command again (the attempts"
            " are judged again, not rolled out)"
        )
    if judged and all(empty_reply(r) for r in judged):
        raise RunFailed(
            f"{where}: no result: the model's final reply was empty in all {len(judged)} attempts (a reasoning"
            " model whose reply stayed in its reasoning, or a token limit used up before the reply?): fix the"
            " model's settings and run again with --fresh"
        )
