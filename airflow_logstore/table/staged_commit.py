"""A batch commit as a compare-and-set on ``main`` (Iceberg's write-audit-publish with branches).

One attempt (see :mod:`airflow_logstore.core.commit` for the invariants it keeps):

1. load the table: its ``main`` snapshot is the *base* (an empty table first gets an empty base);
2. open the attempt: one catalog commit creates its staging branch and its fence tag at the base;
3. decide against the base's commits and the control topic (:func:`~airflow_logstore.core.commit.decide`);
4. write the batch to the branch (Spark, with the batch's own summary);
5. move ``main`` from the base to the branch head and drop both refs, in one catalog commit that
   requires ``main`` to still be the base, the branch to be the head and the fence tag to exist
   (``assert-ref-snapshot-id``); the catalog refuses it when anything else committed in between or a
   newer epoch fenced the table, and the attempt starts over from a new base.

Right after its claim, a new epoch fences the table (:func:`fence`): it removes the older epochs' refs, so
an older attempt's publish fails from then on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_logstore.core.commit import AttemptRefs, stale_attempt_refs
from airflow_logstore.core.summary import OP_BASE, S_OPERATION
from airflow_logstore.exceptions import FencedError
from airflow_logstore.table.transactions import manage_snapshots, transaction

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

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

    Two writers may race here. With pyiceberg 0.10 and 0.11 the loser's commit is refused (``main`` must
    still not exist) and its caller simply loads the winner's base; pyiceberg 0.12 retries it on top of
    the winner's, which leaves a second empty snapshot on ``main`` (no files: the table's rows are the
    same, and the winner's attempt finds ``main`` moved and decides again).
    """
    from pyiceberg.exceptions import CommitFailedException

    try:
        with (
            transaction(table) as tx,
            tx.update_snapshot(snapshot_properties={S_OPERATION: OP_BASE}).fast_append(),
        ):
            pass
    except CommitFailedException:
        log.info("another writer created the base snapshot of %s first", table.name())


@dataclass(frozen=True)
class Attempt:
    """One commit attempt: its base and its refs (created at the base)."""

    base: Base
    refs: AttemptRefs


def open_attempt(base: Base, refs: AttemptRefs) -> Attempt:
    """Create the attempt's staging branch and fence tag at the base, in one catalog commit."""
    with manage_snapshots(base.table) as manage:
        manage.create_branch(snapshot_id=base.snapshot_id, branch_name=refs.branch)
        manage.create_tag(snapshot_id=base.snapshot_id, tag_name=refs.fence_tag)
    return Attempt(base, refs)


def open_staging(handle: LogStoreTable, ref: str) -> Base:
    """Create the branch ``ref`` at ``main`` (an empty table first gets an empty base) for a write whose
    files a commit attempt takes later (:func:`append_staged`); a leftover ``ref`` of the same name (an
    earlier try of this writer attempt) is replaced."""
    base = load_base(handle)
    if ref in base.table.metadata.refs:
        remove_refs(base.table, [ref])
        base = load_base(handle)
    with manage_snapshots(base.table) as manage:
        manage.create_branch(snapshot_id=base.snapshot_id, branch_name=ref)
    return base


def append_staged(
    handle: LogStoreTable, staging: str, branch: str, summary: dict[str, str]
) -> tuple[Table, int]:
    """Append to ``branch`` the data files that the head of ``staging`` added, with ``summary``: the
    attempt's write of a batch whose files were written before its commit (a catalog commit, no data
    written or read). Returns the table as this commit left it (pyiceberg updates a table in place on
    commit) and the branch's new head.

    The table is loaded first: a new snapshot's sequence number must follow the table's last, which
    other writers' commits to ``main`` move.

    :raises pyiceberg.exceptions.CommitFailedException: ``staging`` or ``branch`` is gone, or ``branch``
        moved before the append landed (only a newer epoch's fence removes them: the attempt decides
        again, and is fenced).
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.manifest import ManifestEntryStatus

    table = handle.load()
    for ref in (staging, branch):
        if ref not in table.metadata.refs:
            raise CommitFailedException(f"branch {ref} was removed (a newer epoch fenced the writer)")
    parent = table.metadata.refs[branch].snapshot_id
    staged = table.snapshot_by_id(table.metadata.refs[staging].snapshot_id)
    assert staged is not None
    files = [
        entry.data_file
        for manifest in staged.manifests(table.io)
        if manifest.added_snapshot_id == staged.snapshot_id
        for entry in manifest.fetch_manifest_entry(table.io)
        if entry.status == ManifestEntryStatus.ADDED
    ]
    with (
        transaction(table) as tx,
        # manifests merged as Spark's appends merge them (``commit.manifest-merge.enabled``, a default of
        # every LogStore table): one more manifest per batch otherwise, which every later commit and scan
        # reads until compaction
        tx.update_snapshot(snapshot_properties=summary, branch=branch).merge_append() as append,
    ):
        for file in files:
            append.append_data_file(file)
    head = table.snapshot_by_id(table.metadata.refs[branch].snapshot_id)
    if head is None or head.parent_snapshot_id != parent:
        # pyiceberg (0.12) retries a refused append on the table as it is then, which re-creates a
        # removed branch: the append is not on the branch this attempt opened
        raise CommitFailedException(
            f"branch {branch} was not at {parent} any more when the staged files were appended "
            "(a newer epoch's fence removed it)"
        )
    return table, head.snapshot_id


def drop_staging(handle: LogStoreTable, ref: str, attempts: int = 3) -> None:
    """Remove the branch ``ref`` and the snapshot at its head, in one catalog commit, if it is still
    there (best effort: a newer epoch's fence removes a branch left behind, and expiry its snapshot).
    A publish removes it already (:func:`publish`); this is for a batch that ended without one.

    The head is a write-through's staging snapshot: no other ref or snapshot holds it (commit attempts
    append its data files on their own bases), so the table's snapshots are what they would be without
    it. Its data files stay: the commit that appended them holds them (when none did, orphan-file
    removal takes them).
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update.snapshot import ManageSnapshots

    for _ in range(attempts):
        try:
            table = handle.load()
            if ref not in table.metadata.refs:
                return
            with transaction(table) as tx:
                staged = _staging_head(tx, ref)
                ManageSnapshots(tx).remove_branch(ref).commit()
                _expire_unless_kept(tx, staged)
            return
        except CommitFailedException:  # another commit landed meanwhile: load again
            continue
        except Exception as exc:  # harmless when left: never counted, removed by the next fence and expiry
            log.warning("could not drop %s of %s: %s", ref, handle.name, exc)
            return
    log.warning("could not drop %s of %s: the table changed during %s attempts", ref, handle.name, attempts)


def _staging_head(tx: Transaction, ref: str | None) -> int | None:
    """The snapshot at the head of the staging branch ``ref`` in the transaction (None: no such ref)."""
    found = tx.table_metadata.refs.get(ref) if ref else None
    return found.snapshot_id if found is not None else None


def _expire_unless_kept(tx: Transaction, snapshot_id: int | None) -> None:
    """Expire a removed staging branch's head in the transaction, unless ``main``'s history holds it
    (a write-through that committed no snapshot leaves its branch at the ``main`` it started from) or a
    ref still does. Best effort: pyiceberg refuses an expiry before it stages it, and the transaction
    (a publish) goes on without it; the snapshot is left to snapshot expiry."""
    from pyiceberg.table.snapshots import ancestors_of
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    metadata = tx.table_metadata
    if snapshot_id is None or any(r.snapshot_id == snapshot_id for r in metadata.refs.values()):
        return
    if any(s.snapshot_id == snapshot_id for s in ancestors_of(metadata.current_snapshot(), metadata)):
        return
    expire = ExpireSnapshots(tx)
    # its own set: pyiceberg 0.10.0 shares one among all instances (fixed in 0.11.0), so a later
    # expiry in the same process would also name earlier ones' snapshots, and fail
    expire._snapshot_ids_to_expire = set()
    try:
        expire.by_id(snapshot_id)
    except ValueError as exc:  # e.g. pyiceberg protects it: harmless, never counted
        log.warning("staging snapshot %s kept: %s", snapshot_id, exc)
        return
    expire.commit()


def branch_head(handle: LogStoreTable, refs: AttemptRefs) -> tuple[Table, int]:
    """The table and the staging branch's head.

    :raises FencedError: a newer epoch removed the attempt's refs (its fence).
    """
    table = handle.load()
    check_not_fenced(table, refs, handle.name)
    return table, table.metadata.refs[refs.branch].snapshot_id


def check_not_fenced(table: Table, refs: AttemptRefs, name: object) -> None:
    """:raises FencedError: the attempt's fence tag or branch is gone (a newer epoch fenced it)."""
    missing = [ref for ref in (refs.fence_tag, refs.branch) if ref not in table.metadata.refs]
    if missing:
        raise FencedError(
            f"a newer epoch of the writer fenced {name} while this attempt committed: its ref "
            f"{missing[0]} was removed; this attempt stops before committing (its records are left "
            "for reconciliation)"
        )


def publish(attempt: Attempt, head_snapshot_id: int, table: Table, staging: str | None = None) -> None:
    """Move ``main`` from the base to ``head_snapshot_id`` and drop the attempt's refs, only if
    ``main`` is still the base, the branch still is the head and the fence tag still exists; the same
    commit drops the batch's staging branch (if ``table`` holds it) and expires its head.

    :param table: the table as the attempt last saw it: a load after Spark's write to the branch, or
        the table the attempt's own commit to the branch left (:func:`append_staged`), with no load in
        between. The commit's requirements name the refs it holds, and the catalog checks them against
        the table as it is then: every ref the commit moves or drops is asserted in one staging of the
        transaction (pyiceberg keeps only the first requirement of each type a transaction stages).
    :raises pyiceberg.exceptions.CommitFailedException: ``main`` moved or a fence landed meanwhile
        (the compare-and-set lost).
    :raises FencedError: ``table`` shows a newer epoch's fence already.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update.snapshot import ManageSnapshots

    base, refs = attempt.base, attempt.refs
    check_not_fenced(table, refs, ".".join(table.name()))
    expected = {"main": base.snapshot_id, refs.branch: head_snapshot_id, refs.fence_tag: base.snapshot_id}
    for ref, snapshot_id in expected.items():
        found = table.metadata.refs.get(ref)
        if found is None or found.snapshot_id != snapshot_id:
            raise CommitFailedException(
                f"ref {ref} has changed: expected id {snapshot_id}, "
                f"found {found.snapshot_id if found else None}"
            )
    with transaction(table) as tx:
        staged = _staging_head(tx, staging)
        manage = ManageSnapshots(tx).create_branch(snapshot_id=head_snapshot_id, branch_name="main")
        manage = manage.remove_branch(refs.branch).remove_tag(refs.fence_tag)
        if staging is not None and staged is not None:
            manage = manage.remove_branch(staging)
        manage.commit()  # one staging: each ref's requirement is kept
        _expire_unless_kept(tx, staged)


def fence(handle: LogStoreTable, writer_id: str, epoch: int, attempts: int = 6) -> list[str]:
    """Put a newly claimed epoch in force: remove every older epoch's attempt refs in one commit.

    From then on no older attempt of the writer can publish (its publish requires its fence tag).
    Must succeed before the epoch writes anything; a conflicting commit is retried on a fresh load.

    :returns: the refs removed.
    """
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(1, attempts + 1):
        table = handle.load()
        stale = stale_attempt_refs(table.metadata.refs, writer_id, epoch)
        if not stale:
            return []
        try:
            remove_refs(table, stale)
        except CommitFailedException as exc:
            log.info("fencing %s for epoch %s: attempt %s lost a race (%s)", handle.name, epoch, attempt, exc)
            continue
        log.info("epoch %s of writer %s fenced %s: removed %s", epoch, writer_id, handle.name, stale)
        return stale
    raise CommitFailedException(
        f"epoch {epoch} of writer '{writer_id}' could not fence {handle.name}: the table changed during "
        f"{attempts} attempts in a row"
    )


def drop_attempt(handle: LogStoreTable, refs: AttemptRefs) -> bool:
    """Remove an attempt's refs that were not published (best effort: the next epoch's fence removes
    what is left). True unless the fence tag was gone, i.e. a newer epoch fenced the attempt."""
    try:
        table = handle.load()
        tagged = refs.fence_tag in table.metadata.refs  # before the removal, which updates ``table``
        remove_refs(table, [ref for ref in (refs.branch, refs.fence_tag) if ref in table.metadata.refs])
    except Exception as exc:  # the refs are harmless: never counted, removed by the next fence
        log.warning("could not drop the refs of %s (%s): %s", handle.name, refs, exc)
        return True
    return tagged


def remove_refs(table: Table, names: list[str]) -> None:
    """Remove branches and tags in one catalog commit; each must still be what ``table`` holds."""
    if not names:
        return
    from pyiceberg.table.refs import SnapshotRefType

    with manage_snapshots(table) as manage:
        for name in names:
            if table.metadata.refs[name].snapshot_ref_type == SnapshotRefType.TAG:
                manage.remove_tag(name)
            else:
                manage.remove_branch(name)


def is_lost_race(exc: BaseException) -> bool:
    """True when an attempt must decide again: its publish lost the compare-and-set (another commit
    moved ``main``), or the catalog could not say whether a commit applied (a REST catalog answers HTTP
    500, 502 or 504 with ``CommitStateUnknownException``, including after it applied the publish).

    Deciding again resolves an unknown state from ``main`` itself, by construction: the new base's
    lineage holds the batch exactly when the publish applied (then the decision is "already committed"
    by this epoch, and its ledger entry is written as for any commit), and the next compare-and-set
    requires ``main`` to be that base, so a publish still in flight that lands later makes it fail and
    decide once more. Never reported as a fence: the commit may have removed the attempt's tag itself.
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    return isinstance(exc, CommitFailedException | CommitStateUnknownException)
