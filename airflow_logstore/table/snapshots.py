"""Find the Iceberg snapshot that committed a LogStore batch (pyiceberg only: no JVM, no Spark)."""

from __future__ import annotations

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
    commits = snapshot_commits(table)
    if batch_id is not None:
        for commit in commits:
            if commit.batch_id == batch_id and (writer_id is None or commit.writer_id == writer_id):
                return commit
        return None
    floor = -1
    if after_snapshot_id is not None:
        snapshot = table.snapshot_by_id(after_snapshot_id)
        floor = (
            snapshot.sequence_number if snapshot is not None and snapshot.sequence_number is not None else -1
        )
    for commit in commits:
        if (commit.sequence_number or 0) > floor and (writer_id is None or commit.writer_id == writer_id):
            return commit
    return None


def commit_xcom(commit: CommitInfo, table: str) -> dict[str, Any]:
    """What a sensor pushes to XCom for a commit."""
    return {
        "table": table,
        "snapshot_id": commit.snapshot_id,
        "writer_id": commit.writer_id,
        "batch_id": commit.batch_id,
        "epoch": commit.epoch,
        "offsets": {str(p): list(span) for p, span in sorted(commit.offsets.items())},
        "log_records": commit.record_count,
        "committed_at_ms": commit.timestamp_ms,
    }
