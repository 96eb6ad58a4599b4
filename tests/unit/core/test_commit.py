"""The commit condition every dual-write commit decides before its compare-and-set on main."""

from __future__ import annotations

import re

from airflow_logstore.core.commit import Verdict, decide, staging_branch, stale_staging_branches
from airflow_logstore.core.summary import CommitInfo


def commit(writer: str, batch: int, epoch: int) -> CommitInfo:
    return CommitInfo(writer_id=writer, batch_id=batch, epoch=epoch)


def test_a_new_batch_of_the_newest_epoch_proceeds() -> None:
    decision = decide([commit("w", 1, 5), commit("other", 2, 9)], 5, "w", 2, 5)
    assert decision.verdict is Verdict.PROCEED
    assert decision.proceed and decision.existing is None


def test_a_batch_in_the_base_is_not_committed_again() -> None:
    earlier = commit("w", 2, 3)
    decision = decide([commit("w", 1, 3), earlier], 5, "w", 2, 5)
    assert decision.verdict is Verdict.ALREADY_COMMITTED
    assert decision.existing == earlier
    assert "committed by epoch 3" in decision.reason


def test_an_attempt_whose_own_commit_is_in_the_base_sees_it_as_already_committed() -> None:
    mine = commit("w", 2, 5)
    decision = decide([mine], 5, "w", 2, 5)
    assert decision.verdict is Verdict.ALREADY_COMMITTED and decision.existing == mine


def test_a_commit_by_a_newer_epoch_fences_the_older_attempt() -> None:
    decision = decide([commit("w", 1, 7)], 5, "w", 2, 5)
    assert decision.verdict is Verdict.FENCED
    assert "epoch 7" in decision.reason and "committed" in decision.reason


def test_a_newer_claim_fences_even_before_it_commits() -> None:
    decision = decide([commit("w", 1, 5)], 9, "w", 2, 5)
    assert decision.verdict is Verdict.FENCED
    assert "epoch 9" in decision.reason and "claimed" in decision.reason


def test_fencing_wins_over_an_existing_commit_of_the_batch() -> None:
    """A zombie must stop (fenced), not report the newer epoch's commit as its own skip."""
    decision = decide([commit("w", 2, 7)], 7, "w", 2, 5)
    assert decision.verdict is Verdict.FENCED
    assert decision.existing == commit("w", 2, 7)


def test_other_writers_never_fence() -> None:
    decision = decide([commit("x", 2, 99)], None, "w", 2, 5)
    assert decision.verdict is Verdict.PROCEED


def test_staging_branch_names_are_unique_per_attempt_and_identifier_safe() -> None:
    names = [staging_branch("job/a-b", 3, 7, attempt) for attempt in (1, 2)]
    assert len(set(names)) == 2
    assert all(re.fullmatch(r"logstore_stage_job_a_b_[0-9a-f]{8}_3_7_[12]", name) for name in names)
    assert staging_branch("a-b", 1, 1, 1) != staging_branch("a_b", 1, 1, 1)


def test_stale_staging_branches_are_an_older_epochs_of_the_same_writer() -> None:
    refs = [
        "main",
        staging_branch("w", 3, 4, 1),
        staging_branch("w", 3, 7, 1),  # this epoch's own
        staging_branch("w", 2, 9, 2),  # a newer epoch's
        staging_branch("w-other", 3, 1, 1),  # another writer's
        "logstore_stage_w_unparsable",
    ]
    assert stale_staging_branches(refs, "w", 7) == [staging_branch("w", 3, 4, 1)]
