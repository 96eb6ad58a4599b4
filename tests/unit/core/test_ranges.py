"""Offset ranges and spans: the one merge every caller (delivery reports, Spark tasks' reports) uses."""

from __future__ import annotations

from airflow_logstore.core import ranges
from airflow_logstore.log.kafka_client import DeliveryTracker


def test_merge_joins_overlapping_and_adjacent_ranges_without_changing_inputs() -> None:
    given = [[5, 6], [0, 2], [3, 3], [9, 12], [10, 11]]
    assert ranges.merge(given) == [[0, 3], [5, 6], [9, 12]]
    assert given[0] == [5, 6]


def test_widen_starts_a_span_and_grows_it_both_ways() -> None:
    assert ranges.widen(None, 4, 4) == (4, 4)
    assert ranges.widen((4, 4), 2, 3) == (2, 4)
    assert ranges.widen((2, 4), 9, 9) == (2, 9)
    assert ranges.widen([2, 9], 3, 5) == (2, 9)


def test_merge_spans_takes_per_partition_the_smallest_span_holding_all() -> None:
    reports = [{0: (10, 19), 1: (0, 4)}, {0: (3, 8)}, {"1": [7, 7], 2: (5, 5)}]
    assert ranges.merge_spans(reports) == {0: (3, 19), 1: (0, 7), 2: (5, 5)}
    assert ranges.merge_spans([]) == {}


class _Delivered:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def test_delivery_tracker_spans_follow_out_of_order_reports() -> None:
    tracker = DeliveryTracker()
    for partition, offset in [(0, 7), (1, 3), (0, 5), (0, 9)]:
        tracker(None, _Delivered(partition, offset))  # type: ignore[arg-type]
    tracker("boom", _Delivered(0, 1))  # type: ignore[arg-type]
    assert tracker.offsets == {0: (5, 9), 1: (3, 3)}
    assert tracker.delivered == 4
    assert tracker.error == "boom"
