"""Retry an Iceberg commit that lost a race with a concurrent commit (e.g. a compaction).

Iceberg retries a commit whose metadata moved on by itself (``commit.retry.num-retries``), re-validating
it each time; what reaches Spark is a commit that *cannot* be re-applied as is: a MERGE whose position
deletes point at data files a compaction has just rewritten fails with
``org.apache.iceberg.exceptions.ValidationException: Cannot commit, missing data files``; a rewrite
that finds new deletes for the files it replaced fails the same way. Both surface in Python as a
``Py4JJavaError`` (or a PySpark ``CapturedException`` such as ``IllegalStateException``) whose Java
cause chain holds the Iceberg exception.

The only safe answer is to run the whole statement again: it plans against the new table state.
Before every new attempt :func:`retry_iceberg_commit` asks ``committed()`` whether an earlier attempt
committed after all, so a batch is never applied twice. ``CommitStateUnknownException`` is never
retried (the commit may have happened); it is raised as it is.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_logstore.exceptions import CommitConflictError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Java exceptions meaning "another commit won; plan again and the commit can succeed".
CONFLICT_CLASSES = (
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CommitFailedException",
)
#: Java exceptions meaning "the commit may have succeeded": never retried blindly.
UNKNOWN_STATE_CLASSES = ("org.apache.iceberg.exceptions.CommitStateUnknownException",)

DEFAULT_ATTEMPTS = 4
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


@dataclass(frozen=True)
class JavaCause:
    class_name: str
    message: str


def java_causes(exc: BaseException) -> list[JavaCause]:
    """The Java exception chain behind a Python exception raised through py4j (empty when none)."""
    found: list[JavaCause] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        java = getattr(current, "java_exception", None) or getattr(current, "_origin", None)
        depth = 0
        while java is not None and depth < 20:
            try:
                found.append(JavaCause(str(java.getClass().getName()), str(java.getMessage())))
                java = java.getCause()
            except Exception:  # a detached gateway object: stop walking
                break
            depth += 1
        current = current.__cause__ or current.__context__
    return found


def _matches(exc: BaseException, classes: tuple[str, ...]) -> JavaCause | None:
    causes = java_causes(exc)
    for cause in causes:
        if cause.class_name in classes:
            return cause
    if not causes:  # no gateway objects (e.g. Spark Connect): the class name is in the message
        text = str(exc)
        for name in classes:
            if name in text:
                return JavaCause(name, text.split(name, 1)[1].lstrip(": ").splitlines()[0] if text else "")
    return None


def is_commit_conflict(exc: BaseException) -> bool:
    """True when ``exc`` is an Iceberg commit that lost a race (retry after re-planning)."""
    return _matches(exc, UNKNOWN_STATE_CLASSES) is None and _matches(exc, CONFLICT_CLASSES) is not None


def is_unknown_commit_state(exc: BaseException) -> bool:
    """True when the catalog could not say whether a commit applied: pyiceberg's
    ``CommitStateUnknownException`` (a REST catalog's HTTP 500, 502 or 504), or Iceberg's Java one
    behind a Spark write. A commit attempt then decides again from the table
    (:func:`airflow_logstore.table.staged_commit.is_lost_race`)."""
    from pyiceberg.exceptions import CommitStateUnknownException

    return isinstance(exc, CommitStateUnknownException) or _matches(exc, UNKNOWN_STATE_CLASSES) is not None


def conflict_message(exc: BaseException) -> str:
    cause = _matches(exc, CONFLICT_CLASSES)
    if cause is None:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{cause.class_name.rsplit('.', 1)[-1]}: {cause.message[:300]}"


def backoff_seconds(attempt: int, base: float = DEFAULT_BACKOFF_S) -> float:
    """Exponential backoff with jitter for attempt 1, 2, ... (never above ``MAX_BACKOFF_S``)."""
    return min(MAX_BACKOFF_S, base * (2 ** (attempt - 1))) * (0.5 + random.random() / 2)


@dataclass
class RetryOutcome:
    attempts: int = 0
    conflicts: list[str] | None = None
    already_committed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "conflicts": list(self.conflicts or []),
            "already_committed": self.already_committed,
        }


def retry_iceberg_commit(
    attempt: Callable[[], T],
    *,
    committed: Callable[[], bool] | None = None,
    what: str = "Iceberg commit",
    attempts: int = DEFAULT_ATTEMPTS,
    backoff: float = DEFAULT_BACKOFF_S,
    outcome: RetryOutcome | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """Run ``attempt`` until it succeeds; on a commit conflict wait, then run it again.

    :param committed: asked before every new attempt; when it says the work is already committed,
        nothing is retried and None is returned.
    :raises CommitConflictError: when every attempt lost its race (the last conflict is the cause).
    """
    outcome = outcome if outcome is not None else RetryOutcome()
    outcome.conflicts = outcome.conflicts or []
    for number in range(1, max(1, attempts) + 1):
        if number > 1 and committed is not None and committed():
            log.info("%s: committed by an earlier attempt, not retried", what)
            outcome.already_committed = True
            return None
        outcome.attempts = number
        try:
            return attempt()
        except Exception as exc:
            if not is_commit_conflict(exc):
                raise
            message = conflict_message(exc)
            outcome.conflicts.append(message)
            if number >= attempts:
                raise CommitConflictError(
                    f"{what}: lost {number} commit races in a row, giving up (last: {message})"
                ) from exc
            wait = backoff_seconds(number, backoff)
            log.warning(
                "%s: commit conflict on attempt %s/%s (%s); retrying in %.1f s",
                what,
                number,
                attempts,
                message,
                wait,
            )
            sleep(wait)
    return None  # pragma: no cover - the loop returns or raises
