"""Step 5 of the dual write: commit the batch to the table by compare-and-set on ``main``.

Loop (at most :data:`COMMIT_ATTEMPTS` times): load ``main`` (the base), open the attempt (its staging
branch and fence tag at the base), decide against the base's commits and the control topic, write the
batch to the branch, check the branch head, and move ``main`` to it only if ``main`` is still the base
and the attempt was not fenced (:mod:`airflow_logstore.table.staged_commit`). When ``main`` moved
meanwhile, decide again from a new base.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from airflow_logstore.core.commit import CommitDecision, Verdict, attempt_refs, decide_on
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import with_positions
from airflow_logstore.exceptions import CommitConflictError, FencedError
from airflow_logstore.pause import pause_point
from airflow_logstore.table import staged_commit
from airflow_logstore.table.commit_retry import backoff_seconds, is_commit_conflict, is_unknown_commit_state
from airflow_logstore.table.tables import merged_state
from airflow_logstore.write.inputs import OP_COLUMN
from airflow_logstore.write.planning import KeyFilter, KeysAbsent, table_rows

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame

    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 6
SUMMARY_CONF_PREFIX = "spark.sql.iceberg.snapshot-property."


@dataclass(frozen=True)
class CommitTarget:
    """Who commits where: the table, the writer attempt, the key (MERGE; none: append).

    :param read_control: reads the control topic's state (an empty state for a table without a log).
    """

    handle: LogStoreTable
    writer_id: str
    epoch: int
    primary_key: tuple[str, ...]
    read_control: Callable[[], ControlState]


@dataclass(frozen=True)
class BatchRows:
    """What a commit attempt writes.

    :param final: the last change of each key (the MERGE's source; every row of a table without a key).
    :param keys: where the batch's keys can be in the table: the MERGE reads only those rows.
    :param absent: the plan found none of the batch's keys in the table: an attempt whose base that
        still holds for appends the rows instead of merging them (the same result, without reading the
        table).
    :param staged: a branch whose head added the appended rows' data files already (a write-through):
        an attempt that appends commits those files instead of writing the rows again.
    """

    final: DataFrame
    keys: KeyFilter | None = None
    absent: KeysAbsent | None = None
    staged: str | None = None


def commit_batch(target: CommitTarget, rows: BatchRows, commit: CommitInfo) -> CommitInfo:
    """Commit the batch by compare-and-set on ``main``; return the commit of this batch that is in the
    table afterwards (an older attempt's, if that one won).

    :raises FencedError: a newer epoch of the writer was claimed or has committed.
    :raises CommitConflictError: ``main`` moved during every attempt.
    """
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        base = staged_commit.load_base(target.handle)
        refs = attempt_refs(target.writer_id, commit.batch_id, target.epoch, attempt)
        opened = staged_commit.open_attempt(base, refs)  # before deciding: a fence now stops this attempt
        landed = run_attempt(target, rows, opened, commit)
        if landed is not None:
            return landed
        wait_before_deciding_again(commit.batch_id, attempt)
    raise CommitConflictError(
        f"Iceberg commit of batch {commit.batch_id} (writer {target.writer_id}): main moved during "
        f"{COMMIT_ATTEMPTS} commit attempts in a row, giving up"
    )


def settled_by(decision: CommitDecision, writer_id: str, epoch: int, batch_id: int) -> CommitInfo | None:
    """The commit already in the table when the decision says so; None when this attempt may commit.

    :raises FencedError: the decision fences this attempt.
    """
    mine = decision.existing is not None and decision.existing.epoch == epoch
    if decision.existing is not None and (decision.verdict is Verdict.ALREADY_COMMITTED or mine):
        # (a newer epoch may have been claimed since this epoch's own publish, whose state the catalog
        # could not tell: the batch is in the table all the same)
        log.info("batch %s: %s; nothing committed", batch_id, decision.reason)
        return decision.existing
    if decision.verdict is Verdict.FENCED:
        raise FencedError(
            f"writer '{writer_id}' epoch {epoch} was fenced ({decision.reason}); this "
            "attempt stops before committing (its records are left for reconciliation)"
        )
    return None


def wait_before_deciding_again(batch_id: int, attempt: int) -> None:
    """Back off after a lost compare-and-set (not for correctness: to let the other commit finish)."""
    sleep_s = backoff_seconds(attempt)
    log.warning(
        "batch %s: main moved during commit attempt %s/%s; deciding again in %.1f s",
        batch_id,
        attempt,
        COMMIT_ATTEMPTS,
        sleep_s,
    )
    time.sleep(sleep_s)


def run_attempt(
    target: CommitTarget, rows: BatchRows, attempt: staged_commit.Attempt, commit: CommitInfo
) -> CommitInfo | None:
    """Decide, then write and publish: the batch's commit in the table, None when ``main`` moved.

    The attempt's refs are removed on every way out but a publish (which removes them itself).

    :raises FencedError: the decision fences this attempt, or a newer epoch's fence removed its refs.
    """
    try:
        state = merged_state(attempt.base.table, target.read_control())
        decision = decide_on(state, target.writer_id, commit.batch_id, target.epoch)
        pause_point("commit:decided")
        existing = settled_by(decision, target.writer_id, target.epoch, commit.batch_id)
        if existing is None:
            return write_and_publish(target, rows, attempt, with_positions(commit, state))
    except Exception as exc:
        fenced = not staged_commit.drop_attempt(target.handle, attempt.refs)
        if is_unknown_commit_state(exc):  # the publish, or Spark's write to the attempt's own branch
            log.warning(
                "batch %s: the catalog could not say whether a commit applied (%s); deciding again "
                "from the table",
                commit.batch_id,
                type(exc).__name__,
            )
            return None
        if staged_commit.is_lost_race(exc) or is_commit_conflict(exc):
            return None  # decide again: a fence shows there as the newer epoch's claim
        if fenced and not isinstance(exc, FencedError):  # e.g. Spark: the branch it wrote was removed
            raise FencedError(
                f"writer '{target.writer_id}' epoch {target.epoch} was fenced by a newer epoch while "
                f"committing batch {commit.batch_id} ({type(exc).__name__}: {exc})"
            ) from exc
        raise
    staged_commit.drop_attempt(target.handle, attempt.refs)
    return existing


def write_and_publish(
    target: CommitTarget, rows: BatchRows, attempt: staged_commit.Attempt, commit: CommitInfo
) -> CommitInfo:
    """Write the batch to the attempt's branch and publish it
    (:func:`airflow_logstore.table.staged_commit.publish`).

    The batch is appended when the plan found none of its keys in this base (``rows.absent``), else
    merged; an append of a write-through commits the files it wrote (``rows.staged``).
    """
    branch = attempt.refs.branch
    base = attempt.base
    append = not target.primary_key or (
        rows.absent is not None and rows.absent.hold_for(base.snapshot_id, table_rows(base.table))
    )
    if append and target.primary_key:
        log.info("batch %s: none of its keys is in base %s: appended", commit.batch_id, base.snapshot_id)
    if append and rows.staged is not None:  # a catalog commit: the table as it left it, no load
        table, head = staged_commit.append_staged(target.handle, rows.staged, branch, commit.to_summary())
    else:
        table_name = branch_table(target.handle.spark_name(), branch)
        write_branch(rows.final, table_name, target.primary_key, commit, rows.keys, append)
        table, head = staged_commit.branch_head(target.handle, attempt.refs)  # Spark committed it
    snapshot = table.snapshot_by_id(head)
    check_staged_head(
        snapshot, attempt.base.snapshot_id, branch, (target.writer_id, commit.batch_id, target.epoch)
    )
    pause_point("commit:before-publish")
    staged_commit.publish(attempt, head, table, rows.staged)
    assert snapshot is not None  # checked above
    return replace(
        commit,
        snapshot_id=head,
        sequence_number=snapshot.sequence_number,
        timestamp_ms=snapshot.timestamp_ms,
    )


def check_staged_head(
    snapshot: Snapshot | None, base_snapshot_id: int, branch: str, identity: tuple[str, int, int]
) -> None:
    """Check that the branch head is this write, on top of the base, with this batch's summary.

    :param identity: (writer, batch, epoch) the head's summary must name.
    :raises CommitConflictError: it is not (the attempt is dropped and decided again).
    """
    if snapshot is None or snapshot.parent_snapshot_id != base_snapshot_id:
        raise CommitConflictError(f"staging branch {branch} does not continue base {base_snapshot_id}")
    written = CommitInfo.from_summary(snapshot.summary.additional_properties if snapshot.summary else {})
    if written is None or (written.writer_id, written.batch_id, written.epoch) != identity:
        raise CommitConflictError(f"staging branch {branch} holds another write's summary: {written}")


def write_branch(
    final: DataFrame,
    table: str,
    primary_key: Sequence[str],
    commit: CommitInfo,
    keys: KeyFilter | None = None,
    append: bool = False,
) -> None:
    """Write the batch to ``table`` (a branch) with its ``logstore.*`` summary, in a session of its own
    (:func:`write_sql`'s statement).

    Summary properties are session settings in Iceberg's Spark writes: a session used by this one
    write alone keeps a concurrent write of the application (another stream, a thread) from
    committing with them.
    """
    session = final.sparkSession.newSession()
    for key, value in commit.to_summary().items():
        session.conf.set(SUMMARY_CONF_PREFIX + key, value)
    view = f"_logstore_batch_{uuid.uuid4().hex[:12]}"
    final.createOrReplaceGlobalTempView(view)
    try:
        columns = [f.name for f in final.schema.fields if f.name != OP_COLUMN]
        scope = keys.sql("t") if keys else None
        statement = write_sql(table, f"global_temp.{view}", columns, primary_key, scope, append)
        session.sql(statement).collect()
    finally:
        final.sparkSession.catalog.dropGlobalTempView(view)


def branch_table(table_name: str, branch: str) -> str:
    """How Spark SQL names a branch of a table."""
    return f"{table_name}.`branch_{branch}`"


def write_sql(
    target: str,
    view: str,
    columns: Sequence[str],
    primary_key: Sequence[str],
    scope: str | None = None,
    append: bool = False,
) -> str:
    """``INSERT`` (no key) or ``MERGE`` of ``view`` into ``target``: per key, the last change wins.

    :param scope: a condition on the target (``t``) that every row of the batch's keys meets: it goes
        into the MERGE's condition, where Iceberg and Spark push it into the target's scan.
    :param append: the target holds none of the batch's keys: ``INSERT`` the rows but deletes (of
        nothing), which is what the ``MERGE`` would do.
    """
    quoted = [f"`{c}`" for c in columns]
    if not primary_key:
        return f"INSERT INTO {target} SELECT {', '.join(quoted)} FROM {view}"
    if append:
        return f"INSERT INTO {target} SELECT {', '.join(quoted)} FROM {view} WHERE {OP_COLUMN} <> 'D'"
    on = " AND ".join([*(f"t.`{c}` = s.`{c}`" for c in primary_key), *([scope] if scope else [])])
    updates = ", ".join(f"t.{c} = s.{c}" for c in quoted)
    values = ", ".join(f"s.{c}" for c in quoted)
    return (
        f"MERGE INTO {target} t USING {view} s ON {on} "
        f"WHEN MATCHED AND s.{OP_COLUMN} = 'D' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND s.{OP_COLUMN} <> 'D' THEN INSERT ({', '.join(quoted)}) VALUES ({values})"
    )
