"""Find the Iceberg snapshot that committed a LogStore batch (pyiceberg only: no JVM, no Spark)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits

if TYPE_CHECKING:
    from pyiceberg.table import Table


def find_commit(
    handle: LogStoreTable,
    *,
    writer_id: str | None = None,
    batch_id: int | None = None,
    after_snapshot_id: int | None = None,
    table: Table | None = None,
) -> CommitInfo | None:
    """The dual-write commit matching the condition, or None (compaction snapshots never match).

    :param batch_id: match this batch (of ``writer_id`` when given).
    :param after_snapshot_id: else, match the first LogStore commit newer than this snapshot
        (any LogStore commit when None and no batch is given).
    :param table: the table as already loaded (else it is loaded from the catalog)
    """
    table = table if table is not None else handle.load()
    floor = sequence_number(table, after_snapshot_id) if batch_id is None else -1
    return first_commit(snapshot_commits(table), writer_id=writer_id, batch_id=batch_id, after_sequence=floor)


def sequence_number(table: Table, snapshot_id: int | None) -> int:
    """The sequence number of a snapshot of ``table`` (-1 when None, expired or unknown)."""
    if snapshot_id is None:
        return -1
    snapshot = table.snapshot_by_id(snapshot_id)
    return snapshot.sequence_number if snapshot is not None and snapshot.sequence_number is not None else -1


def first_commit(
    commits: Sequence[CommitInfo],
    *,
    writer_id: str | None = None,
    batch_id: int | None = None,
    after_sequence: int = -1,
) -> CommitInfo | None:
    """The first of ``commits`` (oldest first) of ``batch_id``, else the first newer than
    ``after_sequence``; of ``writer_id`` when given."""
    for commit in commits:
        if writer_id is not None and commit.writer_id != writer_id:
            continue
        if batch_id is not None:
            if commit.batch_id == batch_id:
                return commit
        elif (commit.sequence_number or 0) > after_sequence:
            return commit
    return None


def commit_xcom(commit: CommitInfo, table_name: str) -> dict[str, Any]:
    """What a sensor pushes to XCom for a commit."""
    return {
        "table": table_name,
        "snapshot_id": commit.snapshot_id,
        "writer_id": commit.writer_id,
        "batch_id": commit.batch_id,
        "epoch": commit.epoch,
        "offsets": {str(p): list(span) for p, span in sorted(commit.offsets.items())},
        "log_records": commit.record_count,
        "committed_at_ms": commit.timestamp_ms,
    }
