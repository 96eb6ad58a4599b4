"""Folding the control topic: epochs, ledger, watermark, reconcile progress, gaps (leases: elsewhere)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.control import ControlRecord, ControlState, fold
from airflow_logstore.core.summary import CommitInfo


def records(*items: tuple[str, dict[str, Any] | None], start: int = 0) -> list[ControlRecord]:
    """Control records at consecutive offsets from ``start``."""
    return [ControlRecord(key, value, start + i) for i, (key, value) in enumerate(items)]


def commit_value(writer: str, batch: int, epoch: int, **extra: Any) -> dict[str, Any]:
    return CommitInfo(writer, batch, epoch, **extra).to_json()


# --- epochs ----------------------------------------------------------------------------------------


def test_epoch_is_claim_offset_plus_one() -> None:
    state = fold([ControlRecord("epoch/job-a", {"claimed_at_ms": 1}, 41)])
    assert state.latest_epoch("job-a") == 42
    assert state.latest_epoch("job-b") is None


def test_epochs_strictly_increase_per_writer() -> None:
    state = ControlState()
    seen: list[int] = []
    for offset in (0, 3, 4, 10):
        fold([ControlRecord(control.epoch_key("w"), {}, offset)], state)
        epoch = state.latest_epoch("w")
        assert epoch is not None
        seen.append(epoch)
    assert seen == [1, 4, 5, 11]
    assert all(a < b for a, b in itertools.pairwise(seen))


def test_epochs_of_writers_are_independent() -> None:
    state = fold(records(("epoch/a", {}), ("epoch/b", {}), ("epoch/a", {})))
    assert state.epochs == {"a": 3, "b": 2}


def test_epoch_never_goes_back_when_refolded_out_of_order() -> None:
    state = fold([ControlRecord("epoch/a", {}, 9), ControlRecord("epoch/a", {}, 2)])
    assert state.latest_epoch("a") == 10


def test_epoch_tombstone_is_ignored() -> None:
    state = fold(records(("epoch/a", {}), ("epoch/a", None)))
    assert state.latest_epoch("a") == 1
    assert state.end_offset == 2


def test_writer_id_may_contain_slashes() -> None:
    assert fold(records((control.epoch_key("team/job"), {}))).epochs == {"team/job": 1}


# --- commit ledger ---------------------------------------------------------------------------------


def test_commit_ledger_keeps_the_first_entry_per_key() -> None:
    first = commit_value("w", 1, 5, offsets={0: (0, 9)}, snapshot_id=100)
    second = commit_value("w", 1, 7, offsets={0: (10, 19)}, snapshot_id=200)
    state = fold(records((control.commit_key("w", 1), first), (control.commit_key("w", 1), second)))
    commit = state.committed("w", 1)
    assert commit == CommitInfo.from_json(first)
    assert commit is not None and commit.epoch == 5 and commit.snapshot_id == 100
    assert state.committed("w", 2) is None


def test_commit_ledger_is_keyed_by_writer_and_batch_from_the_value() -> None:
    state = fold(
        records(
            (control.commit_key("a", 1), commit_value("a", 1, 1)),
            (control.commit_key("a", 2), commit_value("a", 2, 1)),
            (control.commit_key("b", 1), commit_value("b", 1, 3)),
        )
    )
    assert set(state.commits) == {("a", 1), ("a", 2), ("b", 1)}


def test_commit_tombstone_keeps_the_ledger_entry() -> None:
    state = fold(
        records((control.commit_key("w", 1), commit_value("w", 1, 1)), (control.commit_key("w", 1), None))
    )
    assert state.committed("w", 1) is not None


def test_max_batch_committed_after() -> None:
    state = fold(
        records(
            (control.commit_key("w", 1), commit_value("w", 1, 1)),
            (control.commit_key("w", 4), commit_value("w", 4, 3)),
            (control.commit_key("w", 6), commit_value("w", 6, 5)),
            (control.commit_key("other", 9), commit_value("other", 9, 9)),
        )
    )
    assert state.max_batch_committed_after("w", 0) == 6
    assert state.max_batch_committed_after("w", 3) == 6
    assert state.max_batch_committed_after("w", 4) == 6
    assert state.max_batch_committed_after("w", 5) is None
    assert state.max_batch_committed_after("nobody", 0) is None


# --- watermark -------------------------------------------------------------------------------------


def test_watermark_is_max_merged_and_never_moves_backwards() -> None:
    state = fold(
        records(
            ("watermark", {"offsets": {"0": 10, "1": 5}, "commits": ["w/1/1"]}),
            ("watermark", {"offsets": {"0": 7, "2": 3}, "commits": ["w/2/1"]}),
            ("watermark", {"offsets": {"1": 4}}),
            ("watermark", None),
            ("watermark", {"offsets": {"1": 8}, "commits": []}),
        )
    )
    assert state.watermark == {0: 10, 1: 8, 2: 3}
    assert state.watermark_commits == ["w/1/1", "w/2/1"]


def test_watermark_of_minus_one() -> None:
    state = fold(records(("watermark", {"offsets": {"0": -1}})))
    assert state.watermark == {0: -1}


# --- reconcile progress, gaps, end offset ----------------------------------------------------------


def test_reconcile_positions_follow_the_latest_record() -> None:
    state = fold(
        records(
            ("reconcile", {"positions": {"0": 10, "1": 4}, "lease": 3}),
            ("reconcile", {"positions": {"0": 12}, "lease": 5}),
        )
    )
    assert state.reconcile_positions == {0: 12}
    assert state.reconcile_lease == 5


def test_reconcile_tombstone_keeps_positions() -> None:
    state = fold(records(("reconcile", {"positions": {"0": 10}}), ("reconcile", None)))
    assert state.reconcile_positions == {0: 10}
    assert state.reconcile_lease is None


def test_gaps_are_recorded_per_partition() -> None:
    gap = {"from": 0, "to": 99, "detected_at_ms": 5}
    state = fold(
        records((control.gap_key(3), gap), (control.gap_key(1), {"from": 5, "to": 6}), ("log-gap/3", None))
    )
    assert state.gaps == {3: gap, 1: {"from": 5, "to": 6}}


def test_unknown_keys_are_ignored_but_advance_end_offset() -> None:
    state = fold(records(("something-else", {"x": 1}), ("epoch/a", {})))
    assert state.epochs == {"a": 2}
    assert state.end_offset == 2
    assert state.commits == {} and state.watermark == {} and state.leases == {}


def test_end_offset_is_after_the_highest_offset() -> None:
    state = fold([ControlRecord("x", None, 5), ControlRecord("y", None, 3)])
    assert state.end_offset == 6
    assert fold([]).end_offset == 0


def test_fold_continues_an_existing_state() -> None:
    state = fold(records(("epoch/a", {})))
    again = fold(records(("epoch/a", {}), start=1), state)
    assert again is state
    assert state.latest_epoch("a") == 2
    assert state.end_offset == 2


# --- keys and encoding -----------------------------------------------------------------------------


def test_key_helpers() -> None:
    assert control.commit_key("w", 12) == "commit/w/12"
    assert control.epoch_key("w") == "epoch/w"
    assert control.lease_key("reconcile") == "lease/reconcile"
    assert control.gap_key(4) == "log-gap/4"


def test_encode_is_compact_and_sorted() -> None:
    assert control.encode({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'
    assert control.encode(None) is None


def test_decode_round_trip() -> None:
    value = {"offsets": {"0": 3}, "commits": ["w/1/1"]}
    record = control.decode(b"watermark", control.encode(value), 17)
    assert record == ControlRecord("watermark", value, 17)


def test_decode_tombstone() -> None:
    assert control.decode(b"epoch/w", None, 3) == ControlRecord("epoch/w", None, 3)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"{}"),
        (b"\xff\xfe", b"{}"),
        (b"watermark", b"not json"),
        (b"watermark", b"\xff"),
        (b"watermark", b"[1, 2]"),
        (b"watermark", b'"text"'),
        (b"watermark", b"42"),
    ],
)
def test_decode_of_foreign_records_returns_none(key: bytes | None, value: bytes) -> None:
    assert control.decode(key, value, 0) is None


def test_decoded_records_fold_like_the_originals() -> None:
    raw = [
        (b"epoch/w", control.encode({"at": 1})),
        (b"commit/w/1", json.dumps(commit_value("w", 1, 1, offsets={0: (0, 2)})).encode()),
        (b"watermark", control.encode({"offsets": {"0": 2}})),
        (None, b"garbage"),
    ]
    decoded = [control.decode(key, value, offset) for offset, (key, value) in enumerate(raw)]
    state = fold(record for record in decoded if record is not None)
    assert state.epochs == {"w": 1}
    assert state.committed("w", 1) == CommitInfo("w", 1, 1, offsets={0: (0, 2)})
    assert state.watermark == {0: 2}
    assert state.end_offset == 3


def test_malformed_records_of_known_kinds_are_skipped_and_counted() -> None:
    state = fold(
        records(
            ("commit/w/1", {"writer_id": "w"}),  # no batch or epoch
            ("watermark", {"offsets": {"0": "many"}}),
            ("epoch/w", {"writer": "w"}),
        )
    )
    assert state.malformed == 2 and state.commits == {} and state.epochs == {"w": 3}


# -- log-only ledger entries of two epochs (issue 33, hole 7) ---------------------------------------------


def _log_only(epoch: int) -> CommitInfo:
    return CommitInfo("w", 3, epoch, offsets={0: (epoch, epoch)}, tasks=frozenset({"0.1"}), emit_mode="log")


def test_two_epochs_log_only_entries_keep_the_first_through_compaction_and_retirement() -> None:
    """A log-only batch has no compare-and-set: two epochs may each append its ledger entry. The fold
    keeps the first; compaction keeps the last record of a key, so the entries have a key per epoch, and
    an entry arriving after the first one retired changes nothing either."""
    from airflow_logstore.core.checkpoint import decode_state, encode_state, retire

    first, second = _log_only(2), _log_only(5)
    assert control.ledger_key(first) != control.ledger_key(second)  # compaction keeps both
    assert control.ledger_key(CommitInfo("w", 3, 2)) == control.commit_key("w", 3)  # table commits
    records = [
        ControlRecord(control.ledger_key(first), first.to_json(), 0),
        ControlRecord(control.ledger_key(second), second.to_json(), 1),
    ]
    latest_per_key = {r.key: r for r in records}  # what compaction leaves
    assert fold(records).committed("w", 3) == first
    assert fold(sorted(latest_per_key.values(), key=lambda r: r.offset)).committed("w", 3) == first
    retired, gone = retire(fold(records[:1]), {0: 10})  # retention deleted its records
    assert gone == [("w", 3)]
    state, _ = decode_state(encode_state(retired, 0), ControlState)
    late = fold(records[1:], state)
    assert ("w", 3) not in late.commits and late.committed("w", 3) is not None
