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
