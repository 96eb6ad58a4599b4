"""Followers on the real broker, Spark and Iceberg: from a snapshot, across a restart, past compaction.

- A follower from ``snapshot:S`` is the log part of a hybrid read of S: S's rows plus what it yields
  are each change once (H1; before, it returned S's own batch again).
- A consistent follower stopped mid-stream and restarted from the last record's ``resume_position``
  yields every committed record exactly once across both runs; restarted with ``latest`` it loses the
  committed records that were still above the watermark. An eventual one resumed misses nothing.
- A consistent follower stalled while the real log cleaner compacts the control topic re-bases on the
  latest checkpoint; before, it dropped the batches whose ledger entries the cleaner removed.

Every run ends by a deterministic condition, checked at the top of a follower round (its ``stop``
object): the records its consumer delivered, counted by a wrapper, and what it yielded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.changelog import apply_retract
from airflow_logstore.core.codec import RecordMeta, RowKind, encode_headers
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.log import control_topic, kafka_client
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read import follow as follow_module
from airflow_logstore.read.follow import follow
from airflow_logstore.read.reader import LogReader, LogRecord, read_hybrid
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, table_state, write_jsonl

ROWS = [
    [{"id": i, "name": f"v{i}", "amount": i} for i in range(1, 9)],
    [
        {"id": 1, "name": "v1-b", "amount": 100, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 9, "name": "v9", "amount": 9},
    ],
]


class _Delivered:
    """Counts the log records the follower's consumers (made with the tailing settings) deliver, and
    keeps them: to pause the control follower's one (a stall)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, topic: str) -> None:
        self.topic, self.count = topic, 0
        self.consumers: list[_Counting] = []
        make = kafka_client.consumer

        def consumer(*args: Any, **kwargs: Any) -> Any:
            made = make(*args, **kwargs)
            if kwargs != follow_module.TAILING_CONSUMER_SETTINGS:
                return made  # a publish's, a checkpoint read's, the test's own
            self.consumers.append(_Counting(made, self))
            return self.consumers[-1]

        monkeypatch.setattr(kafka_client, "consumer", consumer)


class _Counting:
    def __init__(self, consumer: Any, delivered: _Delivered) -> None:
        self._consumer, self._delivered = consumer, delivered
        self.assigned: list[str] = []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = sorted({tp.topic for tp in partitions})
        self._consumer.assign(partitions)

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        messages = self._consumer.consume(*args, **kwargs)
        topic = self._delivered.topic
        self._delivered.count += sum(m.error() is None and m.topic() == topic for m in messages)
        return messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class _Until:
    """A follower's ``stop``: at the top of each round, ``first`` runs once (the test's step while the
    follower stands at that point), then the follower stops once ``done()`` holds. A guard, not a
    timing: after ``WAIT_S`` it stops anyway and ``timed_out`` says so (a failing test ends)."""

    def __init__(self, done: Callable[[], bool], first: Callable[[], None] | None = None) -> None:
        self.done, self.first = done, first
        self.deadline = time.monotonic() + WAIT_S
        self.timed_out = False

    def is_set(self) -> bool:
        if self.first is not None:
            first, self.first = self.first, None
            first()
            self.deadline = time.monotonic() + WAIT_S
        if self.done():
            return True
        self.timed_out = time.monotonic() > self.deadline
        return self.timed_out


WAIT_S = 120


def _log_size(handle: LogStoreTable) -> int:
    return sum(_log_ends(handle).values())  # the tables here are new: their logs start at 0


def _log_ends(handle: LogStoreTable) -> dict[str, int]:
    config = handle.config()
    cons = kafka_client.consumer(handle.kafka_config(config))
    try:
        bounds = kafka_client.partition_offsets(cons, config.topic or "", config.partitions)
    finally:
        cons.close()
    return {str(p): high for p, (_, high) in bounds.items()}


def _run(reader: LogReader, start: Any, stop: _Until, seen: list[LogRecord]) -> list[LogRecord]:
    for record in follow(reader, start, stop=stop, poll_timeout=0.2):
        seen.append(record)
    assert not stop.timed_out, f"the follower did not get there in {WAIT_S} s; it yielded {len(seen)}"
    return seen


# -- from a snapshot (hole 5) ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def snapshot_table(env, spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[LogStoreTable, Any, Any]:
    """Batch 1 committed before any publish, so its snapshot S starts the log at its beginning and
    lists batch 1 in ``logstore.log-included``; S read (files + log) right then; then batch 2."""
    tmp_path = tmp_path_factory.mktemp("follow-snapshot")
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="snap")
    first = writer.write_path(str(write_jsonl(tmp_path / "b1.jsonl", ROWS[0])), 1)
    hybrid = read_hybrid(handle, first.snapshot_id, consistency="consistent")
    assert hybrid.file_rows.num_rows == len(ROWS[0]) and hybrid.log.records == []
    publish_visible_offsets(handle)
    writer.write_path(str(write_jsonl(tmp_path / "b2.jsonl", ROWS[1])), 2)
    publish_visible_offsets(handle)
    return handle, first.snapshot_id, hybrid


@pytest.mark.parametrize("consistency", ["consistent", "eventual"])
def test_a_follower_from_a_snapshot_returns_each_change_once_with_the_snapshots_rows(
    snapshot_table: tuple[LogStoreTable, Any, Any], consistency: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, snapshot_id, hybrid = snapshot_table
    delivered = _Delivered(monkeypatch, handle.config().topic or "")
    total = _log_size(handle)  # S's positions are the log's start: the follower reads all of it
    reader = LogReader(handle, consistency=consistency)
    commit = handle.control().read().committed("snap", 2)
    assert commit is not None
    batch_two = sum(last - first + 1 for first, last in commit.offsets.values())  # an update is -U, +U
    seen: list[LogRecord] = []
    # the follower stops once its consumer delivered the whole log and it yielded batch 2's records
    done = _Until(lambda: delivered.count >= total and len(seen) >= batch_two)
    _run(reader, f"snapshot:{snapshot_id}", done, seen)
    assert delivered.count == total
    assert sorted(r.meta.batch_id for r in seen) == [2] * batch_two  # before: batch 1's records again

    # S read (its files, and its log part: empty), then what the follower yielded
    changes = [((row["id"],), RowKind.INSERT, row) for row in hybrid.file_rows.to_pylist()]
    changes += [((r.row["id"],), r.kind, r.row) for r in [*hybrid.log.records, *seen]]
    folded = apply_retract(changes)
    assert not folded.anomalies
    assert folded.state == table_state(handle)
    token = seen[-1].resume_position
    assert token is not None and token["snapshot"]["id"] == snapshot_id


# -- resume positions (hole 7, third item) ---------------------------------------------------------------

BATCH = 4


def _write_batch(table: LogStoreTable, batch: int) -> list[tuple[int, int]]:
    """One committed batch of writer ``r`` (no Spark): its records in partitions 0 and 1, its ledger
    entry. Returns the records' (partition, offset)."""
    config = table.config()
    ctl = table.control(config)
    epoch = ctl.claim_epoch("r")
    prod = kafka_client.producer(table.kafka_config(config))
    tracker = kafka_client.DeliveryTracker()
    headers = encode_headers(RecordMeta("r", epoch, batch, "0.1"))
    for n in range(BATCH):
        value = b'{"kind":"+I","row":{"id":%d,"name":"n","amount":1}}' % (batch * 100 + n)
        prod.produce(config.topic, value=value, headers=headers, partition=n % 2, on_delivery=tracker)
    kafka_client.flush(prod, tracker, BATCH, "test batch")
    commit = CommitInfo("r", batch, epoch, offsets=dict(tracker.offsets), tasks=frozenset({"0.1"}))
    ctl.record_commit(commit.to_json(), "r", batch)
    return sorted((p, o) for p, (first, last) in tracker.offsets.items() for o in range(first, last + 1))


def test_a_consistent_follower_restarted_from_its_resume_position_yields_each_record_once(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = make_table(env, properties={"log-store.partitions": "2"})
    written = {batch: _write_batch(handle, batch) for batch in (1, 2)}
    publish_visible_offsets(handle)
    written |= {batch: _write_batch(handle, batch) for batch in (3, 4)}  # committed, above the watermark
    delivered = _Delivered(monkeypatch, handle.config().topic or "")
    reader = LogReader(handle, consistency="consistent")

    # run 1 stops once it yielded batches 1-2 and its consumer delivered batches 3-4 (held)
    total = _log_size(handle)
    first: list[LogRecord] = []
    _run(reader, "earliest", _Until(lambda: delivered.count >= total and len(first) >= 2 * BATCH), first)
    assert sorted((r.partition, r.offset) for r in first) == sorted(written[1] + written[2])
    token = first[-1].resume_position
    assert token is not None and set(token) == {"positions"}
    for partition, offset in written[3] + written[4]:  # the committed records held sit above the token
        assert offset >= token["positions"][str(partition)], (partition, offset, token)

    publish_visible_offsets(handle)  # batches 3-4 become visible while no follower runs

    # `latest`: the follower starts at the log's end; batch 5 is written once it stands there
    def write_five() -> None:
        written[5] = _write_batch(handle, 5)
        publish_visible_offsets(handle)

    latest: list[LogRecord] = []
    _run(reader, "latest", _Until(lambda: len(latest) >= BATCH, write_five), latest)
    assert sorted((r.partition, r.offset) for r in latest) == written[5]  # batches 3-4 lost

    # from the token: the follower stops once its resume position is the log's end (it handed out all)
    rest: list[LogRecord] = []
    ends = _log_ends(handle)
    _run(reader, token, _Until(lambda: bool(rest) and rest[-1].resume_position == {"positions": ends}), rest)
    both = [(r.partition, r.offset) for r in [*first, *rest]]
    assert sorted(both) == sorted(o for batch in (1, 2, 3, 4, 5) for o in written[batch])  # each once
    assert len(both) == len(set(both))


def test_an_eventual_follower_restarted_from_its_resume_position_misses_nothing(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At-least-once: it yields records at once, so its position is just past the last one it yielded
    (a record it yields as two changes counts with the second); resumed, it goes on from there."""
    handle = make_table(env, properties={"log-store.partitions": "2"})
    written = {batch: _write_batch(handle, batch) for batch in (1, 2, 3)}  # none published: eventual
    reader = LogReader(handle, consistency="eventual")
    _Delivered(monkeypatch, handle.config().topic or "")
    first: list[LogRecord] = []
    stream = follow(reader, "earliest", stop=_Until(lambda: False), poll_timeout=0.2)
    for record in stream:  # the application stops after 5 records, in the middle of a fetch
        first.append(record)
        if len(first) == 5:
            stream.close()
            break
    token = first[-1].resume_position
    assert token is not None and sum(token["positions"].values()) == 5
    rest: list[LogRecord] = []
    ends = _log_ends(handle)
    _run(reader, token, _Until(lambda: bool(rest) and rest[-1].resume_position == {"positions": ends}), rest)
    both = [(r.partition, r.offset) for r in [*first, *rest]]
    assert sorted(both) == sorted(o for batch in (1, 2, 3) for o in written[batch])
    assert len(both) == len(set(both))


# -- compaction of the control topic (hole 3's follower gap) -----------------------------------------------


def _compacted(table: LogStoreTable) -> bool:
    """True once the cleaner removed batch 1's ledger entry and every watermark record but the last
    (the first one carried the range the first publish settled; the checkpoint tombstoned it)."""
    config = table.config()
    cons = kafka_client.consumer(table.kafka_config(config))
    try:
        low, end = kafka_client.partition_offsets(cons, config.control_topic or "", 1)[0]
        keys = [
            m.key()
            for batch in kafka_client.scan(cons, config.control_topic or "", {0: low}, {0: end})
            for m in batch
            if m.value() is not None
        ]
    finally:
        cons.close()
    moves = [k for k in keys if k.startswith(control.K_WATERMARK_PREFIX.encode())]
    return control.commit_key("w", 1).encode() not in keys and len(moves) == 1


def _append_one(ctl: Any) -> bool:
    ctl.append_fill(1)
    return True


def _compact_quickly(table: LogStoreTable) -> None:
    """Let the broker's log cleaner compact the control topic within seconds (the production setting
    keeps records a day): segments roll every 100 ms, any dirty share is cleaned, tombstones go at once."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    config = table.config()
    settings = {
        "min.compaction.lag.ms": "0",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0",
    }
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, config.control_topic, incremental_configs=entries)
    admin = kafka_client.admin_client(table.kafka_config(config))
    admin.incremental_alter_configs([resource])[resource].result(timeout=30.0)


def test_a_follower_stalled_past_compaction_re_bases_on_the_checkpoint_and_loses_nothing(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from confluent_kafka import TopicPartition

    from tests.integration.test_checkpoints import BATCH as CHECKPOINT_BATCH
    from tests.integration.test_checkpoints import write_batches

    monkeypatch.setattr(control_topic, "CHECKPOINT_EVERY", 20)
    handle = make_table(env, properties={"log-store.partitions": "1"})
    _compact_quickly(handle)
    config = handle.config()
    delivered = _Delivered(monkeypatch, config.topic or "")
    followers: list[follow_module.ControlFollower] = []
    make_follower = follow_module.ControlFollower.of

    def of(reader: LogReader) -> follow_module.ControlFollower:
        followers.append(make_follower(reader))
        return followers[-1]

    monkeypatch.setattr(follow_module.ControlFollower, "of", of)
    reader = LogReader(handle, consistency="consistent")  # its table has no snapshot yet

    def stall_through_compaction() -> None:
        """The follower stands at its first round, its control consumer at offset 0: it stalls (no
        fetch) while batches 1-12 commit, a publish settles them, a checkpoint retires their ledger
        entries and tombstones them, batch 13 commits (a newer epoch), a second publish, the cleaner."""
        (ctl,) = [c for c in delivered.consumers if c.assigned == [config.control_topic]]
        ctl.pause([TopicPartition(config.control_topic, 0)])
        write_batches(handle, 1, 12)
        report = publish_visible_offsets(handle)
        assert report.checkpoint is not None and report.checkpoint["retired"] == 12
        write_batches(handle, 13, 1)
        publish_visible_offsets(handle)
        control_topic = handle.control(config)
        # a record appended after a segment's 100 ms rolls it, and the cleaner takes the rolled ones
        assert kafka_client.wait_until(
            lambda: _append_one(control_topic) and _compacted(handle),
            timeout=120,
        ), "the log cleaner never compacted the control topic"
        ctl.resume([TopicPartition(config.control_topic, 0)])

    seen: list[LogRecord] = []
    _run(
        reader,
        "earliest",
        _Until(lambda: any(r.meta.batch_id == 13 for r in seen), stall_through_compaction),
        seen,
    )
    # batch 13's records come after batches 1-12's in the partition: by now each was released or dropped
    assert sorted({r.meta.batch_id for r in seen}) == list(range(1, 14))  # before: 13 only
    assert len(seen) == len({(r.partition, r.offset) for r in seen}) == 13 * CHECKPOINT_BATCH
    assert followers[0].rebased >= 1


def test_a_control_topic_deleted_and_re_created_under_a_follower_stops_it(env) -> None:
    """Before, a follower skipped the new topic's records as folded already (their offsets are below the
    ones it had read) and its watermark stood still for good, without a word."""
    from airflow_logstore.exceptions import StreamReadError

    handle = make_table(env, properties={"log-store.partitions": "1"})
    config = handle.config()
    ctl = handle.control(config)
    follower = follow_module.ControlFollower.of(LogReader(handle, consistency="consistent"))
    try:
        for writer in ("a", "b", "c"):
            ctl.claim_epoch(writer)
        end = ctl.end_offset()

        def caught_up() -> bool:
            follower.poll(0.2)
            return follower.next == end

        assert kafka_client.wait_until(caught_up, timeout=60)
        assert follower.next == end and sorted(follower.state.epochs) == ["a", "b", "c"]
        kafka_client.delete_topics(handle.kafka_config(config), [ctl.topic])
        ctl.ensure()
        ctl.claim_epoch("d")  # the new topic's first record: at an offset the follower read already
        deadline = time.monotonic() + 60 + follow_module.TOPIC_CHECK_S
        with pytest.raises(StreamReadError, match=f"control topic '{ctl.topic}' was deleted and re-created"):
            while time.monotonic() < deadline:
                follower.poll(0.2)
        assert "d" not in follower.state.epochs
    finally:
        follower.close()
