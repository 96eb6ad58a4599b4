"""The committed feed's pure part: the range a publish copies, what it takes, and its progress record."""

from __future__ import annotations

import random

import pytest

from airflow_logstore.core.codec import RecordMeta, RecordType, encode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.feed import FeedCopy, copy_range, decode_progress, encode_progress
from airflow_logstore.core.properties import parse_table_properties
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import ReadFilter
from airflow_logstore.exceptions import TablePropertyError

W = "w"
# epoch 5 committed batch 1 at partition 0 offsets 0..3 (task 0.0); epoch 9 is the newest claim
STATE = ControlState(
    epochs={W: 9}, commits={(W, 1): CommitInfo(W, 1, 5, offsets={0: (0, 3)}, tasks=frozenset({"0.0"}))}
)
REVERSAL = RecordMeta(W, 5, 1, "0.0", record_type=RecordType.REVERSAL, reverses=(0, 9))
REASSERT = RecordMeta(W, 5, 1, "0.0", record_type=RecordType.REASSERT, pair_half=1, reasserts=(0, 1, 7))


def test_a_copy_goes_from_the_progress_to_the_watermark_and_never_back() -> None:
    span = copy_range({0: 4, 1: 10}, {0: 9, 1: 5, 2: 3}, {0: 0, 1: 0, 2: 2})
    assert span.start == {0: 4, 1: 10, 2: 2}  # partition 2 has no progress yet: from the log start
    assert span.end == {0: 10, 1: 10, 2: 4}  # partition 1: the watermark is behind the progress
    assert not span.empty and span.gaps == {2: (0, 2)}  # retention took 0-1 before any copy
    assert copy_range({0: 10}, {0: 9}, {0: 0}).empty


def test_progress_below_the_log_start_is_a_gap_and_the_copy_starts_at_the_log_start() -> None:
    span = copy_range({0: 3}, {0: 20}, {0: 8})
    assert span.gaps == {0: (3, 8)} and span.start == {0: 8} and span.end == {0: 21}


def test_the_progress_record_round_trips_and_anything_else_is_refused() -> None:
    assert decode_progress(encode_progress({1: 7, 0: 3})) == {0: 3, 1: 7}
    for bad in (None, b"{}", b'{"version": 2, "offsets": {}}', b"[]"):
        with pytest.raises(ValueError):
            decode_progress(bad)


def test_a_copy_takes_exactly_the_committed_records_in_order() -> None:
    records = [
        (0, 0, RecordMeta(W, 5, 1, "0.0")),  # committed
        (0, 1, RecordMeta(W, 4, 1, "0.0")),  # another epoch's copy of batch 1: redundant
        (0, 2, RecordMeta(W, 5, 1, "0.0", log_only=True)),  # log-only
        (0, 3, RecordMeta(W, 5, 1, "0.0")),  # committed
        (0, 4, RecordMeta(W, 5, 1, "0.0")),  # outside the committed offsets: redundant
        (0, 5, REVERSAL),
        (0, 6, REASSERT),
        (0, 7, RecordMeta("stranger", 1, 1)),  # foreign
    ]
    copy = FeedCopy(STATE, {0: 8}, {0: 0})
    taken = [offset for p, offset, meta in records if copy.take(p, offset, encode_headers(meta))]
    assert taken == [0, 3]
    assert copy.counts == {
        "copied": 2,
        "redundant": 2,
        "log-only": 1,
        "reversal": 1,
        "reassert": 1,
        "foreign": 1,
    }
    assert copy.progress == {0: 8}
    assert copy.finish({0: 9, 1: 4}) == {0: 9, 1: 4}


def test_undecodable_records_are_left_out_as_consistent_readers_leave_them() -> None:
    copy = FeedCopy(STATE, {0: 8}, {0: 0})
    assert not copy.take(0, 0, [("format-version", b"1")])
    assert copy.counts == {"undecodable": 1} and copy.progress == {0: 1}


def test_a_copy_refuses_records_above_the_watermark_or_below_its_progress() -> None:
    copy = FeedCopy(STATE, {0: 3}, {0: 2})
    with pytest.raises(ValueError, match="above the watermark"):
        copy.take(0, 4, encode_headers(RecordMeta(W, 5, 1, "0.0")))
    with pytest.raises(ValueError, match="below the progress"):
        copy.take(0, 1, encode_headers(RecordMeta(W, 5, 1, "0.0")))


def test_a_copy_takes_what_a_consistent_read_returns_on_random_records() -> None:
    """The feed is the consistent reader's output: the same rule, record by record."""
    rng = random.Random(7)
    kinds = [
        lambda: RecordMeta(W, rng.choice([4, 5, 9, 11]), rng.choice([1, 2]), rng.choice(["0.0", "0.1"])),
        lambda: REVERSAL,
        lambda: REASSERT,
    ]
    for _ in range(50):
        metas = [rng.choice(kinds)() for _ in range(30)]
        copy = FeedCopy(STATE, {0: 29}, {0: 0})
        reader = ReadFilter(STATE, consistent=True)
        for offset, meta in enumerate(metas):
            assert copy.take(0, offset, encode_headers(meta)) == reader.decide(meta, 0, offset)[0]


def test_the_feed_property_needs_the_log_and_names_its_topics_in_both_vocabularies() -> None:
    amoro = {"log-store.enabled": "true", "log-store.topic": "orders", "log-store.address": "k:9092"}
    paimon = {"log.system": "kafka", "kafka.topic": "orders", "kafka.bootstrap.servers": "k:9092"}
    for properties in (amoro, paimon):
        config = parse_table_properties({**properties, "log-store.committed-feed.enabled": "true"})
        assert config.committed_feed
        assert config.feed_topics() == ("orders.committed", "orders.committed-progress")
        assert not parse_table_properties(properties).committed_feed  # opt-in
    with pytest.raises(TablePropertyError, match=r"committed-feed\.enabled.*needs the log"):
        parse_table_properties({"log-store.committed-feed.enabled": "true"})
    with pytest.raises(TablePropertyError, match="expected true or false"):
        parse_table_properties({**amoro, "log-store.committed-feed.enabled": "yes"})
    with pytest.raises(TablePropertyError, match=r"did you mean 'log-store\.committed-feed\.enabled'"):
        parse_table_properties({**amoro, "log-store.committed-feed.enable": "true"})
    with pytest.raises(TablePropertyError, match="no committed feed"):
        parse_table_properties(amoro).feed_topics()
    too_long = {**amoro, "log-store.topic": "t" * 240, "log-store.committed-feed.enabled": "true"}
    with pytest.raises(TablePropertyError, match="not a legal Kafka topic name"):
        parse_table_properties(too_long)
