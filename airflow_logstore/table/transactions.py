"""pyiceberg transactions that compute their staged metadata once per staged state.

pyiceberg (0.10 to 0.12) computes ``Transaction.table_metadata`` anew on every read: it applies the
staged updates to the table's metadata and returns a deep copy of all of it, every snapshot included.
Its own snapshot and ref operations read it again and again (a LogStore batch's commits about 40 times),
so each commit cost as much as 40 copies of the table's history: 0.5 ms a copy at 3 snapshots, 6-12 ms
at 250, about 100 ms at 3,600 (a streaming writer's hour at a commit a second). With this and merged
manifests (``staged_commit.append_staged``), a micro-batch of 30 rows at 250 snapshots took 1.13-1.25 s
instead of 2.12-2.52 (``bench/snapshot_growth_bench.py``, BENCHMARKS.md).

:func:`transaction` and :func:`manage_snapshots` are the table's own, with the staged metadata kept
until the table's metadata or the staged updates change. Both are replaced, never changed in place (a
commit gives the table a new metadata object; staging rebinds the transaction's tuple of updates), so
the identity of the two says whether the kept result still holds. What a read returns is unchanged,
except that its ``last_updated_ms`` (stamped when there are staged changes) stays that of the first
read of the same state: the commit stamps its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.update.snapshot import ManageSnapshots


def transaction(table: Table, autocommit: bool = False) -> Transaction:
    """``table.transaction()``, its staged metadata computed once per staged state."""
    return _staged_transaction_class()(table, autocommit=autocommit)


def manage_snapshots(table: Table) -> ManageSnapshots:
    """``table.manage_snapshots()`` (each operation committed on its own, or all at the end of a
    ``with``), over :func:`transaction`."""
    from pyiceberg.table.update.snapshot import ManageSnapshots

    return ManageSnapshots(transaction=transaction(table, autocommit=True))


_CLASS: list[type[Any]] = []


def _staged_transaction_class() -> type[Any]:
    """The subclass, defined on first use (importing pyiceberg costs a module that never commits)."""
    if _CLASS:
        return _CLASS[0]
    from pyiceberg.table import Transaction

    class StagedTransaction(Transaction):
        _kept: tuple[object, object, TableMetadata] | None = None

        @property
        def table_metadata(self) -> TableMetadata:
            base, updates, kept = self._table.metadata, self._updates, self._kept
            if kept is None or kept[0] is not base or kept[1] is not updates:
                kept = self._kept = (base, updates, super().table_metadata)
            return kept[2]

    _CLASS.append(StagedTransaction)
    return StagedTransaction
