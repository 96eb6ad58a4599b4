"""Hybrid positions and which log records a hybrid read returns (core.visibility)."""

from __future__ import annotations

from airflow_logstore.core.codec import RecordMeta, RecordType
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import (
    Decision,
    ReadFilter,
    commit_positions,
    hybrid_keeps,
    in_snapshot,
    included_commits,
)


def state_with(*commits: CommitInfo, epochs: dict[str, int] | None = None) -> ControlState:
    state = ControlState(epochs=dict(epochs or {}))
    for c in commits:
        state.commits[c.key] = c
    return state


A1 = CommitInfo("a", 1, 1, sequence_number=2, offsets={0: (0, 4)}, tasks=frozenset({"0.1"}))
B1 = CommitInfo("b", 1, 2, sequence_number=3, offsets={0: (10, 14)}, tasks=frozenset({"0.2"}))


def test_positions_follow_the_watermark_not_the_batch_end() -> None:
    # another writer's undecided record sits at offset 5: the watermark stops at 4
    assert commit_positions({0: 3}, {0: 4, 1: -1}) == {0: 5, 1: 0}


def test_positions_never_move_backwards() -> None:
    assert commit_positions({0: 9, 2: 4}, {0: 4}) == {0: 9, 2: 4}


def test_in_snapshot_by_sequence_number() -> None:
    assert in_snapshot(A1, 2) and in_snapshot(A1, 3)
    assert not in_snapshot(A1, 1)
    assert not in_snapshot(None, 5)
    assert not in_snapshot(CommitInfo("a", 1, 1), 5)  # unknown sequence: not assumed held


def test_hybrid_skips_committed_records_the_snapshot_holds() -> None:
    state = state_with(A1, B1, epochs={"a": 1, "b": 2})
    meta_a = RecordMeta("a", 1, 1, "0.1")
    meta_b = RecordMeta("b", 2, 1, "0.2")
    start = {0: 0}
    # snapshot with sequence 2 holds A1 but not B1
    assert not hybrid_keeps(meta_a, 0, 3, Decision.COMMITTED, state, 2, start, consistent=True)
    assert hybrid_keeps(meta_b, 0, 12, Decision.COMMITTED, state, 2, start, consistent=True)


def test_hybrid_starts_at_the_positions() -> None:
    state = state_with(B1, epochs={"b": 2})
    meta_b = RecordMeta("b", 2, 1, "0.2")
    assert not hybrid_keeps(meta_b, 0, 12, Decision.COMMITTED, state, 0, {0: 13}, consistent=True)


def test_consistent_hybrid_returns_committed_records_only() -> None:
    state = state_with(epochs={"c": 4})
    meta = RecordMeta("c", 4, 1, "0.3")
    for decision in (Decision.IN_FLIGHT, Decision.REDUNDANT, Decision.LOG_ONLY, Decision.REVERSAL):
        assert not hybrid_keeps(meta, 0, 20, decision, state, 0, {0: 0}, consistent=True)


def test_eventual_hybrid_leaves_out_what_never_is_a_table_change() -> None:
    """Redundant and foreign records and reversals (before or after reconciliation ran) are left out,
    so an eventual hybrid read folds to the table at once (a fenced attempt's copy is not returned)."""
    state = state_with()
    reversal = RecordMeta("r", 0, 0, record_type=RecordType.REVERSAL, reverses=(0, 8))
    assert not hybrid_keeps(reversal, 0, 9, Decision.REVERSAL, state, 0, {0: 5}, consistent=False)
    meta = RecordMeta("c", 4, 1, "0.3")
    for decision in (Decision.REDUNDANT, Decision.FOREIGN):
        assert not hybrid_keeps(meta, 0, 20, decision, state, 0, {0: 0}, consistent=False)


def test_eventual_hybrid_returns_what_may_still_commit_log_only_records_and_reasserts() -> None:
    state = state_with()
    meta = RecordMeta("c", 4, 1, "0.3")
    for decision in (Decision.IN_FLIGHT, Decision.DEAD_PENDING, Decision.LOG_ONLY, Decision.REASSERT):
        assert hybrid_keeps(meta, 0, 20, decision, state, 0, {0: 0}, consistent=False)
        assert not hybrid_keeps(meta, 0, 20, decision, state, 0, {0: 0}, consistent=True)


def test_read_filter_modes() -> None:
    state = state_with(A1, epochs={"a": 1})
    committed = RecordMeta("a", 1, 1, "0.1")
    in_flight = RecordMeta("a", 1, 2, "0.1")
    assert ReadFilter(None, consistent=False).decide(in_flight, 0, 7) == (True, None)
    consistent = ReadFilter(state, consistent=True)
    assert consistent.decide(committed, 0, 3) == (True, Decision.COMMITTED)
    assert consistent.decide(in_flight, 0, 7) == (False, Decision.IN_FLIGHT)
    hybrid = ReadFilter(state, consistent=True, snapshot_sequence=2, start={0: 0})
    assert hybrid.decide(committed, 0, 3) == (False, Decision.COMMITTED)


def test_included_commits_are_the_ones_with_records_at_or_above_the_positions() -> None:
    older = CommitInfo("a", 1, 1, offsets={0: (0, 4)})
    lagging = CommitInfo("b", 1, 2, offsets={0: (5, 9), 1: (0, 3)})
    own = CommitInfo("a", 2, 1, offsets={0: (10, 12)})
    assert included_commits([older, lagging], {0: 5, 1: 4}, own) == frozenset({"b/1", "a/2"})
    assert included_commits([older, lagging], {0: 13, 1: 4}, CommitInfo("a", 3, 1)) == frozenset()


def test_hybrid_uses_the_snapshots_included_list_over_sequence_numbers() -> None:
    state = state_with(B1, epochs={"b": 2})  # B1 has sequence 3: "not in a snapshot of sequence 2"
    meta_b = RecordMeta("b", 2, 1, "0.2")
    start = {0: 0}
    included = frozenset({"b/1"})
    assert not hybrid_keeps(meta_b, 0, 12, Decision.COMMITTED, state, 2, start, True, included)
    assert hybrid_keeps(meta_b, 0, 12, Decision.COMMITTED, state, 2, start, True, frozenset())
    # a retired commit (no ledger entry) is still skipped when the snapshot lists it
    assert not hybrid_keeps(meta_b, 0, 12, Decision.COMMITTED, state_with(), 9, start, True, included)


def _half(lease: int, half: int, pair: tuple[int, int, int]) -> RecordMeta:
    reassert = RecordType.REASSERT
    return RecordMeta(
        "logstore-reconciler", lease, pair[2], record_type=reassert, pair_half=half, reasserts=pair
    )


def test_eventual_hybrid_read_drops_a_late_copy_of_a_closing_half_whose_pair_closed_before_it() -> None:
    """Simulation seed 359 (with the committed feed's steps), in core functions: reconciler run 1 (lease
    9) stalls past its lease and writes a reassert pair of offset 0 at 1 and 2; the next holder (lease
    29) read the log's end between the two halves, planned the same run (no progress of lease 9), found
    the opening half left alone and closes it. A publish scanned 0..2 first (a closed pair: the watermark
    passes it), so a snapshot's positions are 3, and the late closing half lands at 3, after them. A
    hybrid read from 3 must not count it: its pair is whole below the positions (retract: +U r twice)."""
    from collections import Counter

    from airflow_logstore.core.visibility import WatermarkScan, commit_positions

    state = state_with(A1, epochs={"a": 1})
    log = [
        (RecordMeta("a", 1, 1, "0.1"), Decision.COMMITTED, "+I"),  # the committed record r
        (_half(9, 1, (0, 0, 1)), Decision.REASSERT, "-U"),  # lease 9's pair
        (_half(9, 2, (0, 0, 1)), Decision.REASSERT, "+U"),
        (_half(29, 2, (0, 0, 1)), Decision.REASSERT, "+U"),  # lease 29's close, planned before offset 2
        (_half(29, 1, (0, 0, 2)), Decision.REASSERT, "-U"),  # a whole pair after the positions
        (_half(29, 2, (0, 0, 2)), Decision.REASSERT, "+U"),
    ]
    scan = WatermarkScan({})
    for offset, (meta, decision, _) in enumerate(log[:3]):  # the publish read the log's end before 3
        scan.observe(0, offset, decision, meta.pair_half, meta.reasserts)
    positions = commit_positions({}, scan.finish({0: 3}))
    assert positions == {0: 3}

    hybrid = ReadFilter(state, consistent=False, snapshot_sequence=2, start=positions)
    answers = [hybrid.decide(meta, 0, offset) for offset, (meta, _, _) in enumerate(log)]
    assert answers[3] == (False, Decision.DUPLICATE)
    assert [keep for keep, _ in answers] == [False, False, False, False, True, True]
    weights = Counter({"-U": -1, "+U": 1, "+I": 1})
    added = sum(weights[kind] for (keep, _), (_, _, kind) in zip(answers, log, strict=True) if keep)
    assert added == 0  # the snapshot's rows plus nothing: the table

    # a read from earliest counts each pair once (the late close is a copy), as before
    earliest = ReadFilter(None, consistent=False)
    assert [earliest.decide(meta, 0, offset)[0] for offset, (meta, _, _) in enumerate(log)] == [
        True,
        True,
        True,
        False,
        True,
        True,
    ]


def test_eventual_hybrid_read_counts_a_closing_half_only_after_its_opening_half() -> None:
    """A closing half met before its pair's opening half is dropped (a copy of a pair closed below the
    start); one after the opening half counts once (a pair a retried reconcile task resent)."""
    hybrid = ReadFilter(state_with(), consistent=False, snapshot_sequence=1, start={0: 5})
    pair = (0, 1, 1)
    assert hybrid.decide(_half(29, 2, pair), 0, 5) == (False, Decision.DUPLICATE)
    assert hybrid.decide(_half(9, 1, pair), 0, 6) == (True, Decision.REASSERT)
    assert hybrid.decide(_half(9, 2, pair), 0, 7) == (True, Decision.REASSERT)
    assert hybrid.decide(_half(29, 2, pair), 0, 8) == (False, Decision.DUPLICATE)
    # a consistent hybrid read returns no reasserts; a plain eventual read counts first copies (at least
    # once from the middle of the log: a resumed follower that returned the opening half needs the close)
    assert ReadFilter(state_with(), consistent=True, snapshot_sequence=1, start={0: 5}).pairs_halves is False
    assert ReadFilter(None, consistent=False).decide(_half(29, 2, pair), 0, 5) == (True, None)
