"""Control-state checkpoints and retirement of ledger entries (core.checkpoint)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.checkpoint import (
    Checkpoint,
    RetiredBatches,
    decode_state,
    encode_state,
    retirable,
    retire,
)
from airflow_logstore.core.codec import RecordMeta
from airflow_logstore.core.commit import Verdict, decide
from airflow_logstore.core.control import ControlRecord, ControlState, fold
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, WatermarkScan, classify


def commit(writer: str, batch: int, epoch: int, first: int, last: int) -> CommitInfo:
    return CommitInfo(writer, batch, epoch, offsets={0: (first, last)}, tasks=frozenset({"0.1"}))


def rich_log() -> list[ControlRecord]:
    """A control topic with every kind of record, at consecutive offsets with broker timestamps."""
    items: list[tuple[str, dict[str, Any] | None]] = [
        (control.epoch_key("w"), {"writer": "w"}),
        (control.commit_key("w", 1), commit("w", 1, 1, 0, 9).to_json()),
        (control.K_WATERMARK, {"offsets": {"0": 9}, "commits": ["w/1/1"]}),
        (control.epoch_key("x"), {"writer": "x"}),
        (control.lease_key("reconciler"), {"owner": "r1", "ttl_ms": 30000}),
        (control.K_RECONCILE, {"positions": {"0": 10}, "lease": 5}),
        (control.gap_key(0), {"from": 0, "to": 3}),
        (control.commit_key("x", 1), commit("x", 1, 4, 10, 19).to_json()),
        (control.K_WATERMARK, {"offsets": {"0": 19}, "commits": ["x/1/4"]}),
        ("garbage", {"unknown": True}),
    ]
    return [ControlRecord(key, value, i, 1_000 + i) for i, (key, value) in enumerate(items)]


def roundtrip(state: ControlState, through: int) -> tuple[ControlState, int]:
    return decode_state(json.loads(json.dumps(encode_state(state, through))), ControlState)


@pytest.mark.parametrize("cut", range(0, 11))
def test_checkpoint_plus_tail_folds_to_the_same_state_as_the_whole_log(cut: int) -> None:
    log = rich_log()
    whole = fold(log)
    restored, through = roundtrip(fold(log[:cut]), cut - 1)
    assert through == cut - 1
    assert fold(log[cut:], restored) == whole


def test_every_state_field_has_a_checkpoint_encoding() -> None:
    """A new ControlState field must be kept by checkpoints (else a checkpoint would lose it)."""
    encoded = encode_state(ControlState(), 0)
    assert {f.name for f in dataclasses.fields(ControlState)} <= set(encoded)


def test_unknown_field_is_refused() -> None:
    @dataclasses.dataclass
    class Other:
        surprise: int = 0

    with pytest.raises(TypeError, match="'surprise' has no checkpoint encoding"):
        encode_state(Other(), 0)


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported checkpoint format"):
        decode_state({"format": 99, "through": 0}, ControlState)


# -- retirement --------------------------------------------------------------------------------------


def test_a_commit_retires_once_retention_deleted_all_its_records() -> None:
    spans = CommitInfo("w", 1, 1, offsets={0: (0, 9), 1: (5, 7)})
    assert not retirable(spans, {0: 10, 1: 7}, {})
    assert retirable(spans, {0: 10, 1: 8}, {})
    assert retirable(CommitInfo("w", 2, 1), {}, {})  # a file-only commit has no records to classify


def test_a_commit_retires_once_publish_scans_settled_all_its_records() -> None:
    spans = CommitInfo("w", 1, 1, offsets={0: (0, 9), 1: (5, 7)})
    assert retirable(spans, {}, {0: [[0, 20]], 1: [[3, 7]]})
    assert not retirable(spans, {}, {0: [[0, 20]], 1: [[6, 7]]})  # offset 5 of partition 1 is not
    assert retirable(spans, {0: 10}, {1: [[0, 7]]})  # retention in one partition, settled in the other


def test_retire_keeps_what_the_protocol_still_asks() -> None:
    state = fold(rich_log())
    kept, gone = retire(state, {0: 10})
    assert gone == [("w", 1)]
    assert ("w", 1) in state.commits  # the given state is left as it is
    assert ("w", 1) not in kept.commits and ("x", 1) in kept.commits
    # a retried old batch is still seen as committed, and still skipped
    assert kept.committed("w", 1) == CommitInfo("w", 1, epoch=0)
    assert decide(kept.commits.values(), 1, "w", 1, 1, retired=kept.retired["w"]).verdict is (
        Verdict.ALREADY_COMMITTED
    )
    # and an older epoch is still fenced by it
    assert decide([], 0, "w", 2, 0, retired=kept.retired["w"]).verdict is Verdict.FENCED
    assert kept.max_batch_committed_after("w", 0) == 1
    assert kept.max_batch_committed_after("w", 1) is None


def test_retired_summary_answers_like_the_commits_it_replaced() -> None:
    """Checked against the full list of (epoch, batch) commits on random histories."""
    rng = random.Random(7)
    for _ in range(300):
        pairs = [(rng.randint(1, 40), rng.randint(1, 30)) for _ in range(rng.randint(1, 12))]
        retired = RetiredBatches()
        for epoch, batch in pairs:
            retired = retired.add(batch, epoch)
        for batch in range(0, 32):
            assert retired.contains(batch) == any(b == batch for _, b in pairs)
        for epoch in range(0, 42):
            newer = [b for e, b in pairs if e > epoch]
            assert retired.max_batch_after(epoch) == (max(newer) if newer else None), (pairs, epoch)
        assert retired.newest_epoch() == max(e for e, _ in pairs)
        ranges = retired.batches
        assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(ranges))  # merged


def test_retired_summary_stays_small_for_a_long_running_writer() -> None:
    retired = RetiredBatches()
    for batch in range(1, 5001):  # one Airflow attempt (epoch) per batch, in order
        retired = retired.add(batch, 2 * batch)
    assert retired.batches == [[1, 5000]]
    assert retired.frontier == [[10000, 5000]]


# -- settled records: classified without their ledger entry -----------------------------------------


def scanned_log() -> tuple[list[ControlRecord], list[tuple[RecordMeta, int, int]]]:
    """A control topic after one publish scan, and the data records that scan classified.

    Partition 0: batch 1 of epoch 2 (offsets 0-2), a zombie's copy from epoch 1 (3-4), a foreign record
    (5), batch 2 of epoch 2 (6-7), then batch 3 still in flight (8).
    """
    c1 = CommitInfo("w", 1, 2, offsets={0: (0, 2)}, tasks=frozenset({"0.1"}))
    c2 = CommitInfo("w", 2, 2, offsets={0: (6, 7)}, tasks=frozenset({"0.2"}))
    records = [
        ControlRecord(control.epoch_key("w"), {}, 0),  # epoch 1
        ControlRecord(control.epoch_key("w"), {}, 1),  # epoch 2
        ControlRecord(control.commit_key("w", 1), c1.to_json(), 2),
        ControlRecord(control.commit_key("w", 2), c2.to_json(), 3),
    ]
    data = [
        *((RecordMeta("w", 2, 1, "0.1"), 0, o) for o in (0, 1, 2)),
        *((RecordMeta("w", 1, 1, "0.0"), 0, o) for o in (3, 4)),
        (RecordMeta("stranger", 9, 1, "0.0"), 0, 5),
        *((RecordMeta("w", 2, 2, "0.2"), 0, o) for o in (6, 7)),
        (RecordMeta("w", 2, 3, "0.3"), 0, 8),
    ]
    state = fold(records)
    scan = WatermarkScan({})
    for meta, partition, offset in data:
        scan.observe(partition, offset, classify(meta, partition, offset, state))
    watermark = scan.finish({0: 9})
    value = {"offsets": {str(p): o for p, o in watermark.items()}, **scan.settled({0: 0}, watermark)}
    return [*records, ControlRecord(control.K_WATERMARK, value, 4)], data


def test_a_publish_scan_records_what_it_settled() -> None:
    records, _ = scanned_log()
    value = records[-1].value or {}
    assert value["offsets"] == {"0": 7}
    assert value["scanned"] == {"0": [0, 7]}
    assert value["holes"] == {"0": {"redundant": [[3, 4]], "foreign": [[5, 5]]}}


def test_retired_entries_leave_every_decision_as_it_was() -> None:
    records, data = scanned_log()
    state = fold(records)
    kept, gone = retire(state, {})
    assert gone == [("w", 1), ("w", 2)]
    restored, _ = roundtrip(kept, 4)
    for meta, partition, offset in data:
        before = classify(meta, partition, offset, state)
        assert classify(meta, partition, offset, restored) is before, (meta, offset)
    assert [classify(m, p, o, restored) for m, p, o in data] == [
        *[Decision.COMMITTED] * 3,
        *[Decision.REDUNDANT] * 2,
        Decision.FOREIGN,
        *[Decision.COMMITTED] * 2,
        Decision.IN_FLIGHT,
    ]


def test_an_unsettled_commit_does_not_retire() -> None:
    records, _ = scanned_log()
    c3 = CommitInfo("w", 3, 2, offsets={0: (8, 8)}, tasks=frozenset({"0.3"}))
    state = fold([*records, ControlRecord(control.commit_key("w", 3), c3.to_json(), 5)])
    kept, gone = retire(state, {})
    assert ("w", 3) in kept.commits and ("w", 3) not in gone


# -- found by the simulation -------------------------------------------------------------------------


def retired_state() -> ControlState:
    """Writer a: batch 1 committed by epoch 1 at offset 0 (settled, then retired); epoch 3 claimed."""
    c1 = CommitInfo("a", 1, 1, offsets={0: (0, 0)}, tasks=frozenset({"0.1"}))
    records = [
        ControlRecord(control.epoch_key("a"), {}, 0),  # epoch 1
        ControlRecord(control.commit_key("a", 1), c1.to_json(), 1),
        ControlRecord(control.epoch_key("a"), {}, 2),  # epoch 3
        ControlRecord(control.K_WATERMARK, {"offsets": {"0": 0}, "scanned": {"0": [0, 0]}}, 3),
    ]
    kept, gone = retire(fold(records), {})
    assert gone == [("a", 1)]
    return kept


def test_another_epochs_copy_of_a_retired_batch_is_redundant_not_in_flight_forever() -> None:
    """Seed 285: a newer epoch re-produced a batch whose commit had landed; after retirement nothing
    decided its copy, and the watermark stuck."""
    state = retired_state()
    copy = RecordMeta("a", 3, 1, "0.3")
    assert classify(copy, 0, 2, state) is Decision.REDUNDANT
    assert classify(RecordMeta("a", 1, 1, "0.1"), 0, 0, state) is Decision.COMMITTED  # settled, kept


def test_reconcile_classifier_decides_settled_records_one_by_one() -> None:
    """Seed 4: the reconciler's cached answer (for offsets outside a ledger span) reversed a committed
    record of a retired batch."""
    from airflow_logstore.core.reconcile import Classifier

    state = retired_state()
    classifier = Classifier(state)
    committed = RecordMeta("a", 1, 1, "0.1")
    assert classifier(committed, 0, 0) is Decision.COMMITTED
    assert classifier(committed, 0, 5) is Decision.REDUNDANT  # the same headers, not settled: a copy


def test_a_checkpoint_record_names_the_topic_it_was_made_of() -> None:
    """The record a checkpointer writes: the encoded state, ``through`` and the control topic's id
    (None when it was not known: such a checkpoint is read for any topic of that name)."""
    state = ControlState(epochs={"w": 3}, watermark={0: 7}, end_offset=9)
    for made_of in ("id-1", None):
        data = json.loads(json.dumps(Checkpoint(state, 8, made_of).to_json()))
        assert data["control_topic_id"] == made_of and data["through"] == 8
        back = Checkpoint.from_json(data, ControlState)
        assert (back.through, back.control_topic_id) == (8, made_of)
        assert (back.state.epochs, back.state.watermark) == ({"w": 3}, {0: 7})
