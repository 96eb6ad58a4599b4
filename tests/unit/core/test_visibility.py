"""Classifying log records against the control state, and moving the visibility watermark."""

from __future__ import annotations

import pytest

from airflow_logstore.core.codec import RecordMeta, RecordType
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import (
    Decision,
    ReadFilter,
    WatermarkScan,
    classify,
    newly_visible_commits,
    visible_end,
)

W = "job-a"


def state_with(epochs: dict[str, int] | None = None, commits: list[CommitInfo] | None = None) -> ControlState:
    return ControlState(epochs=dict(epochs or {}), commits={c.key: c for c in commits or []})


# Writer job-a: epoch 5 committed batch 1 (partition 0, offsets 10..19, tasks 0.0 and 1.0); epoch 9 is the
# newest claim; nothing committed batch 2 yet.
STATE = state_with(
    epochs={W: 9},
    commits=[CommitInfo(W, 1, 5, offsets={0: (10, 19)}, tasks=frozenset({"0.0", "1.0"}))],
)


def meta(epoch: int, batch: int, task: str = "0.0", **extra: object) -> RecordMeta:
    return RecordMeta(W, epoch, batch, task=task, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "partition", "offset", "state", "expected"),
    [
        # committed: same epoch, covered offset and task
        (meta(5, 1), 0, 10, STATE, Decision.COMMITTED),
        (meta(5, 1, "1.0"), 0, 19, STATE, Decision.COMMITTED),
        # redundant: committed by another epoch (older or newer attempt of the same batch)
        (meta(4, 1), 0, 12, STATE, Decision.REDUNDANT),
        (meta(6, 1), 0, 25, STATE, Decision.REDUNDANT),
        # redundant: same epoch, outside the committed offsets / partition
        (meta(5, 1), 0, 9, STATE, Decision.REDUNDANT),
        (meta(5, 1), 0, 20, STATE, Decision.REDUNDANT),
        (meta(5, 1), 1, 15, STATE, Decision.REDUNDANT),
        # redundant: same epoch and offsets, another task attempt (a retried Spark task)
        (meta(5, 1, "0.1"), 0, 15, STATE, Decision.REDUNDANT),
        # in flight: newest epoch, batch not committed
        (meta(9, 2), 0, 30, STATE, Decision.IN_FLIGHT),
        # dead pending: older epoch, no newer epoch committed past the batch
        (meta(7, 2), 0, 30, STATE, Decision.DEAD_PENDING),
        # foreign: epoch never claimed, or writer unknown
        (meta(10, 2), 0, 30, STATE, Decision.FOREIGN),
        (RecordMeta("stranger", 1, 1), 0, 30, STATE, Decision.FOREIGN),
        # log-only
        (meta(9, 2, log_only=True), 0, 30, STATE, Decision.LOG_ONLY),
        (meta(3, 2, log_only=True), 0, 30, STATE, Decision.LOG_ONLY),
        (RecordMeta("stranger", 1, 1, log_only=True), 0, 30, STATE, Decision.LOG_ONLY),
        (meta(5, 1, log_only=True), 0, 15, STATE, Decision.LOG_ONLY),
        (meta(4, 1, log_only=True), 0, 15, STATE, Decision.REDUNDANT),
        # written by reconciliation
        (
            RecordMeta("logstore-reconciler", 1, 1, record_type=RecordType.REVERSAL, reverses=(0, 3)),
            0,
            40,
            STATE,
            Decision.REVERSAL,
        ),
        (
            RecordMeta("logstore-reconciler", 1, 1, record_type=RecordType.REASSERT),
            0,
            41,
            STATE,
            Decision.REASSERT,
        ),
        # the record type wins over any ledger entry
        (meta(5, 1, record_type=RecordType.REASSERT), 0, 15, STATE, Decision.REASSERT),
    ],
)
def test_classify(
    record: RecordMeta, partition: int, offset: int, state: ControlState, expected: Decision
) -> None:
    assert classify(record, partition, offset, state) is expected


def test_commit_without_task_list_covers_every_task() -> None:
    state = state_with(epochs={W: 2}, commits=[CommitInfo(W, 1, 2, offsets={0: (0, 5)}, tasks=None)])
    assert classify(meta(2, 1, "7.3"), 0, 3, state) is Decision.COMMITTED


@pytest.mark.parametrize(
    ("successor_batch", "expected"),
    [
        (None, Decision.DEAD_PENDING),
        (2, Decision.DEAD_PENDING),
        (3, Decision.REDUNDANT),
        (4, Decision.REDUNDANT),
    ],
)
def test_dead_epoch_is_redundant_once_a_newer_epoch_committed_past_its_batch(
    successor_batch: int | None, expected: Decision
) -> None:
    commits = [CommitInfo(W, 1, 2)]  # an older commit by the dead epoch itself does not count
    if successor_batch is not None:
        commits.append(CommitInfo(W, successor_batch, 8))
    state = state_with(epochs={W: 8}, commits=commits)
    assert classify(meta(2, 3), 0, 0, state) is expected


def test_newer_commits_of_another_writer_do_not_make_a_dead_epoch_redundant() -> None:
    state = state_with(epochs={W: 8, "other": 9}, commits=[CommitInfo("other", 99, 9)])
    assert classify(meta(2, 3), 0, 0, state) is Decision.DEAD_PENDING


def test_older_epoch_commit_past_the_batch_does_not_count() -> None:
    # epoch 3 committed batch 10 before epoch 5 was claimed; a record of epoch 5 (dead, 7 is newest)
    # for batch 4 still waits for a successor newer than 5.
    state = state_with(epochs={W: 7}, commits=[CommitInfo(W, 10, 3)])
    assert classify(meta(5, 4), 0, 0, state) is Decision.DEAD_PENDING


@pytest.mark.parametrize(
    ("decision", "undecided"),
    [(Decision.IN_FLIGHT, True), (Decision.DEAD_PENDING, True)]
    + [(d, False) for d in Decision if d not in (Decision.IN_FLIGHT, Decision.DEAD_PENDING)],
)
def test_undecided(decision: Decision, undecided: bool) -> None:
    assert decision.undecided is undecided


# --- watermark scan --------------------------------------------------------------------------------


def test_scan_blocks_at_first_undecided_record() -> None:
    scan = WatermarkScan({})
    scan.observe(0, 0, Decision.COMMITTED)
    scan.observe(0, 1, Decision.REDUNDANT)
    scan.observe(0, 2, Decision.IN_FLIGHT)
    scan.observe(0, 3, Decision.COMMITTED)
    scan.observe(0, 4, Decision.DEAD_PENDING)
    assert scan.blocked == {0: 2}
    assert scan.finish({0: 5}) == {0: 1}


def test_scan_without_undecided_records_reaches_the_end() -> None:
    scan = WatermarkScan({0: 3})
    for offset in range(4, 10):
        scan.observe(0, offset, Decision.COMMITTED if offset % 2 else Decision.FOREIGN)
    assert scan.finish({0: 10}) == {0: 9}


def test_scan_partitions_are_independent() -> None:
    scan = WatermarkScan({})
    scan.observe(0, 0, Decision.DEAD_PENDING)
    scan.observe(1, 0, Decision.COMMITTED)
    scan.observe(1, 1, Decision.LOG_ONLY)
    scan.observe(2, 5, Decision.REVERSAL)
    assert scan.finish({0: 3, 1: 2, 2: 6}) == {0: -1, 1: 1, 2: 5}


def test_undecodable_record_counts_as_decided() -> None:
    scan = WatermarkScan({})
    scan.observe(0, 0, None)
    scan.observe(0, 1, Decision.COMMITTED)
    assert scan.blocked == {}
    assert scan.decided_up_to == {0: 1}
    assert scan.finish({0: 2}) == {0: 1}


@pytest.mark.parametrize(
    ("previous", "blocked_at", "end", "expected"),
    [
        ({0: 10}, 5, 20, 10),  # blocked below the previous watermark: stays
        ({0: 10}, 11, 20, 10),  # blocked right after it: stays
        ({0: 10}, 15, 20, 14),
        ({0: 10}, None, 8, 10),  # end below previous: stays
        ({}, None, 0, -1),  # empty partition
        ({}, 0, 5, -1),
    ],
)
def test_watermark_never_moves_backwards(
    previous: dict[int, int], blocked_at: int | None, end: int, expected: int
) -> None:
    scan = WatermarkScan(previous)
    if blocked_at is not None:
        scan.observe(0, blocked_at, Decision.IN_FLIGHT)
    assert scan.finish({0: end}) == {0: expected}


def test_scan_keeps_previous_partitions_not_scanned() -> None:
    scan = WatermarkScan({0: 4, 7: 9})
    assert scan.finish({0: 8}) == {0: 7, 7: 9}


def test_scan_does_not_mutate_its_input() -> None:
    previous = {0: 4}
    WatermarkScan(previous).finish({0: 8})
    assert previous == {0: 4}


def test_replayed_scan_from_classify() -> None:
    """A partition's records in order, classified against the control state, give the watermark."""
    state = state_with(
        epochs={W: 9, "b": 3},
        commits=[CommitInfo(W, 1, 5, offsets={0: (0, 1)}), CommitInfo("b", 1, 3, offsets={0: (3, 3)})],
    )
    log = [meta(5, 1), meta(5, 1), meta(4, 1), RecordMeta("b", 3, 1), meta(9, 2), RecordMeta("b", 3, 2)]
    scan = WatermarkScan({})
    for offset, record in enumerate(log):
        scan.observe(0, offset, classify(record, 0, offset, state))
    assert scan.finish({0: len(log)}) == {0: 3}


# --- newly visible commits and consistent readers --------------------------------------------------


def test_newly_visible_commits() -> None:
    state = state_with(
        commits=[
            CommitInfo("a", 1, 1, offsets={0: (0, 4)}),
            CommitInfo("a", 2, 1, offsets={0: (5, 9)}),
            CommitInfo("b", 7, 3, offsets={1: (0, 2)}),
            CommitInfo("c", 1, 1, offsets={}),  # no log records: never "becomes visible"
        ]
    )
    assert newly_visible_commits(state, {}, {0: 4}) == ["a/1/1"]
    assert newly_visible_commits(state, {0: 4}, {0: 9, 1: 2}) == ["a/2/1", "b/7/3"]
    assert newly_visible_commits(state, {0: 9, 1: 2}, {0: 20, 1: 20}) == []
    assert newly_visible_commits(state, {0: 3}, {0: 8}) == ["a/1/1"]


def test_commit_spanning_partitions_is_visible_only_when_every_partition_is() -> None:
    state = state_with(commits=[CommitInfo("a", 1, 1, offsets={0: (0, 4), 1: (0, 9)})])
    assert newly_visible_commits(state, {}, {0: 4, 1: 3}) == []
    assert newly_visible_commits(state, {0: 4, 1: 3}, {0: 4, 1: 9}) == ["a/1/1"]
    # reported once: already visible before
    assert newly_visible_commits(state, {0: 4, 1: 9}, {0: 10, 1: 10}) == []


def test_visible_to_consistent_reader() -> None:
    """A consistent read stops just past the watermark (:func:`visible_end`) and keeps committed records
    only (:class:`ReadFilter`), as the Python reader and the Spark read job both do."""
    watermark = {0: 15}
    consistent = ReadFilter(STATE, consistent=True)

    def visible(record: RecordMeta, partition: int, offset: int, marks: dict[int, int]) -> bool:
        end = visible_end({0: 100, 1: 100}, marks)
        return offset < end[partition] and consistent.rule(record, partition, offset)[0]

    assert visible(meta(5, 1), 0, 15, watermark) is True
    assert visible(meta(5, 1), 0, 16, watermark) is False  # past the watermark
    assert visible(meta(5, 1), 0, 10, {}) is False  # no watermark yet
    assert visible(meta(4, 1), 0, 12, watermark) is False  # redundant
    assert visible(meta(9, 2), 0, 12, watermark) is False  # in flight
    assert visible(meta(5, 1, log_only=True), 0, 12, watermark) is False
    assert visible(meta(5, 1), 1, 12, {0: 100, 1: 100}) is False


def test_visible_end_stops_past_the_watermark_or_at_the_end() -> None:
    assert visible_end({0: 20, 1: 20, 2: 20}, {0: 15, 1: 30}) == {0: 16, 1: 20, 2: 0}
    assert visible_end({}, {0: 5}) == {}


def test_watermark_stops_before_an_unclosed_reassert_pair() -> None:
    scan = WatermarkScan({})
    scan.observe(0, 0, Decision.COMMITTED)
    scan.observe(0, 1, Decision.REASSERT, pair_half=1)  # the closing half is not in the log yet
    scan.observe(0, 2, Decision.COMMITTED)
    assert scan.finish({0: 3}) == {0: 0}


def test_watermark_passes_a_closed_reassert_pair() -> None:
    scan = WatermarkScan({})
    scan.observe(0, 0, Decision.REASSERT, pair_half=1)
    scan.observe(0, 1, Decision.COMMITTED)  # a writer's record between the halves
    scan.observe(0, 2, Decision.REASSERT, pair_half=2)
    scan.observe(0, 3, Decision.REASSERT, pair_half=1)
    scan.observe(0, 4, Decision.REASSERT, pair_half=2)
    assert scan.finish({0: 5}) == {0: 4}


def test_undecided_record_and_open_pair_the_earlier_wins() -> None:
    scan = WatermarkScan({0: -1})
    scan.observe(0, 0, Decision.REASSERT, pair_half=1)
    scan.observe(0, 1, Decision.IN_FLIGHT)
    scan.observe(0, 2, Decision.REASSERT, pair_half=2)  # not observed: the partition is blocked
    assert scan.finish({0: 3}) == {0: -1}


# --- copies of reconciler records (issue 33, holes 1 and 2) --------------------------------------------


def _reversal(lease: int, run: int, original: int) -> RecordMeta:
    reversal = RecordType.REVERSAL
    return RecordMeta("logstore-reconciler", lease, run, record_type=reversal, reverses=(0, original))


def _half(lease: int, half: int, pair: tuple[int, int, int] | None = (0, 3, 1)) -> RecordMeta:
    return RecordMeta(
        "logstore-reconciler", lease, 1, record_type=RecordType.REASSERT, pair_half=half, reasserts=pair
    )


def test_a_read_keeps_the_first_copy_of_each_reconciler_record_whatever_lease_wrote_it() -> None:
    from airflow_logstore.core.visibility import Decision, ReadFilter

    read = ReadFilter(None, consistent=False)
    metas = [_reversal(1, 2, 5), _reversal(1, 2, 5), _reversal(3, 2, 5), _reversal(3, 2, 6), _half(3, 1)]
    metas += [_half(1, 1), _half(1, 2), _half(3, 2), _half(1, 1, None), _half(1, 1, None)]
    answers = [read.decide(meta, 0, offset) for offset, meta in enumerate(metas, start=10)]
    assert [keep for keep, _ in answers] == [True, False, False, True, True, False, True, False, True, True]
    assert answers[1][1] is Decision.DUPLICATE
    # another partition is another record; a new read starts afresh
    assert read.decide(_reversal(1, 2, 5), 1, 30)[0] is True
    assert ReadFilter(None, consistent=False).decide(_reversal(3, 2, 5), 0, 31)[0] is True


def test_a_retried_task_s_resent_pair_closes_the_pair_its_first_try_opened() -> None:
    from airflow_logstore.core.visibility import WatermarkScan

    scan = WatermarkScan({})
    for offset, meta in enumerate([_half(1, 1), _half(1, 1), _half(1, 2)]):
        scan.observe(0, offset, Decision.REASSERT, meta.pair_half, meta.reasserts)
    assert scan.finish({0: 3}) == {0: 2}
    # a copy's opening half after its pair closed is open again until a closing half of the pair follows
    scan.observe(0, 3, Decision.REASSERT, 1, (0, 3, 1))
    assert scan.finish({0: 4}) == {0: 2}
    scan.observe(0, 4, Decision.REASSERT, 2, (0, 9, 1))  # another pair's closing half: not this one
    assert scan.finish({0: 5}) == {0: 2}
    scan.observe(0, 5, Decision.REASSERT, 2, (0, 3, 1))
    assert scan.finish({0: 6}) == {0: 5}
