"""The commit ledger next to the live snapshots: what publishing records, what a decision folds in."""

from __future__ import annotations

from airflow_logstore.core.checkpoint import RetiredBatches
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.ledger import ledger_name, missing_commits, with_commits
from airflow_logstore.core.summary import CommitInfo

RECORDED = CommitInfo("w", 1, epoch=5, snapshot_id=10, offsets={0: (0, 3)})
LIVE_1 = CommitInfo("w", 1, epoch=6, snapshot_id=11, offsets={0: (4, 7)})  # another epoch: the ledger wins
LIVE_2 = CommitInfo("w", 2, epoch=6, snapshot_id=12, offsets={0: (8, 9)})
LIVE_3 = CommitInfo("v", 3, epoch=2, snapshot_id=13)


def state_with(*commits: CommitInfo) -> ControlState:
    return ControlState(commits={c.key: c for c in commits}, watermark={0: 3}, epochs={"w": 6})


def test_missing_commits_are_the_live_ones_the_ledger_lacks_in_order() -> None:
    assert missing_commits(state_with(RECORDED), [LIVE_1, LIVE_2, LIVE_3]) == [LIVE_2, LIVE_3]


def test_missing_commits_keep_the_first_of_a_batch() -> None:
    again = CommitInfo("w", 2, epoch=9, snapshot_id=20)
    assert missing_commits(state_with(), [LIVE_2, again]) == [LIVE_2]


def test_a_retired_batch_is_not_missing() -> None:
    state = state_with()
    state.retired["w"] = RetiredBatches().add(1, 6).add(2, 6)
    assert missing_commits(state, [LIVE_1, LIVE_2, LIVE_3]) == [LIVE_3]


def test_with_commits_returns_a_new_state_and_leaves_its_input_unchanged() -> None:
    state = state_with(RECORDED)
    before = dict(state.commits)
    merged = with_commits(state, [LIVE_1, LIVE_2])
    assert merged is not state
    assert state.commits == before  # the input is untouched
    assert merged.commits == {RECORDED.key: RECORDED, LIVE_2.key: LIVE_2}  # the ledger's entry wins
    assert merged.watermark == state.watermark and merged.epochs == state.epochs


def test_ledger_name() -> None:
    assert ledger_name(LIVE_2) == "w/2/6"
