"""Control checkpoints on the real broker: a checkpoint plus the tail reads like the whole control topic,
and ledger entries whose records retention deleted retire (with tombstones) without being forgotten."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import TopicError
from airflow_logstore.log import control_topic, kafka_client
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import LogStoreTable
from logstore_dev.testing.tables import make_table

BATCH = 5


def write_batches(table: LogStoreTable, first: int, count: int) -> None:
    """``count`` batches of one writer attempt each: claim, records in partition 0, ledger entry."""
    config = table.config()
    ctl = table.control(config)
    prod = kafka_client.producer(table.kafka_config(config))
    for batch in range(first, first + count):
        epoch = ctl.claim_epoch("w")
        tracker = kafka_client.DeliveryTracker()
        headers = encode_headers(RecordMeta("w", epoch, batch, "0.1"))
        for n in range(BATCH):
            value = b'{"kind":"+I","row":{"id":%d,"name":"n","amount":1}}' % (batch * 100 + n)
            prod.produce(config.topic, value=value, headers=headers, partition=0, on_delivery=tracker)
        kafka_client.flush(prod, tracker, BATCH, "test batch")
        span = tracker.offsets[0]
        commit = CommitInfo("w", batch, epoch, offsets={0: span}, tasks=frozenset({"0.1"}))
        ctl.record_commit(commit.to_json(), "w", batch)


def whole_topic(table: LogStoreTable) -> ControlState:
    """The control state folded from offset 0, with no checkpoint."""
    ctl = table.control()
    cons = kafka_client.consumer(ctl.config)
    try:
        low, end = kafka_client.partition_offsets(cons, ctl.topic, 1)[0]
        records: list[Any] = []
        for batch in kafka_client.scan(cons, ctl.topic, {0: low}, {0: end}):
            for m in batch:
                stamp = kafka_client.message_timestamp_ms(m)
                records.append(control.decode(m.key(), m.value(), m.offset(), stamp))
        return control.fold(r for r in records if r is not None)
    finally:
        cons.close()


@pytest.fixture
def table(env, monkeypatch: pytest.MonkeyPatch) -> LogStoreTable:
    monkeypatch.setattr(control_topic, "CHECKPOINT_EVERY", 20)
    return make_table(env, properties={"log-store.partitions": "1"})


def test_publish_checkpoints_and_a_read_decides_like_the_whole_topic(table: LogStoreTable) -> None:
    write_batches(table, 1, 12)  # 24 control records: a checkpoint is due
    report = publish_visible_offsets(table)
    # the publish settled every batch (its watermark move is in the checkpoint): all entries retire
    assert report.checkpoint is not None
    assert (report.checkpoint["commits"], report.checkpoint["retired"]) == (0, 12)
    write_batches(table, 13, 3)
    ctl = table.control()
    _, start = control_topic.latest_checkpoint(ctl)
    assert start == report.checkpoint["through"] + 1 > 0

    state, full = ctl.read(), whole_topic(table)
    assert state.checkpoint_start == start
    for name in ("epochs", "watermark", "end_offset"):
        assert getattr(state, name) == getattr(full, name), name
    assert sorted(state.commits) == [("w", b) for b in (13, 14, 15)]
    assert state.retired["w"].batches == [[1, 12]]
    assert all(state.committed("w", b) is not None for b in range(1, 16))
    publish_visible_offsets(table)
    consistent = read_log(table, consistency="consistent")
    assert len(consistent.records) == 15 * BATCH
    assert sorted({r.meta.batch_id for r in consistent.records}) == list(range(1, 16))
    eventual = read_log(table, consistency="eventual")
    assert len(eventual.records) == 15 * BATCH


def test_retention_retires_ledger_entries_and_leaves_what_the_protocol_asks(table: LogStoreTable) -> None:
    write_batches(table, 1, 12)
    config = table.config()
    admin = kafka_client.admin_client(table.kafka_config(config))
    from confluent_kafka import TopicPartition

    # retention deletes the records of batches 1-4
    cut = TopicPartition(config.topic, 0, 4 * BATCH)
    admin.delete_records([cut])[cut].result(timeout=30)

    report = publish_visible_offsets(table)
    assert report.checkpoint is not None and report.checkpoint["retired"] == 12  # 4 deleted, 8 settled
    state = table.control().read()
    assert state.commits == {}
    assert state.retired["w"].batches == [[1, 12]]
    assert state.committed("w", 2) is not None  # an old batch is still known as committed
    full = whole_topic(table)  # the tombstones are in the topic: a full fold keeps only the live entries
    tombstoned = [k for k in range(1, 13) if ("w", k) in full.commits]
    assert tombstoned == list(range(1, 13))  # compaction has not run: the entries are still there ...
    cons = kafka_client.consumer(table.kafka_config(config))
    try:
        low, end = kafka_client.partition_offsets(cons, config.control_topic, 1)[0]
        keys = [
            m.key()
            for b in kafka_client.scan(cons, config.control_topic, {0: low}, {0: end})
            for m in b
            if m.value() is None
        ]
    finally:
        cons.close()
    retired = [k for k in keys if k.startswith(control.K_COMMIT.encode())]  # ... tombstoned
    assert sorted(retired) == sorted(control.commit_key("w", b).encode() for b in range(1, 13))
    # so are the watermark moves the checkpoint holds (each has a key of its own: compaction keeps the last
    # record of a key, which a stalled publisher may have written with an older watermark)
    moves = [k for k in keys if not k.startswith(control.K_COMMIT.encode())]
    assert moves and all(k.startswith(control.K_WATERMARK_PREFIX.encode()) for k in moves)
    publish_visible_offsets(table)
    consistent = read_log(table, consistency="consistent")
    assert len(consistent.records) == 8 * BATCH


def test_a_checkpoint_that_does_not_decode_stops_reads_and_names_it(table: LogStoreTable) -> None:
    """No silent read of the whole control topic instead: once compaction has removed retired entries,
    only the checkpoint knows their batches are committed, and a retried old batch would commit again."""
    write_batches(table, 1, 12)
    assert publish_visible_offsets(table).checkpoint is not None
    ctl = table.control()
    assert ctl.read().committed("w", 1) is not None
    with kafka_client.shared_producer(ctl.config) as prod:  # e.g. written by a newer version, or damaged
        prod.produce(control_topic.checkpoint_topic(ctl.topic), key=b"checkpoint", value=b"not a checkpoint")
        prod.flush(30)
    with pytest.raises(TopicError, match=r"-checkpoint' \(offset \d+\) does not decode") as failure:
        ctl.read()
    assert "ledger entries it retired" in str(failure.value)
    with pytest.raises(TopicError):
        publish_visible_offsets(table)


def test_records_deleted_while_a_publish_scans_fail_the_publish_not_settle_unseen(
    table: LogStoreTable,
) -> None:
    """Retention deletes records after the publish read the log's bounds and before its scan reached
    them: the publish fails (retryable) instead of settling a range it never classified; run again, it
    settles from the new log start."""
    from confluent_kafka import TopicPartition

    from airflow_logstore.exceptions import KafkaUnavailableError
    from airflow_logstore.pause import on_pause

    write_batches(table, 1, 3)  # 15 records in partition 0, none published yet
    config = table.config()
    admin = kafka_client.admin_client(table.kafka_config(config))
    cut = TopicPartition(config.topic, 0, 2 * BATCH)

    def retention_runs() -> None:
        admin.delete_records([cut])[cut].result(timeout=30)

    with (
        on_pause("publish:offsets-read", retention_runs),
        pytest.raises(KafkaUnavailableError, match=r"deleted \(retention\) while it was read"),
    ):
        publish_visible_offsets(table)
    assert table.control().read().watermark.get(0, -1) < 0  # nothing settled

    report = publish_visible_offsets(table)
    assert report.advanced
    state = table.control().read()
    assert state.watermark[0] == 3 * BATCH - 1
    consistent = read_log(table, consistency="consistent")
    assert sorted({r.meta.batch_id for r in consistent.records}) == [3]  # batches 1-2 are gone


def compacted_read(table: LogStoreTable) -> ControlState:
    """The control state as a reader folds it once the log cleaner has run: the latest checkpoint, then
    the records after it without the tombstoned keys (the cleaner removes a key's records once a later
    tombstone exists, and the tombstone itself later)."""
    ctl = table.control()
    state, start = control_topic.latest_checkpoint(ctl)
    cons = kafka_client.consumer(ctl.config)
    try:
        low, end = kafka_client.partition_offsets(cons, ctl.topic, 1)[0]
        records = [
            control.decode(m.key(), m.value(), m.offset(), kafka_client.message_timestamp_ms(m))
            for batch in kafka_client.scan(cons, ctl.topic, {0: max(start, low)}, {0: end})
            for m in batch
        ]
    finally:
        cons.close()
    tombstoned = {r.key for r in records if r is not None and r.value is None}
    return control.fold((r for r in records if r is not None and r.key not in tombstoned), state)


def test_a_stalled_publish_never_writes_a_checkpoint_older_than_the_latest(table: LogStoreTable) -> None:
    """Hole 3 of issue 33: a publish reads the control state and stalls before its checkpoint; another
    publish checkpoints past it, retires batches 13-24 and tombstones them; the first one then writes its
    older checkpoint. Before the fix it became the latest, and once the cleaner removed the tombstoned
    entries, batches 13-24 counted as never committed (a retry would commit one again). Now its
    checkpoint's transaction is fenced by the newer checkpointer's transactional id."""
    import threading

    from airflow_logstore.pause import on_pause

    write_batches(table, 1, 12)  # a checkpoint is due
    reached, release = threading.Event(), threading.Event()

    def hold_the_first() -> None:
        if not reached.is_set():
            reached.set()
            assert release.wait(120)

    results: dict[str, Any] = {}
    with on_pause("checkpoint:before-write", hold_the_first):
        older = threading.Thread(target=lambda: results.setdefault("older", publish_visible_offsets(table)))
        older.start()
        assert reached.wait(120)  # its state is read, its checkpoint not written yet
        write_batches(table, 13, 12)
        newer = publish_visible_offsets(table)
        release.set()
        older.join(120)
    assert newer.checkpoint is not None
    _, start = control_topic.latest_checkpoint(table.control())
    assert start == newer.checkpoint["through"] + 1  # the latest checkpoint is the newer one
    state = compacted_read(table)
    assert [b for b in range(1, 25) if state.committed("w", b) is None] == []
    assert "fenced" in results["older"].checkpoint
    assert newer.checkpoint["retired"] == 24  # its checkpoint holds its own watermark move
    publish_visible_offsets(table)
    assert len(read_log(table, consistency="consistent").records) == 24 * BATCH


def test_a_checkpoint_of_a_deleted_control_topic_is_not_read_for_the_new_one(table: LogStoreTable) -> None:
    """A checkpoint names the id of the control topic it was made of: after the topic is deleted and
    re-created (another id), the old checkpoint is not the new topic's state, even once the new topic
    has grown past the checkpoint's ``through`` (the offset check alone would take it)."""
    from tests.integration.test_races import _recreate_topic

    write_batches(table, 1, 12)
    report = publish_visible_offsets(table)
    assert report.checkpoint is not None
    config = table.config()
    _recreate_topic(table, config.control_topic or "")
    ctl = table.control()
    ctl.append_fill(report.checkpoint["through"] + 5)  # the new topic is longer than the old checkpoint
    state, start = control_topic.latest_checkpoint(ctl)
    assert start == 0 and state.commits == {} and not state.retired
    assert ctl.read().committed("w", 1) is None  # the new topic knows nothing of the old ledger
