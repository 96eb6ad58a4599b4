"""LogStore tables: the control state as the live snapshots extend it."""

from __future__ import annotations

import pytest

from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.table import tables

IN_LEDGER = CommitInfo("w", 1, epoch=3, snapshot_id=10)
ONLY_IN_TABLE = CommitInfo("w", 2, epoch=3, snapshot_id=11)


def test_merged_state_returns_a_new_state_and_leaves_its_input_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tables, "snapshot_commits", lambda table: [IN_LEDGER, ONLY_IN_TABLE])
    state = ControlState(commits={IN_LEDGER.key: IN_LEDGER}, watermark={0: 4})

    merged = tables.merged_state(object(), state)  # type: ignore[arg-type]

    assert state.commits == {IN_LEDGER.key: IN_LEDGER}
    assert merged.commits == {IN_LEDGER.key: IN_LEDGER, ONLY_IN_TABLE.key: ONLY_IN_TABLE}
    assert merged.watermark == {0: 4}


def test_first_commit_by_batch_or_after_a_sequence_number_of_one_writer() -> None:
    from airflow_logstore.table.snapshots import first_commit

    a1 = CommitInfo("a", 1, epoch=1, sequence_number=1)
    b1 = CommitInfo("b", 1, epoch=1, sequence_number=2)
    a2 = CommitInfo("a", 2, epoch=1, sequence_number=3)
    commits = [a1, b1, a2]
    assert first_commit(commits, batch_id=1) is a1
    assert first_commit(commits, writer_id="b", batch_id=1) is b1
    assert first_commit(commits, writer_id="b", batch_id=2) is None
    assert first_commit(commits) is a1
    assert first_commit(commits, after_sequence=1) is b1
    assert first_commit(commits, writer_id="a", after_sequence=1) is a2
    assert first_commit(commits, after_sequence=3) is None
