"""A publish scan as one pure step: records and the control state in, the watermark move out."""

from __future__ import annotations

from airflow_logstore.core.codec import RecordMeta, RecordType, encode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import scan_watermark, watermark_scan_range

COMMITTED = encode_headers(RecordMeta("w", 1, 1, task="0.1"))
IN_FLIGHT = encode_headers(RecordMeta("w", 1, 2, task="0.1"))
OPENS = encode_headers(RecordMeta("r", 0, 0, record_type=RecordType.REASSERT, pair_half=1))


def state() -> ControlState:
    commit = CommitInfo("w", 1, epoch=1, offsets={0: (0, 1), 1: (0, 0)}, tasks=frozenset({"0.1"}))
    return ControlState(epochs={"w": 1}, commits={commit.key: commit}, watermark={0: -1})


def test_scan_range_starts_after_the_watermark_or_at_the_log_start() -> None:
    assert watermark_scan_range({0: 4, 1: 0}, {0: (2, 9), 1: (5, 6), 2: (0, 3)}) == (
        {0: 5, 1: 5, 2: 0},
        {0: 9, 1: 6, 2: 3},
    )


def test_the_watermark_stops_before_the_first_undecided_record_and_says_why() -> None:
    records = [(0, 0, COMMITTED), (0, 1, COMMITTED), (0, 2, IN_FLIGHT), (0, 3, COMMITTED), (1, 0, COMMITTED)]
    before = state()
    move = scan_watermark(records, before, {0: 0, 1: 0}, {0: 4, 1: 1})
    assert move.watermark == {0: 1, 1: 0}
    assert move.scanned == 5 and move.undecodable == 0
    assert move.blocked_by == {
        "0": {"offset": 2, "writer_id": "w", "batch_id": 2, "epoch": 1, "state": "in-flight"}
    }
    assert move.settled["scanned"] == {"0": [0, 1], "1": [0, 0]}
    assert before.watermark == {0: -1}  # the state is left as it is


def test_undecodable_records_are_counted_and_decided_an_open_pair_holds_the_watermark() -> None:
    records = [(0, 0, [("x", b"y")]), (0, 1, OPENS), (0, 2, COMMITTED)]
    move = scan_watermark(records, state(), {0: 0}, {0: 3})
    assert move.undecodable == 1
    assert move.watermark == {0: 0}
