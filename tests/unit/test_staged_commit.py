"""Dropping a write-through's staging branch (``spark/staged_commit.drop_staging``) on real pyiceberg tables
(a SQLite catalog in a temporary folder): the branch and its head snapshot go in one commit, and so do
those of the next table and the next batch in the same process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_logstore.core.commit import attempt_refs
from airflow_logstore.spark.staged_commit import (
    drop_attempt,
    drop_staging,
    load_base,
    open_attempt,
    remove_refs,
)

STAGE = "logstore_stage_w_0123abcd_1_1_0"
REFS = attempt_refs("w", 1, 1, 1)  # a commit attempt's branch and fence tag


@dataclass
class _Handle:
    """What ``drop_staging`` uses of a ``LogStoreTable``: its name and a fresh load of its table."""

    catalog: Any
    name: str

    def load(self) -> Any:
        return self.catalog.load_table(self.name)


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


@pytest.mark.parametrize("fenced", [False, True])
def test_dropping_an_attempt_tells_whether_a_fence_had_removed_its_tag(catalog: Any, fenced: bool) -> None:
    """The refs go either way; the answer decides whether an attempt's error is reported as a fence
    (which no retry can fix) or as itself. pyiceberg updates a table in place on commit, so the answer
    must be read before the removal."""
    handle, _ = _staged(catalog, f"drop_{fenced}")
    open_attempt(load_base(handle), REFS)  # type: ignore[arg-type]
    if fenced:
        remove_refs(handle.load(), [REFS.fence_tag])

    assert drop_attempt(handle, REFS) is (not fenced)  # type: ignore[arg-type]
    assert not {REFS.branch, REFS.fence_tag} & set(handle.load().metadata.refs)
