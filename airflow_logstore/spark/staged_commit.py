"""A batch commit as a compare-and-set on ``main`` (Iceberg's write-audit-publish with branches).

One attempt (see :mod:`airflow_logstore.core.commit` for the invariants it keeps):

1. load the table: its ``main`` snapshot is the *base* (an empty table first gets an empty snapshot);
2. decide against the base's commits and the control topic (:func:`~airflow_logstore.core.commit.decide`);
3. create a staging branch at the base, write the batch there (Spark, with the batch's own summary);
4. move ``main`` from the base to the branch head and drop the branch, in one catalog commit that
   requires ``main`` to still be the base (``assert-ref-snapshot-id``); the catalog refuses it when
   anything else committed in between, and the attempt starts over from a new base.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_logstore.core.commit import stale_staging_branches
from airflow_logstore.core.summary import OP_BASE, S_OPERATION

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_logstore.table.tables import LogStoreTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Base:
    table: Table  # the table as loaded: its metadata is what the compare-and-set requires
    snapshot_id: int


def load_base(handle: LogStoreTable) -> Base:
    """The table and its ``main`` snapshot; an empty table first gets an empty base snapshot."""
    table = handle.load()
    snapshot = table.current_snapshot()
    if snapshot is None:
        _create_empty_base(table)
        table = handle.load()
        snapshot = table.current_snapshot()
        assert snapshot is not None
    return Base(table, snapshot.snapshot_id)


def _create_empty_base(table: Table) -> None:
    """Commit a snapshot with no files on an empty ``main`` (a branch needs a snapshot to start at).

    Two writers may race here: the loser's commit is refused (``main`` must still not exist) and its
    caller simply loads the winner's base.
    """
    from pyiceberg.exceptions import CommitFailedException

    try:
        with (
            table.transaction() as tx,
            tx.update_snapshot(snapshot_properties={S_OPERATION: OP_BASE}).fast_append(),
        ):
            pass
    except CommitFailedException:
        log.info("another writer created the base snapshot of %s first", table.name())


def create_branch(base: Base, branch: str) -> None:
    with base.table.manage_snapshots() as manage:
        manage.create_branch(snapshot_id=base.snapshot_id, branch_name=branch)


def branch_head(handle: LogStoreTable, branch: str) -> tuple[Table, int]:
    table = handle.load()
    ref = table.metadata.refs.get(branch)
    if ref is None:
        raise RuntimeError(f"staging branch '{branch}' of {handle.name} disappeared before its publish")
    return table, ref.snapshot_id


def publish(base: Base, head_snapshot_id: int, branch: str, handle: LogStoreTable) -> None:
    """Move ``main`` from the base to ``head_snapshot_id`` and drop the branch, only if ``main`` is
    still the base.

    :raises pyiceberg.exceptions.CommitFailedException: ``main`` moved (the compare-and-set lost).
    """
    current = handle.load()  # knows the branch head; the requirement still names the base
    main = current.metadata.refs.get("main")
    if main is None or main.snapshot_id != base.snapshot_id:
        from pyiceberg.exceptions import CommitFailedException

        raise CommitFailedException(
            f"branch main has changed: expected id {base.snapshot_id}, "
            f"found {main.snapshot_id if main else None}"
        )
    with current.manage_snapshots() as manage:
        manage.create_branch(snapshot_id=head_snapshot_id, branch_name="main")
        manage.remove_branch(branch)


def drop_stale_branches(base: Base, writer_id: str, epoch: int, handle: LogStoreTable) -> None:
    """Remove the staging branches older epochs of the writer left (see ``core.commit``)."""
    for branch in stale_staging_branches(base.table.metadata.refs, writer_id, epoch):
        log.info("dropping staging branch %s left by an older attempt", branch)
        drop_branch(handle, branch)


def drop_branch(handle: LogStoreTable, branch: str) -> None:
    """Remove a staging branch that was not published (best effort: expiry removes what is left)."""
    try:
        table = handle.load()
        if branch in table.metadata.refs:
            with table.manage_snapshots() as manage:
                manage.remove_branch(branch)
    except Exception as exc:  # the branch is harmless: never counted, expired with its snapshot
        log.warning("could not drop staging branch %s of %s: %s", branch, handle.name, exc)


def is_lost_race(exc: BaseException) -> bool:
    """True when a publish lost its compare-and-set (another commit moved ``main``)."""
    from pyiceberg.exceptions import CommitFailedException

    return isinstance(exc, CommitFailedException)
