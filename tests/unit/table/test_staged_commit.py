"""A write-through's commit on real pyiceberg tables (a SQLite catalog in a temporary folder), with no
Spark: the staged files appended to the attempt's branch and published (``table/staged_commit``).

- Dropping the staging branch: the branch and its head snapshot go in one commit, and so do those of the
  next table and the next batch in the same process; a head that ``main``'s history holds stays.
- The publish works on the table as the attempt's staged append left it, with no load of its own: the
  catalog must still refuse it when ``main`` moved, a newer epoch's fence removed the attempt's refs, or
  the staging branch is gone, after the attempt last saw the table. The append itself is refused on a
  branch a fence removed, before its load or between its load and its commit.
- Dropping an attempt's refs tells whether a fence had removed its tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException

from airflow_logstore.core.commit import attempt_refs
from airflow_logstore.table.staged_commit import (
    append_staged,
    drop_attempt,
    drop_staging,
    load_base,
    open_attempt,
    publish,
    remove_refs,
)

STAGE = attempt_refs("w", 1, 1, 0).branch  # the write-through's staging branch: attempt 0
REFS = attempt_refs("w", 1, 1, 1)  # the commit attempt's branch and fence tag
SUMMARY = {"logstore.writer": "w", "logstore.batch": "1", "logstore.epoch": "1"}


@dataclass
class _Handle:
    """What ``staged_commit`` uses of a ``LogStoreTable``: its name and a fresh load of its table;
    ``after_load`` runs once, right after the next load (another process's commit in that moment)."""

    catalog: Any
    name: str
    after_load: Any = None

    def load(self) -> Any:
        table = self.catalog.load_table(self.name)
        if self.after_load is not None:
            action, self.after_load = self.after_load, None
            action()
        return table


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("unit", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    return catalog


def _staged(catalog: Any, name: str) -> tuple[_Handle, int]:
    """A table with one row on main and a staging branch one snapshot ahead of it; that snapshot's id."""
    rows = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table(f"ns.{name}", schema=rows.schema)
    table.append(rows)
    table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, STAGE).commit()
    handle = _Handle(catalog, f"ns.{name}")
    handle.load().append(rows, branch=STAGE)
    head = handle.load().metadata.refs[STAGE].snapshot_id
    return handle, head


def _dropped(handle: _Handle, head: int) -> bool:
    table = handle.load()
    return STAGE not in table.metadata.refs and table.metadata.snapshot_by_id(head) is None


def test_staging_branches_of_several_tables_are_dropped_in_one_process(catalog: Any) -> None:
    """Each drop expires its own head only. pyiceberg 0.10.0 kept the snapshots to expire in one set
    shared by every ``ExpireSnapshots`` (fixed in 0.11.0): the second drop of a process also named the
    first's snapshot, which its table does not hold, and failed (the branch stayed)."""
    first, first_head = _staged(catalog, "a")
    second, second_head = _staged(catalog, "b")

    drop_staging(first, STAGE)  # type: ignore[arg-type]
    drop_staging(second, STAGE)  # type: ignore[arg-type]

    assert _dropped(first, first_head)
    assert _dropped(second, second_head)
    assert second.load().current_snapshot() is not None  # main keeps its snapshot


def test_a_staging_head_that_mains_history_holds_is_kept(catalog: Any) -> None:
    """A staging branch with no snapshot of its own (a write that committed nothing) is at ``main``'s
    snapshot: dropping the branch must not expire that snapshot from ``main``'s history."""
    rows = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table("ns.kept", schema=rows.schema)
    table.append(rows)
    at_main = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(at_main, STAGE).commit()
    handle = _Handle(catalog, "ns.kept")
    handle.load().append(rows)  # main moves on: the branch's head is now main's parent

    drop_staging(handle, STAGE)  # type: ignore[arg-type]

    after = handle.load()
    assert STAGE not in after.metadata.refs
    assert after.metadata.snapshot_by_id(at_main) is not None
    assert after.current_snapshot().parent_snapshot_id == at_main


def _attempt(handle: _Handle) -> tuple[Any, Any, int]:
    """A staged batch and a commit attempt opened on it, as ``commit_batch`` opens one: the attempt,
    the table as the staged append left it, and the head of the attempt's branch after that append."""
    attempt = open_attempt(load_base(handle), REFS)  # type: ignore[arg-type]
    table, head = append_staged(handle, STAGE, REFS.branch, SUMMARY)  # type: ignore[arg-type]
    return attempt, table, head


def _other(handle: _Handle) -> Any:
    """The table as another process loads it."""
    return handle.load()


def test_a_staged_batch_is_published_and_its_staging_branch_dropped_in_one_commit(catalog: Any) -> None:
    handle, staged_head = _staged(catalog, "published")
    attempt, table, head = _attempt(handle)
    commits_before = len(handle.load().metadata.metadata_log)

    publish(attempt, head, table, STAGE)

    after = handle.load()
    assert after.current_snapshot().snapshot_id == head
    assert after.current_snapshot().parent_snapshot_id == attempt.base.snapshot_id
    assert after.current_snapshot().summary["logstore.batch"] == "1"
    assert not {STAGE, REFS.branch, REFS.fence_tag} & set(after.metadata.refs)
    assert after.metadata.snapshot_by_id(staged_head) is None  # expired with its branch
    assert len(after.metadata.metadata_log) == commits_before + 1  # one catalog commit
    assert after.scan().to_arrow().num_rows == 2  # main's row and the staged one


@pytest.mark.parametrize("change", ["main moved", "fenced", "staging dropped"])
def test_a_publish_on_the_table_its_attempt_holds_is_refused_after_a_change(
    catalog: Any, change: str
) -> None:
    """The attempt holds the table its staged append left; another process changes it before the publish.
    The publish's requirements (main at the base, the attempt's branch at its head, the fence tag at the
    base, the staging branch at its head) must reach the catalog: all four are staged at once."""
    handle, _ = _staged(catalog, change.replace(" ", "_"))
    attempt, table, head = _attempt(handle)
    other = _other(handle)
    if change == "main moved":
        other.append(pa.table({"id": pa.array([9], pa.int64())}))
    elif change == "fenced":  # a newer epoch's fence removes the older epochs' attempt refs
        remove_refs(other, [STAGE, REFS.branch, REFS.fence_tag])
    else:
        remove_refs(other, [STAGE])
    main_before = handle.load().current_snapshot().snapshot_id

    with pytest.raises(CommitFailedException):
        publish(attempt, head, table, STAGE)

    assert handle.load().current_snapshot().snapshot_id == main_before


@pytest.mark.parametrize("when", ["before its load", "between its load and its commit"])
def test_a_staged_append_on_a_branch_a_fence_removed_is_refused(catalog: Any, when: str) -> None:
    """A newer epoch's fence removes the attempt's refs after the attempt opened them. The staged append
    must fail as a lost race (the attempt then decides again and is fenced), also where pyiceberg
    retries a refused append on the table as it is then, which re-creates the branch."""
    handle, _ = _staged(catalog, "fenced_" + when.replace(" ", "_"))
    attempt = open_attempt(load_base(handle), REFS)  # type: ignore[arg-type]

    def fence() -> None:
        remove_refs(_Handle(catalog, handle.name).load(), [STAGE, REFS.branch, REFS.fence_tag])

    if when == "before its load":
        fence()
    else:
        handle.after_load = fence
    main_before = _Handle(catalog, handle.name).load().current_snapshot().snapshot_id

    with pytest.raises(CommitFailedException):
        append_staged(handle, STAGE, REFS.branch, SUMMARY)  # type: ignore[arg-type]

    assert handle.load().current_snapshot().snapshot_id == main_before
    assert attempt.base.snapshot_id == main_before


@pytest.mark.parametrize("fenced", [False, True])
def test_dropping_an_attempt_tells_whether_a_fence_had_removed_its_tag(catalog: Any, fenced: bool) -> None:
    """The refs go either way; the answer decides whether an attempt's error is reported as a fence
    (which no retry can fix) or as itself."""
    handle, _ = _staged(catalog, f"drop_{fenced}")
    open_attempt(load_base(handle), REFS)  # type: ignore[arg-type]
    if fenced:
        remove_refs(handle.load(), [REFS.fence_tag])

    assert drop_attempt(handle, REFS) is (not fenced)  # type: ignore[arg-type]
    assert not {REFS.branch, REFS.fence_tag} & set(handle.load().metadata.refs)


def test_a_publish_goes_on_when_pyiceberg_refuses_to_expire_the_staging_head(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging head's expiry is best effort: its refusal must not stop the batch's publish."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    def refuse(self: Any, snapshot_id: int) -> Any:
        raise ValueError(f"Snapshot with snapshot id {snapshot_id} is protected (simulated)")

    handle, staged_head = _staged(catalog, "expiry_refused")
    attempt, table, head = _attempt(handle)
    monkeypatch.setattr(ExpireSnapshots, "by_id", refuse)

    publish(attempt, head, table, STAGE)

    after = handle.load()
    assert after.current_snapshot().snapshot_id == head
    assert not {STAGE, REFS.branch, REFS.fence_tag} & set(after.metadata.refs)
    assert after.metadata.snapshot_by_id(staged_head) is not None  # left to snapshot expiry


def test_a_transactions_staged_metadata_is_computed_once_per_staged_state(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg computes ``Transaction.table_metadata`` (a deep copy of the whole metadata) on every
    read; the LogStore's transactions once per staged state, with the same content."""
    import pyiceberg.table

    from airflow_logstore.table.transactions import transaction

    handle, _ = _staged(catalog, "cached")
    computed: list[int] = []
    compute = pyiceberg.table.update_table_metadata

    def counting(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return compute(*args, **kwargs)

    monkeypatch.setattr(pyiceberg.table, "update_table_metadata", counting)
    table = handle.load()
    tx = transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first and len(computed) == 1
    tx.set_properties({"k": "v"})  # a staged update: computed again, with it
    staged = tx.table_metadata
    assert staged is not first and staged.properties["k"] == "v" and len(computed) == 2
    assert tx.table_metadata is staged and len(computed) == 2
    own = table.transaction().set_properties({"k": "v"}).table_metadata  # pyiceberg's own: the same
    assert own.model_dump(exclude={"last_updated_ms"}) == staged.model_dump(exclude={"last_updated_ms"})
    tx.commit_transaction()
    assert handle.load().properties["k"] == "v"
    assert transaction(table).table_metadata.properties["k"] == "v"  # the table's new metadata


def test_the_writers_appends_merge_manifests(catalog: Any) -> None:
    """Each batch's catalog commit appends its staged files; with manifest merging on (a LogStore
    table's default, as Iceberg's Java default) the manifests stay few, as Spark's appends keep them,
    instead of one more per batch until compaction."""
    rows = pa.table({"id": pa.array([1], pa.int64())})
    merging = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "3"}
    table = catalog.create_table("ns.merged", schema=rows.schema, properties=merging)
    table.append(rows)
    handle = _Handle(catalog, "ns.merged")
    for batch in range(8):
        main = handle.load().current_snapshot().snapshot_id
        handle.load().manage_snapshots().create_branch(main, STAGE).commit()
        handle.load().append(rows, branch=STAGE)
        append_staged(handle, STAGE, "main", {**SUMMARY, "logstore.batch": str(batch)})  # type: ignore[arg-type]
        drop_staging(handle, STAGE)  # type: ignore[arg-type]
    table = handle.load()
    assert len(table.scan().to_arrow()) == 9  # every batch's row, once
    assert len(table.current_snapshot().manifests(table.io)) <= 3  # before: 9, one per commit
