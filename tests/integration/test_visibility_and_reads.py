"""Snapshot-gated visibility and the read modes on the real broker, Spark and Iceberg."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core import control
from airflow_logstore.core.codec import RowKind
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.log import kafka_client
from airflow_logstore.log.deadletter import dead_letter_topic_name
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import LogReader, read_file, read_hybrid, read_log, run_read
from airflow_logstore.spark.results import parse_result
from airflow_logstore.table.tables import snapshot_commits
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import eventual_log, fold_log, make_table, table_state, write_jsonl

ROWS = [
    [{"id": i, "name": f"v{i}", "amount": i} for i in range(1, 9)],
    [
        {"id": 1, "name": "v1-b", "amount": 100, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 9, "name": "v9", "amount": 9},
    ],
    [
        {"id": 3, "name": "v3-c", "amount": 300, "op": "update"},
        {"id": 9, "op": "delete"},
        {"id": 10, "name": "v10", "amount": 10},
    ],
    [{"id": 1, "op": "delete"}, {"id": 4, "name": "v4-d", "amount": 400, "op": "update"}],
]


def _plain(state: dict[Any, dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    return {row["id"]: (row["name"], row["amount"]) for row in state.values()}


def _write_all(spark: Any, handle: Any, tmp_path: Path, writer_id: str = "vis") -> list[Any]:
    writer = open_writer(spark, str(handle.name), writer_id=writer_id)
    return [
        writer.write_path(str(write_jsonl(tmp_path / f"{writer_id}{n}.jsonl", rows)), n)
        for n, rows in enumerate(ROWS, start=1)
    ]


@pytest.fixture(scope="module")
def table_with_crash(env, spark, tmp_path_factory: pytest.TempPathFactory):
    """Batch 1 committed, batch 2 only as a crashed attempt's records (killed after its log flush).

    Shared by the tests below, in file order: the eventual reader's test only reads, the consistent
    reader's test retries batch 2, and the normalize test reads the retried table (retrying it first
    when it runs alone). One spark-submit driver for the three, the crashed one: batch 1 and the retry
    are writer attempts in the test's session (:func:`_retry`).
    """
    tmp_path = tmp_path_factory.mktemp("vis-crash")
    handle = make_table(env)
    b1 = write_jsonl(tmp_path / "b1.jsonl", ROWS[0])
    b2 = write_jsonl(tmp_path / "b2.jsonl", ROWS[1])
    base = ["--table", str(handle.name), "--writer-id", "vis-crash"]
    open_writer(spark, str(handle.name), writer_id="vis-crash").write_path(str(b1), 1)
    crashed = env.run_job(
        "dual_write.py",
        [*base, "--input", str(b2), "--batch-id", "2"],
        extra_env={"LOGSTORE_KILL_AT": "write:after-log:2"},
    )
    assert crashed.returncode in (-9, 137)
    return handle, handle.control().read().latest_epoch("vis-crash"), base, b2


def test_eventual_reader_sees_records_before_the_commit(env, table_with_crash) -> None:
    handle, dead_epoch, _, _ = table_with_crash
    records = eventual_log(handle).records
    uncommitted = [r for r in records if r.meta.batch_id == 2]
    assert len(uncommitted) == 4 and all(r.meta.epoch == dead_epoch for r in uncommitted)
    assert handle.control().read().committed("vis-crash", 2) is None


def _retry(spark, handle, path: Path) -> int:
    """Batch 2 again, by a new attempt of the crashed writer in the test's session (a new epoch, as a
    retried job's); the session's cached table metadata is refreshed first (the crashed driver wrote
    behind its back). Returns the attempt's epoch."""
    spark.catalog.refreshTable(handle.spark_name())
    result = open_writer(spark, str(handle.name), writer_id="vis-crash").write_path(str(path), 2)
    assert not result.skipped
    return result.epoch


def test_consistent_reader_is_gated_by_commit_and_publish(env, spark, table_with_crash) -> None:
    handle, dead_epoch, _, b2 = table_with_crash
    # Before the retry: batch 2 exists only as the dead attempt's records.
    eventual = eventual_log(handle)
    assert any(r.meta.batch_id == 2 and r.meta.epoch == dead_epoch for r in eventual.records)
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent")
    assert [r for r in consistent.records if r.meta.batch_id == 2] == []
    assert consistent.report.by_decision.get("committed") == len(ROWS[0])

    epoch = _retry(spark, handle, b2)
    before_publish = read_log(handle, consistency="consistent")
    assert [r for r in before_publish.records if r.meta.batch_id == 2] == []  # committed, not yet published
    assert before_publish.report.not_yet_visible > 0

    report = publish_visible_offsets(handle)
    assert report.advanced and f"vis-crash/2/{epoch}" in report.newly_visible
    after = read_log(handle, consistency="consistent")
    batch_2 = [r for r in after.records if r.meta.batch_id == 2]
    assert {r.meta.epoch for r in batch_2} == {epoch} and len(batch_2) == 4  # exactly once
    assert after.report.by_decision.get("redundant") == 4  # the dead attempt's copy is filtered
    assert _plain(fold_log(after, ["id"])) == _plain(table_state(handle))


def test_watermark_is_monotonic_and_idempotent(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    _write_all(spark, handle, tmp_path)
    first = publish_visible_offsets(handle)
    again = publish_visible_offsets(handle)
    assert first.advanced and not again.advanced
    assert again.watermark_after == first.watermark_after
    # An older watermark published later (a late, stale publisher) never moves it backwards.
    handle.control().append(control.K_WATERMARK, {"offsets": {p: 0 for p in first.watermark_after}})
    state = handle.control().read()
    assert {str(p): o for p, o in state.watermark.items()} == first.watermark_after


def test_hybrid_equals_file_for_every_split_point(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    results = _write_all(spark, handle, tmp_path)
    publish_visible_offsets(handle)
    final = _plain(table_state(handle))
    for result in [None, *results]:
        snapshot = result.snapshot_id if result else None
        if result is None:  # split before any data: the hybrid read is the whole log
            hybrid_log = read_log(handle, consistency="consistent")
            assert _plain(fold_log(hybrid_log, ["id"])) == final
            continue
        hybrid = read_hybrid(handle, snapshot, consistency="consistent")
        state = {(row["id"],): row for row in hybrid.file_rows.to_pylist()}
        for record in hybrid.log.records:
            key = (record.row["id"],)
            if record.kind.is_addition:
                state[key] = record.row
            else:
                assert state.pop(key, None) == record.row  # no gap, no overlap: the retracted row is there
        assert _plain(state) == final, f"split at snapshot {snapshot}"


def test_start_positions_and_changelog_modes(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    _write_all(spark, handle, tmp_path)
    everything = eventual_log(handle)
    latest = read_log(handle, "latest", consistency="eventual")
    assert latest.records == []
    middle = everything.records[len(everything.records) // 2]
    by_time = read_log(handle, f"timestamp:{middle.timestamp_ms}", consistency="eventual")
    # Kafka's rule: each partition from its first record stamped at or after the time. Records after it
    # may carry earlier stamps (each Spark task stamps its own records), and they are read too.
    starts: dict[int, int] = {}
    for record in sorted(everything.records, key=lambda r: (r.partition, r.offset)):
        if record.timestamp_ms >= middle.timestamp_ms:
            starts.setdefault(record.partition, record.offset)
    expected = sorted(
        (r.partition, r.offset)
        for r in everything.records
        if r.partition in starts and r.offset >= starts[r.partition]
    )
    assert expected and sorted((r.partition, r.offset) for r in by_time.records) == expected
    second = next(c for c in snapshot_commits(handle.load()) if c.batch_id == 2)
    from_second = read_log(handle, f"snapshot:{second.snapshot_id}", consistency="eventual")
    assert {r.meta.batch_id for r in from_second.records} == {3, 4}

    append_only = read_log(handle, consistency="eventual", changelog_mode="append-only")
    assert {r.kind for r in append_only.records} == {RowKind.INSERT}
    counted = sum(append_only.report.skipped_kinds.values())
    assert counted + len(append_only.records) == len(everything.records)
    assert append_only.report.skipped_kinds["-D"] == 3
    hinted = LogReader(
        handle,
        options={
            "log.consumer.changelog.modes": "append-only",
            "log-store.consistency-guarantee.enabled": "false",
        },
    ).read()
    assert len(hinted.records) == len(append_only.records)


def _dead_letters(handle: Any, topic: str) -> list[dict[str, Any]]:
    """Every entry of a dead-letter topic."""
    cons = kafka_client.consumer(handle.kafka_config())
    try:
        (low, high) = kafka_client.partition_offsets(cons, topic, 1)[0]
        return [
            json.loads(m.value())
            for batch in kafka_client.scan(cons, topic, {0: low}, {0: high})
            for m in batch
        ]
    finally:
        cons.close()


def test_undecodable_records_are_dead_lettered_and_counted(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="dlq")
    writer.write_path(str(write_jsonl(tmp_path / "a.jsonl", ROWS[0][:2])), 1)
    topic = handle.config().topic
    producer = kafka_client.producer(handle.kafka_config())
    producer.produce(topic, key=b"x", value=b"not ours", partition=0)
    producer.produce(
        topic,
        key=b"y",
        value=b'{"kind":"+I","row":{}}',
        partition=1,
        headers=[("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"one"), ("batch-id", b"1")],
    )
    producer.produce(
        topic,
        key=b"z",
        value=b'{"kind":"+I","row":{"id":',
        partition=2,
        headers=[("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"1"), ("batch-id", b"1")],
    )
    assert producer.flush(30) == 0
    writer.write_path(str(write_jsonl(tmp_path / "b.jsonl", ROWS[0][2:4])), 2)

    read = LogReader(handle, consistency="eventual").read()
    assert read.report.dead_lettered == 3 and len(read.records) == 4
    assert read.report.dead_letter_topic == dead_letter_topic_name(topic)
    entries = _dead_letters(handle, read.report.dead_letter_topic)
    assert sorted(e["reason"][:30] for e in entries) == sorted(
        [
            "record has no LogStore headers"[:30],
            "header 'epoch' is not an integ"[:30],
            "value is not JSON (JSONDecodeE"[:30],
        ]
    )
    assert all("offset" in e and "partition" in e for e in entries)
    # the Spark read job sends the same records to the same topic (from its driver, wherever it runs)
    done = env.run_job(
        "read_table.py", ["--table", str(handle.name), "--mode", "log", "--consistency", "eventual"]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert parse_result(done.stdout)["dead_lettered"] == 3
    again = _dead_letters(handle, read.report.dead_letter_topic)
    assert len(again) == 6
    assert {(e["partition"], e["offset"]) for e in again} == {(e["partition"], e["offset"]) for e in entries}
    publish = publish_visible_offsets(handle)
    # Two have no readable headers; the third claims a writer that never claimed an epoch: foreign.
    assert publish.undecodable == 2 and publish.advanced and publish.blocked_by == {}
    consistent = read_log(handle, consistency="consistent")
    assert len(consistent.records) == 4


def test_normalize_sees_each_change_once(env, spark, table_with_crash, tmp_path: Path) -> None:
    handle, _, _, b2 = table_with_crash
    if handle.control().read().committed("vis-crash", 2) is None:  # run alone: the retry is not done yet
        _retry(spark, handle, b2)
    assert handle.control().read().committed("vis-crash", 2) is not None
    plain = eventual_log(handle)
    normalized = eventual_log(handle, normalize=True)
    assert normalized.report.normalized_dropped >= 3  # the retried batch repeats the dead attempt's changes
    assert len(normalized.records) < len(plain.records)
    state: dict[int, dict[str, Any]] = {}
    for record in normalized.records:
        if record.kind in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            assert state.get(record.row["id"]) != record.row  # never the same change twice
            state[record.row["id"]] = record.row
        elif record.kind is RowKind.DELETE:
            state.pop(record.row["id"])
    assert {k: (v["name"], v["amount"]) for k, v in state.items()} == _plain(table_state(handle))


def test_run_read_modes_write_jsonl(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    _write_all(spark, handle, tmp_path)
    publish_visible_offsets(handle)
    out = tmp_path / "hybrid.jsonl"
    summary = run_read(
        handle,
        mode="hybrid",
        consistency="consistent",
        output_path=str(out),
        snapshot_id=sorted(handle.load().snapshots(), key=lambda s: s.sequence_number)[1].snapshot_id,
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["file_rows"] + summary["log_records"] == len(lines)
    assert {line["_source"] for line in lines} == {"file", "log"}
    assert run_read(handle, mode="file")["rows"] == read_file(handle).num_rows


def test_spark_read_job_matches_python_reader(env, spark, tmp_path: Path) -> None:
    """The read job's three modes against the Python reader. The log mode runs as the job does, in a
    driver of its own (spark-submit of ``read_table.py``; its rows compared one by one); the file and
    hybrid modes run the job's :func:`~airflow_logstore.read.read_job.run` in this session, built by the
    same ``build_spark_session`` as a job's and given the catalog and Kafka settings the same way
    (``job_settings``): only the modes differ, and a driver start costs ~1 minute on 2 busy cores."""
    from airflow_logstore.read.read_job import parser, run
    from airflow_logstore.spark.jobconf import job_settings, spark_conf_dict

    handle = make_table(env)
    _write_all(spark, handle, tmp_path)
    publish_visible_offsets(handle)
    spark.catalog.refreshTable(handle.spark_name())
    catalog, kafka_extra = job_settings(spark_conf_dict(spark))
    for mode in ("file", "log", "hybrid"):
        out = tmp_path / f"spark_{mode}"
        args = ["--table", str(handle.name), "--mode", mode, "--consistency", "consistent"]
        args += ["--output", str(out)]
        if mode == "log":
            done = env.run_job("read_table.py", args)
            assert done.returncode == 0, done.stderr[-2000:]
            result = parse_result(done.stdout)
        else:
            result = run(spark, parser().parse_args(args), catalog, kafka_extra)
        if mode == "file":
            assert result["file_rows"] == read_file(handle).num_rows
            assert spark.read.parquet(str(out)).count() == result["file_rows"]
        if mode == "log":
            python_read = read_log(handle, consistency="consistent")
            assert result["log_records"] == len(python_read.records) and result["dead_lettered"] == 0
            rows = spark.read.parquet(str(out)).orderBy("_partition", "_offset").collect()
            assert [(r["_partition"], r["_offset"], r["_kind"], r["id"]) for r in rows] == [
                (r.partition, r.offset, r.kind.value, r.row["id"])
                for r in sorted(python_read.records, key=lambda r: (r.partition, r.offset))
            ]
        if mode == "hybrid":
            hybrid = read_hybrid(handle, consistency="consistent")
            assert result["file_rows"] == hybrid.file_rows.num_rows
            assert result["log_records"] == len(hybrid.log.records)


def test_snapshot_commit_trigger_fires_on_the_batch_not_on_compaction(env, spark, tmp_path: Path) -> None:
    from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger

    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="sensed")
    first = writer.write_path(str(write_jsonl(tmp_path / "a.jsonl", ROWS[0])), 1)
    writer.write_path(str(write_jsonl(tmp_path / "b.jsonl", ROWS[1])), 2)
    spark.sql(
        f"CALL logstore.system.rewrite_data_files(table => '{handle.name}', "
        "options => map('min-input-files','1','rewrite-all','true'))"
    )
    latest = handle.load().current_snapshot()
    assert CommitInfo.from_summary(latest.summary.additional_properties) is None  # a compaction snapshot

    async def first_event(trigger: SnapshotCommitTrigger) -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("trigger ended without an event")

    # Only the compaction snapshot is newer than the current one: the trigger must not fire. Its clock
    # is the test's: each wait moves it on, so it times out after exactly the polls its settings give.
    waiting = SnapshotCommitTrigger(
        table=str(handle.name), after_snapshot_id=latest.snapshot_id, poll_interval=0.5, timeout=1.0
    )
    classpath, kwargs = waiting.serialize()
    assert classpath == "airflow_logstore.triggers.snapshot_commit.SnapshotCommitTrigger"
    rebuilt = SnapshotCommitTrigger(**kwargs)
    now = [0.0]

    async def advance(seconds: float) -> None:
        now[0] += seconds

    rebuilt.clock, rebuilt.sleep = (lambda: now[0]), advance
    event = asyncio.run(first_event(rebuilt))
    assert event["status"] == "timeout" and event["polls"] == 3  # at 0, 0.5 and 1.0 s of its clock

    # A batch committed while the trigger waits: it fires on exactly that snapshot. Pause point: the
    # trigger's first wait, after a poll that found nothing, holds until the batch is committed.
    async def wait_and_write() -> dict[str, Any]:
        trigger = SnapshotCommitTrigger(
            table=str(handle.name), writer_id="sensed", batch_id=3, poll_interval=0.2, timeout=300
        )
        looked, committed = asyncio.Event(), asyncio.Event()

        async def hold(seconds: float) -> None:
            looked.set()
            await committed.wait()

        trigger.sleep = hold
        task = asyncio.ensure_future(first_event(trigger))
        await asyncio.wait_for(looked.wait(), 120)
        assert not task.done()  # it looked once, found nothing and waits
        await asyncio.to_thread(writer.write_path, str(write_jsonl(tmp_path / "c.jsonl", ROWS[2])), 3)
        committed.set()
        return await asyncio.wait_for(task, 120)

    fired = asyncio.run(wait_and_write())
    assert fired["status"] == "success" and fired["polls"] == 2
    commit = fired["commit"]
    assert commit["batch_id"] == 3 and commit["writer_id"] == "sensed" and commit["epoch"] == writer.epoch
    assert commit["snapshot_id"] == handle.load().current_snapshot().snapshot_id
    assert commit["offsets"] and first.snapshot_id != commit["snapshot_id"]
    done = asyncio.run(
        first_event(SnapshotCommitTrigger(table=str(handle.name), batch_id=1, poll_interval=5))
    )
    assert done["commit"]["snapshot_id"] == first.snapshot_id and done["polls"] == 1  # no wait at all


class _ConsistentFollowerGate:
    """A pause point in a consistent follower's loop, as its ``stop`` object: the follower checks
    ``is_set()`` at the top of every round, after it buffered or released what it consumed; once its
    consumer has delivered ``expected`` log records, that check holds until ``resume`` is set."""

    def __init__(self, topic: str, expected: int) -> None:
        import threading

        self.topic, self.expected, self.delivered = topic, expected, 0
        self.held, self.resume, self.stop = threading.Event(), threading.Event(), threading.Event()

    def counting(self, consumer: Any) -> Any:
        gate = self

        class Counting:
            def consume(self, *args: Any, **kwargs: Any) -> Any:
                messages = consumer.consume(*args, **kwargs)
                gate.delivered += sum(m.error() is None and m.topic() == gate.topic for m in messages)
                return messages

            def __getattr__(self, name: str) -> Any:
                return getattr(consumer, name)

        return Counting()

    def is_set(self) -> bool:
        if self.delivered >= self.expected and not self.held.is_set():
            self.held.set()
            assert self.resume.wait(120), "the test never resumed the follower"
        return self.stop.is_set()


def test_followers_eventual_at_once_consistent_after_publish(
    env, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from airflow_logstore.read.follow import follow

    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="follow")
    seen: dict[str, list[Any]] = {"eventual": [], "consistent": []}
    got_all = {"eventual": threading.Event(), "consistent": threading.Event()}
    gate = _ConsistentFollowerGate(handle.config().topic or "", len(ROWS[0]))
    make_consumer = kafka_client.consumer

    def consumer(*args: Any, **kwargs: Any) -> Any:
        made = make_consumer(*args, **kwargs)
        return gate.counting(made) if threading.current_thread().name == "consistent" else made

    monkeypatch.setattr(kafka_client, "consumer", consumer)

    def run(kind: str) -> None:
        stop = gate if kind == "consistent" else gate.stop
        for record in follow(LogReader(handle, consistency=kind), "earliest", stop=stop):
            seen[kind].append(record)
            if len(seen[kind]) >= len(ROWS[0]):
                got_all[kind].set()

    threads = [
        threading.Thread(target=run, args=(mode,), name=mode, daemon=True)
        for mode in ("eventual", "consistent")
    ]
    for thread in threads:
        thread.start()
    try:
        writer.write_path(str(write_jsonl(tmp_path / "f1.jsonl", ROWS[0])), 1)
        assert got_all["eventual"].wait(60)
        assert gate.held.wait(60), "the consistent follower never received the batch"
        assert seen["consistent"] == []  # it has every record of the committed batch, not yet published
        publish_visible_offsets(handle)
        gate.resume.set()
        assert got_all["consistent"].wait(60)
    finally:
        gate.resume.set()
        gate.stop.set()
        for thread in threads:
            thread.join(10)
    assert len(seen["eventual"]) == len(ROWS[0])
    assert sorted(r.row["id"] for r in seen["consistent"]) == sorted(r["id"] for r in ROWS[0])
    assert all(r.decision is not None and r.decision.value == "committed" for r in seen["consistent"])
