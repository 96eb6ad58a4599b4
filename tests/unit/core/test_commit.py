"""The commit condition every dual-write commit decides before its compare-and-set on main."""

from __future__ import annotations

import re

from airflow_logstore.core.commit import Verdict, attempt_refs, decide, stale_attempt_refs
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


def test_attempt_ref_names_are_unique_per_attempt_and_identifier_safe() -> None:
    refs = [attempt_refs("job/a-b", 3, 7, attempt) for attempt in (1, 2)]
    names = [r.branch for r in refs] + [r.fence_tag for r in refs]
    assert len(set(names)) == 4
    assert all(re.fullmatch(r"logstore_(stage|fence)_job_a_b_[0-9a-f]{8}_3_7_[12]", name) for name in names)
    assert attempt_refs("a-b", 1, 1, 1) != attempt_refs("a_b", 1, 1, 1)


def test_stale_attempt_refs_are_the_branches_and_tags_of_older_epochs_of_the_same_writer() -> None:
    old, own, newer = attempt_refs("w", 3, 4, 1), attempt_refs("w", 3, 7, 1), attempt_refs("w", 2, 9, 2)
    other = attempt_refs("w-other", 3, 1, 1)
    refs = ["main", *(name for r in (old, own, newer, other) for name in (r.branch, r.fence_tag))]
    refs += ["logstore_stage_w_unparsable", "logstore_fence_w_unparsable"]
    assert stale_attempt_refs(refs, "w", 7) == sorted([old.branch, old.fence_tag])
    assert stale_attempt_refs(refs, "w", 10) == sorted(
        name for r in (old, own, newer) for name in (r.branch, r.fence_tag)
    )
