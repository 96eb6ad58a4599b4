"""The committed feed on the real broker (issue 37, item 2): a plain ``read_committed`` consumer of
``<topic>.committed`` (confluent-kafka only, no project code) sees each committed change exactly once,
through a failed attempt with reconciliation (it folds to the Iceberg table), a publisher SIGKILLed
inside its copy and two publishers racing; a long-lived publisher (``Publisher``) reaches what one-shot
publishes reach, takes the feed's token again once fenced, and a writer publishing after its commit
makes its batch visible without a separate publish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.changelog import apply_retract
from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import FencedError
from airflow_logstore.log import kafka_client
from airflow_logstore.pause import on_pause
from airflow_logstore.publish.publisher import Publisher, publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.tables import make_table
from tests.pause_files import wait_reached

FEED = {"log-store.committed-feed.enabled": "true"}
Feed = list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]]


def read_feed(handle: LogStoreTable, timeout: float = 60.0, settled: bool = True) -> Feed:
    """Everything a plain read_committed consumer gets from the committed topic, up to its last stable
    offset: (partition, key, value, headers), partition by partition, each in log order (a consumer
    interleaves partitions in no fixed order: two reads compare equal only so). Only confluent-kafka here.

    A transaction's commit returns once the coordinator has decided it; the broker writes its commit
    markers to the partitions a moment later, and only then do read_committed consumers see its records.
    ``settled`` reads again until every partition's end for read_committed is its end for anyone (all
    markers written, no transaction open); ``False`` where the test leaves a transaction open."""
    config = handle.config()
    topic = f"{config.topic}.committed"
    deadline = time.monotonic() + timeout
    while True:
        found, ends = _read_committed(config.bootstrap_servers, topic, deadline)
        if not settled or ends == _ends(config.bootstrap_servers, topic, list(ends)):
            return sorted(found, key=lambda record: record[0])  # by partition; stable: log order kept
        assert time.monotonic() < deadline, f"{topic}: transactions not settled: {ends}"
        time.sleep(0.1)


def _read_committed(servers: str, topic: str, deadline: float) -> tuple[Feed, dict[int, int]]:
    """One read of ``topic`` to its end as read_committed sees it: the records and that end per partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"feed-test-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        timeout = max(deadline - time.monotonic(), 1.0)
        partitions = len(consumer.list_topics(topic, timeout=timeout).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ends: dict[int, int] = {}
        found: Feed = []
        while len(ends) < partitions:
            assert time.monotonic() < deadline, (
                f"no end of {topic} partitions {set(range(partitions)) - set(ends)}"
            )
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                ends[message.partition()] = message.offset()
                continue
            found.append((message.partition(), message.key(), message.value(), message.headers() or []))
        return found, ends
    finally:
        consumer.close()


def _ends(servers: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """Each partition's high watermark as a read_uncommitted client sees it (markers included)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"feed-ends-{uuid.uuid4().hex[:8]}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()


def changes(feed: Feed) -> list[tuple[int, bytes | None, str, dict[str, Any]]]:
    """The feed's records as (partition, key, row kind, row), in log order per partition."""
    result = []
    for partition, key, value, _ in sorted(feed, key=lambda r: r[0]):  # stable: log order kept
        decoded = json.loads(value or b"{}")
        result.append((partition, key, decoded["kind"], decoded["row"]))
    return result


def consistent_changes(handle: LogStoreTable) -> list[tuple[int, bytes | None, str, dict[str, Any]]]:
    read = read_log(handle, consistency="consistent")
    ordered = sorted(read.records, key=lambda r: (r.partition, r.offset))
    return [(r.partition, r.key, r.kind.value, r.row) for r in ordered]


def fold(feed: Feed) -> dict[int, tuple[Any, Any]]:
    folded = apply_retract((row["id"], RowKind(kind), row) for _, _, kind, row in changes(feed))
    assert not folded.anomalies, folded.anomalies
    return {row["id"]: (row["name"], row["amount"]) for row in folded.state.values()}


def write_batches(handle: LogStoreTable, first: int, count: int, size: int = 3, dead: bool = False) -> None:
    """``count`` batches of one attempt each, written the way the writer writes (a claim, records in
    partition 0, a ledger entry); ``dead``: each batch first gets an attempt that dies before committing."""
    config = handle.config()
    ctl = handle.control(config)
    prod = kafka_client.producer(handle.kafka_config(config))
    for batch in range(first, first + count):
        for attempt in ("dead", "live") if dead else ("live",):
            epoch = ctl.claim_epoch("w")
            headers = encode_headers(RecordMeta("w", epoch, batch, "0.1"))
            tracker = kafka_client.DeliveryTracker()
            for n in range(size):
                row = {"id": batch * 100 + n, "name": attempt, "amount": epoch}
                value = json.dumps({"kind": "+I", "row": row}).encode()
                key = json.dumps([row["id"]]).encode()
                prod.produce(
                    config.topic, key=key, value=value, headers=headers, partition=0, on_delivery=tracker
                )
            kafka_client.flush(prod, tracker, size, "test batch")
        commit = CommitInfo("w", batch, epoch, offsets={0: tracker.offsets[0]}, tasks=frozenset({"0.1"}))
        ctl.record_commit(commit.to_json(), "w", batch)


@pytest.fixture
def table(env) -> LogStoreTable:
    return make_table(env, properties={**FEED, "log-store.partitions": "1"}, prefix="feed")


ROWS = [
    [{"id": i, "name": f"v{i}", "amount": i} for i in range(1, 7)],
    [
        {"id": 1, "name": "v1-b", "amount": 100, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 7, "name": "v7", "amount": 7},
    ],
]


def test_the_feed_is_what_a_consistent_reader_returns_and_folds_to_the_table(
    env, spark, tmp_path: Path
) -> None:
    """A failed attempt of batch 2 (its records in the log, fenced before committing), the retry that
    commits, reconciliation (reversals and reassert pairs in the log), then a publish: the feed is
    exactly the consistent reader's output, record for record with its headers, and folds to the
    Iceberg table; another publish adds nothing."""
    from airflow_logstore.core.codec import RecordType, decode_headers
    from airflow_logstore.reconcile.reconciler import reconcile
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.tables import table_state, write_jsonl

    handle = make_table(env, properties=FEED, prefix="feed")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(ROWS, start=1)]
    open_writer(spark, str(handle.name), writer_id="w").write_path(str(paths[0]), 1)
    spark.catalog.refreshTable(handle.spark_name())
    dead, live = (open_writer(spark, str(handle.name), writer_id="w") for _ in range(2))
    with pytest.raises(FencedError):
        dead.write_path(str(paths[1]), 2)  # its records are in the log; the newer claim fenced it
    assert not live.write_path(str(paths[1]), 2).skipped
    assert reconcile(handle).reversed > 0
    eventual = read_log(handle, consistency="eventual").records
    assert any(r.meta.record_type is RecordType.REVERSAL for r in eventual)

    report = publish_visible_offsets(handle)
    assert report.feed is not None and report.feed["transactions"] == 1
    feed = read_feed(handle)
    assert changes(feed) == consistent_changes(handle)
    assert report.feed["copied"] == len(feed) == len(ROWS[0]) + 4  # batch 2: -U/+U, -D, +I
    assert report.feed["redundant"] > 0 and report.feed["reversal"] > 0
    consistent = sorted(
        read_log(handle, consistency="consistent").records, key=lambda r: (r.partition, r.offset)
    )
    assert [decode_headers(headers) for *_, headers in sorted(feed, key=lambda r: r[0])] == [
        r.meta for r in consistent
    ]  # the headers as they are: who wrote each change
    plain = {row["id"]: (row["name"], row["amount"]) for row in table_state(handle).values()}
    assert fold(feed) == plain

    again = publish_visible_offsets(handle)
    assert again.feed is not None and again.feed.get("copied", 0) == 0 and again.feed["transactions"] == 0
    assert read_feed(handle) == feed


def test_a_publisher_killed_inside_its_copy_leaves_nothing_and_the_next_copies_once(env, table) -> None:
    """A real ``logstore publish`` process SIGKILLed at ``feed:copied`` (its copies and progress sent,
    the transaction not committed): a read_committed consumer sees nothing of it; the next publish
    aborts the dead transaction (it takes the feed's transactional id) and copies every record once."""
    write_batches(table, 1, 2, dead=True)
    folder = env.scratch(env.unique("pause"))
    extra = {"LOGSTORE_PAUSE_AT": "feed:copied", "LOGSTORE_PAUSE_DIR": str(folder)}
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_logstore.cli", "publish", str(table.name)],
        env={**os.environ, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        try:
            wait_reached(process, folder, "feed:copied", 120)
        except AssertionError as exc:
            raise AssertionError(f"the publisher: {exc}: {process.communicate()[0][-3000:]}") from None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    assert read_feed(table, settled=False) == []  # sent in a transaction that never committed

    report = publish_visible_offsets(table)  # the watermark already moved: this publish only copies
    assert not report.advanced and report.feed is not None and report.feed["copied"] == 6
    feed = read_feed(table)
    assert changes(feed) == consistent_changes(table)
    assert sorted(row["id"] for *_, row in changes(feed)) == [100, 101, 102, 200, 201, 202]
    assert {row["name"] for *_, row in changes(feed)} == {"live"}


def first_caller_held() -> tuple[threading.Event, threading.Event, Callable[[], None]]:
    """(reached, release, hook): a pause hook that holds its first caller until ``release`` is set (the
    calls after it pass), ``reached`` set once it is held."""
    reached, release = threading.Event(), threading.Event()

    def hook() -> None:
        if not reached.is_set():
            reached.set()
            assert release.wait(120)

    return reached, release, hook


def test_two_publishers_racing_the_fenced_one_fails_and_no_record_is_copied_twice(table) -> None:
    """Publisher A is held after sending its copy, before its commit; publisher B takes the feed's
    transactional id (A's open transaction is aborted) and copies everything; A's commit then fails
    with FencedError, and the feed has each record once. Batches written while A was held are copied
    by B, and by a third publish only what is new."""
    write_batches(table, 1, 2)
    reached, release, hold_the_first = first_caller_held()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            publish_visible_offsets(table)
        except BaseException as exc:  # what A ends with is the test's subject
            errors.append(exc)

    with on_pause("feed:copied", hold_the_first):
        publisher_a = threading.Thread(target=first)
        publisher_a.start()
        assert reached.wait(120)
        write_batches(table, 3, 1)
        second = publish_visible_offsets(table)
        release.set()
        publisher_a.join(120)
    assert len(errors) == 1 and isinstance(errors[0], FencedError), errors
    assert "newer publisher" in str(errors[0])
    assert second.feed is not None and second.feed["copied"] == 9
    write_batches(table, 4, 1)
    assert publish_visible_offsets(table).feed["copied"] == 3  # type: ignore[index]
    feed = read_feed(table)
    assert changes(feed) == consistent_changes(table)
    ids = [row["id"] for *_, row in changes(feed)]
    assert ids == sorted(set(ids)) and len(ids) == 12


def test_a_long_lived_publisher_reaches_the_watermark_and_feed_of_one_shot_publishes(table) -> None:
    """One Publisher publishing after each of three rounds of batches (one with a dead attempt before
    its live one) keeps its clients: one whole control read, the feed's token taken once. Each round's
    batches are visible at once (its control read reached the topic's end at call time), the feed is
    the consistent reader's output, and a one-shot publish afterwards finds nothing left to do."""
    with Publisher(table) as publisher:
        reports = []
        for first, dead in ((1, False), (3, True), (5, False)):
            write_batches(table, first, 2, dead=dead)
            reports.append(publisher.publish())
        assert publisher.control.whole_reads == 1 and publisher.feed.tokens_taken == 1
    assert [r.feed["copied"] for r in reports if r.feed] == [6, 6, 6]
    assert [len(r.newly_visible) for r in reports] == [2, 2, 2]
    one_shot = publish_visible_offsets(table)
    assert not one_shot.advanced and one_shot.watermark_before == reports[-1].watermark_after
    assert one_shot.feed is not None and one_shot.feed.get("copied", 0) == 0
    feed = read_feed(table)
    assert changes(feed) == consistent_changes(table)
    ids = [row["id"] for *_, row in changes(feed)]
    assert (
        ids == sorted(set(ids)) and len(ids) == 18 and {row["name"] for *_, row in changes(feed)} == {"live"}
    )


def test_a_fenced_long_lived_publisher_takes_the_token_again_and_copies_nothing_twice(table) -> None:
    """Long-lived publisher A is held after sending its copy, before its commit; a one-shot publisher B
    takes the feed's token and copies everything; A's commit fails with FencedError and A drops its
    producer. A's next publish takes the token again, reads the progress after it, and copies only
    the batch written since: the feed has each record once."""
    write_batches(table, 1, 2)
    reached, release, hold_the_first = first_caller_held()
    errors: list[BaseException] = []
    with Publisher(table) as publisher_a:

        def first() -> None:
            try:
                publisher_a.publish()
            except BaseException as exc:  # what A ends with is the test's subject
                errors.append(exc)

        with on_pause("feed:copied", hold_the_first):
            thread = threading.Thread(target=first)
            thread.start()
            assert reached.wait(120)
            second = publish_visible_offsets(table)
            release.set()
            thread.join(120)
        assert len(errors) == 1 and isinstance(errors[0], FencedError), errors
        assert second.feed is not None and second.feed["copied"] == 6
        write_batches(table, 3, 1)
        again = publisher_a.publish()
        assert again.feed is not None and again.feed["copied"] == 3
        assert publisher_a.feed.tokens_taken == 2
    feed = read_feed(table)
    assert changes(feed) == consistent_changes(table)
    ids = [row["id"] for *_, row in changes(feed)]
    assert ids == sorted(set(ids)) and len(ids) == 9


def test_a_writer_publishing_after_its_commit_makes_the_batch_visible_at_once(
    env, spark, tmp_path: Path
) -> None:
    """``open_writer(..., publish_after_commit=True)``: each batch it commits is visible to a consistent
    reader and on the committed feed when the write returns, with no separate publish; its publisher
    is one for both batches (the feed's token taken once)."""
    from airflow_logstore.publish.publisher import is_visible
    from airflow_logstore.write.writer import open_writer
    from logstore_dev.testing.tables import write_jsonl

    handle = make_table(env, properties=FEED, prefix="feed")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(ROWS, start=1)]
    with open_writer(spark, str(handle.name), writer_id="w", publish_after_commit=True) as writer:
        for batch, path in enumerate(paths, start=1):
            assert not writer.write_path(str(path), batch).skipped
            assert is_visible(handle, "w", batch)
            assert writer.last_publish is not None and writer.last_publish.advanced
        assert writer.publisher is not None and writer.publisher.feed.tokens_taken == 1
    assert writer.publisher is None  # closed with the writer
    assert not publish_visible_offsets(handle).advanced  # nothing left for a separate publish
    feed = read_feed(handle)
    assert changes(feed) == consistent_changes(handle) and len(feed) == len(ROWS[0]) + 4
