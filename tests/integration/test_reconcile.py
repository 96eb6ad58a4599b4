"""Failover reconciliation on the real broker, Spark and Iceberg: reversals, idempotence, leases, retention.

Writer failovers are real: a writer process SIGKILLed at a kill point (``LOGSTORE_KILL_AT``) or at a
random moment, or an attempt fenced by a newer epoch of the same writer (it produced its records, then
found a newer epoch and stopped before committing — what a zombie attempt does).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.cli import build_parser
from airflow_logstore.core import codec, control
from airflow_logstore.core import reconcile as core
from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.core.codec import RecordType
from airflow_logstore.core.visibility import Decision, classify
from airflow_logstore.exceptions import FencedError
from airflow_logstore.log import kafka_client
from airflow_logstore.log.deadletter import dead_letter_topic_name

# imported at collection: importing Airflow binds its log handler to the stdout of that moment
from airflow_logstore.operators.reconcile import LogStoreReconcileOperator
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import LogRead, read_log
from airflow_logstore.reconcile import scan as reconcile_scan
from airflow_logstore.reconcile.reconciler import LEASE_NAME, PythonEngine, ReconcileReport, reconcile
from airflow_logstore.spark.results import parse_result
from airflow_logstore.table.tables import LogStoreTable, create_table, merged_state, show_table
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.environment import REPO_ROOT
from logstore_dev.testing.tables import fold_log, log_values, table_state, write_jsonl
from tests.pause_files import wait_reached

SCHEMA = "id int, name string, amount long"
BATCHES: list[list[dict[str, Any]]] = [
    [{"id": i, "name": f"n{i}", "amount": i} for i in range(1, 13)],
    [{"id": i, "name": f"b{i}", "amount": 10 * i, "op": "update"} for i in range(1, 7)]
    + [{"id": 7, "op": "delete"}, {"id": 8, "op": "delete"}, {"id": 13, "name": "n13", "amount": 13}],
    [
        {"id": 1, "name": "c1", "amount": 100, "op": "update"},
        {"id": 2, "name": "c2", "amount": 200, "op": "update"},
        {"id": 13, "op": "delete"},
        {"id": 7, "name": "again7", "amount": 7},
    ],
    [
        {"id": 1, "name": "d1", "amount": 1000, "op": "update"},
        {"id": 2, "op": "delete"},
        {"id": 8, "name": "again8", "amount": 8},
    ],
    [
        {"id": 1, "name": "e1", "amount": 1, "op": "update"},
        {"id": 3, "name": "e3", "amount": 3, "op": "update"},
    ],
]


# --- helpers ---------------------------------------------------------------------------------------


def new_table(env: Any, prefix: str, **properties: str) -> LogStoreTable:
    name = env.unique(prefix)
    handle = LogStoreTable.open(f"rec.{name}")
    create_table(
        handle, SCHEMA, primary_key=["id"], properties=env.log_properties(f"{name}_log", **properties)
    )
    return handle


def expected(*batches: list[dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in batches:
        full = [{"name": None, "amount": None, **row} for row in rows]
        state = apply_final(state, plan_batch(full, ["id"], state).final)
    return {key[0]: (row["name"], row["amount"]) for key, row in state.items()}


def plain(state: dict[Any, dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    return {row["id"]: (row["name"], row["amount"]) for row in state.values()}


def assert_views_agree(handle: LogStoreTable, want: dict[int, tuple[Any, Any]]) -> LogRead:
    """Iceberg == want; consistent reader (after publish) == want; eventual + reversals == want (2 ways)."""
    assert plain(table_state(handle)) == want
    publish_visible_offsets(handle)
    assert plain(fold_log(read_log(handle, consistency="consistent"), ["id"])) == want
    eventual = read_log(handle, consistency="eventual")
    assert plain(fold_log(eventual, ["id"])) == want, "eventual reader, retract semantics"
    assert plain(fold_log(eventual, ["id"], "upsert")) == want, "eventual reader, upsert semantics"
    return eventual


def reversals(read: LogRead) -> Counter[tuple[int, int]]:
    found: Counter[tuple[int, int]] = Counter()
    for record in read.records:
        if record.meta.record_type is RecordType.REVERSAL:
            assert record.meta.reverses is not None
            found[record.meta.reverses] += 1
    return found


def data_records(read: LogRead, *, batch: int, epochs: set[int]) -> set[tuple[int, int]]:
    return {
        (r.partition, r.offset)
        for r in read.records
        if r.meta.record_type is RecordType.DATA and r.meta.batch_id == batch and r.meta.epoch in epochs
    }


def write_args(handle: LogStoreTable, writer: str, path: Path, batch: int, *extra: str) -> list[str]:
    return [
        "--table",
        str(handle.name),
        "--writer-id",
        writer,
        "--input",
        str(path),
        "--batch-id",
        str(batch),
        *extra,
    ]


def crash_writer(env: Any, handle: LogStoreTable, writer: str, path: Path, batch: int, point: str) -> int:
    """Run the writer as its own process, killed at ``point`` (``LOGSTORE_KILL_AT``); return the epoch
    that died."""
    done = env.run_job(
        "dual_write.py", write_args(handle, writer, path, batch), extra_env={"LOGSTORE_KILL_AT": point}
    )
    assert done.returncode in (-9, 137), done.stderr[-3000:]
    epoch = handle.control().read().latest_epoch(writer)
    assert epoch is not None
    return epoch


def fenced_attempts(
    spark: Any, handle: LogStoreTable, writer: str, path: Path, batch: int, dead: int
) -> list[int]:
    """``dead`` attempts of a batch that produce their records and are fenced before committing, then
    the attempt that commits; return the dead epochs."""
    writers = [writer_for(spark, handle, writer) for _ in range(dead + 1)]
    for attempt in writers[:-1]:
        with pytest.raises(FencedError):
            attempt.write_path(str(path), batch)
    result = writers[-1].write_path(str(path), batch)
    assert not result.skipped and result.snapshot_id is not None
    return [w.epoch for w in writers[:-1]]


def writer_for(spark: Any, handle: LogStoreTable, writer: str) -> Any:
    """A new in-process writer attempt (a new epoch). The session's catalog caches table metadata: it is
    refreshed first, since writer processes of these tests commit behind its back."""
    spark.catalog.refreshTable(handle.spark_name())
    return open_writer(spark, str(handle.name), writer_id=writer)


def control_state(handle: LogStoreTable) -> control.ControlState:
    return handle.control().read()


def assert_reversals_in_format(
    handle: LogStoreTable, read: LogRead, dead: set[tuple[int, int]], data_format: str
) -> None:
    """Every record of the log is in ``data_format``, and the reversal of each ``dead`` record is its
    original's row bytes with the reversed kind, in the same format."""
    values = log_values(handle)
    assert {codec.decode_change(value)[0].value for value in values.values()} == {data_format}
    for position in dead:
        reversal = next(r for r in read.records if r.meta.reverses == position)
        assert values[(reversal.partition, reversal.offset)] == codec.reversed_value(values[position])


# --- one failover ----------------------------------------------------------------------------------


def test_one_failover_reversed_exactly_and_eventual_reader_converges(env, spark, tmp_path: Path) -> None:
    """In ``debezium-json``: the reversals (and reasserts) are written in the table's format. The same
    failover in ``json`` (the default format) is the next test's, with the same check of the bytes."""
    handle = new_table(env, "one", **{"log-store.data-format": "debezium-json"})
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:2], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    dead_epoch = crash_writer(env, handle, "w", paths[1], 2, "write:after-log:2")
    restarted = writer_for(spark, handle, "w").write_path(str(paths[1]), 2)  # same writer, same batch
    assert not restarted.skipped and restarted.epoch > dead_epoch

    before = read_log(handle, consistency="eventual")
    dead = data_records(before, batch=2, epochs={dead_epoch})
    assert len(dead) == 15  # 6 updates (-U/+U), 2 deletes, 1 insert
    report = reconcile(handle)
    assert report.status == "reconciled" and report.progress_recorded
    assert report.redundant == report.reversed == len(dead)
    assert report.redundant_by_attempt == {f"w/2/{dead_epoch}": len(dead)}
    assert report.redundant_by_writer == {"w": len(dead)} and report.redundant_by_batch == {"w/2": len(dead)}
    assert report.reasserted == 9  # one pair per key the retry changed again after the dead attempt
    assert report.skipped_in_flight == 0 and report.dead_lettered == 0 and report.gaps == []
    assert report.positions_after == report.safe_point
    after = assert_views_agree(handle, expected(*BATCHES[:2]))
    assert reversals(after) == Counter({record: 1 for record in dead})  # exactly the dead attempt, once

    assert_reversals_in_format(handle, after, dead, "debezium-json")

    again = reconcile(handle)
    assert (again.scanned, again.reversed, again.reasserted) == (len(dead) + 18, 0, 0)  # only our output
    assert reversals(read_log(handle, consistency="eventual")) == Counter({record: 1 for record in dead})


def test_an_attempt_in_flight_is_kept_pending_then_reversed_by_one_rescan(env, spark, tmp_path: Path) -> None:
    """A writer killed after producing leaves its records in flight (its epoch is still the latest): the
    reconciler's position moves on and the attempt is kept pending; runs while it waits scan only new
    records; once the restart commits the batch, one run scans again from the attempt's first record
    and reverses it; the next starts after it again."""
    handle = new_table(env, "pending")
    paths = [write_jsonl(tmp_path / f"p{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:3], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    dead_epoch = crash_writer(env, handle, "w", paths[1], 2, "write:after-log:2")
    dead = data_records(read_log(handle, consistency="eventual"), batch=2, epochs={dead_epoch})
    first = reconcile(handle)
    assert first.skipped_in_flight == len(dead) == 15 and first.reversed == 0
    assert first.positions_after == first.safe_point  # not pinned at the records in flight
    pending = [attempt for attempts in first.pending.values() for attempt in attempts]
    assert {(a[0], a[1], a[2]) for a in pending} == {("w", dead_epoch, 2)}
    assert {(int(p), a[5]) for p, attempts in first.pending.items() for a in attempts} <= dead
    assert sum(a[6] - a[5] + 1 for a in pending) >= len(dead)

    waiting = reconcile(handle)  # still in flight: nothing scanned again
    assert waiting.scanned == 0 and waiting.pending == first.pending and waiting.rescanned_from == {}

    restarted = writer_for(spark, handle, "w").write_path(str(paths[1]), 2)
    assert not restarted.skipped
    decided = reconcile(handle)
    firsts = {p: min(a[5] for a in attempts) for p, attempts in first.pending.items()}
    assert decided.rescanned_from == firsts and decided.pending == {}
    assert decided.redundant == decided.reversed == len(dead)
    agreed = assert_views_agree(handle, expected(*BATCHES[:2]))
    assert reversals(agreed) == Counter({r: 1 for r in dead})
    assert_reversals_in_format(handle, agreed, dead, "json")  # the table's format: the default

    writer_for(spark, handle, "w").write_path(str(paths[2]), 3)
    after = reconcile(handle)
    assert after.rescanned_from == {} and after.reversed == 0
    assert after.positions_before == decided.positions_after
    assert_views_agree(handle, expected(*BATCHES[:3]))


# --- several failovers, updates and deletes of the same keys ---------------------------------------


def test_several_failovers_in_a_row_with_updates_and_deletes(env, spark, tmp_path: Path) -> None:
    handle = new_table(env, "several")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES, start=1)]
    writer = "w"
    writer_for(spark, handle, writer).write_path(str(paths[0]), 1)
    dead_2 = crash_writer(env, handle, writer, paths[1], 2, "write:after-log:2")
    writer_for(spark, handle, writer).write_path(str(paths[1]), 2)  # the restart
    middle = reconcile(handle)
    assert middle.reversed == 15 and middle.redundant_by_epoch == {f"{writer}/{dead_2}": 15}

    crash_writer(env, handle, writer, paths[2], 3, "write:after-commit:3")  # committed, ledger not written
    retry = writer_for(spark, handle, writer).write_path(str(paths[2]), 3)
    assert retry.skipped  # nothing redundant: the crash came after the commit
    dead_4 = fenced_attempts(spark, handle, writer, paths[3], 4, dead=2)  # two failovers of one batch
    dead_5 = fenced_attempts(spark, handle, writer, paths[4], 5, dead=1)

    log_before = read_log(handle, consistency="eventual")
    dead = data_records(log_before, batch=4, epochs=set(dead_4)) | data_records(
        log_before, batch=5, epochs=set(dead_5)
    )
    assert len(dead) == 2 * 4 + 4  # batch 4: -U/+U, -D, +I per attempt; batch 5: two -U/+U
    final = reconcile(handle)
    assert final.reversed == len(dead) and final.already_reversed == 0
    assert set(final.redundant_by_attempt) == {
        f"{writer}/{b}/{e}" for b, es in ((4, dead_4), (5, dead_5)) for e in es
    }
    log_after = assert_views_agree(handle, expected(*BATCHES))
    found = reversals(log_after)
    assert set(found) == dead | data_records(log_before, batch=2, epochs={dead_2})
    assert max(found.values()) == 1
    assert reconcile(handle).reversed == 0


# --- idempotence: re-runs, a crash between the reversals and the progress record -------------------


def test_reconcile_killed_between_reversals_and_progress_then_rerun(env, spark, tmp_path: Path) -> None:
    handle = new_table(env, "killed")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:3], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    dead_2 = fenced_attempts(spark, handle, "w", paths[1], 2, dead=1)
    writer_for(spark, handle, "w").write_path(str(paths[2]), 3)
    dead = data_records(read_log(handle, consistency="eventual"), batch=2, epochs=set(dead_2))

    command = [
        sys.executable,
        "-m",
        "airflow_logstore.cli",
        "reconcile",
        str(handle.name),
        "--lease-ttl",
        "600",  # certainly live when the next run comes, however slow the machine
    ]
    killed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LOGSTORE_KILL_AT": "reconcile:output-flushed"},
    )
    assert killed.returncode in (-9, 137), killed.stderr[-3000:]
    state = control_state(handle)
    assert state.reconcile_progress is None  # killed before its progress record
    written = reversals(read_log(handle, consistency="eventual"))
    assert set(written) == dead  # ... but after its reversals were flushed

    held = reconcile(handle)  # the dead run's lease is still live
    assert held.status == "lease-held" and held.reversed == 0
    assert held.lease_holder is not None
    # its lease ends (expiry itself, judged by the broker's timestamps, is unit-tested without waiting)
    handle.control().append(control.lease_key(LEASE_NAME), {"release": held.lease_holder["lease_id"]})
    rerun = reconcile(handle)
    assert rerun.status == "reconciled" and rerun.reversed == 0 and rerun.already_reversed == len(dead)
    assert rerun.reasserted == 0 and rerun.progress_recorded
    log_after = assert_views_agree(handle, expected(*BATCHES[:3]))
    assert reversals(log_after) == Counter({record: 1 for record in dead})  # nothing twice, nothing missed


def test_dry_run_and_scan_workers_report_the_same_and_write_nothing(env, spark, tmp_path: Path) -> None:
    handle = new_table(env, "dry")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:2], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    fenced_attempts(spark, handle, "w", paths[1], 2, dead=1)
    config = handle.config()
    cons = kafka_client.consumer(handle.kafka_config(config))
    try:
        log_before = kafka_client.partition_offsets(cons, config.topic or "", config.partitions)
        control_before = kafka_client.partition_offsets(cons, config.control_topic or "", 1)
        dry = reconcile(handle, dry_run=True)
        assert kafka_client.partition_offsets(cons, config.topic or "", config.partitions) == log_before
        assert kafka_client.partition_offsets(cons, config.control_topic or "", 1) == control_before
    finally:
        cons.close()
    assert dry.status == "dry-run" and dry.dry_run and dry.lease_id is None and not dry.progress_recorded
    in_workers = reconcile(handle, dry_run=True, engine=PythonEngine(workers=2, parallel_min_records=0))
    in_jvm = reconcile(handle, dry_run=True, engine=PythonEngine(scanner="jvm"))
    real = reconcile(handle)
    for name in ("scanned", "redundant", "reversed", "reasserted", "redundant_by_attempt", "positions_after"):
        assert getattr(in_workers, name) == getattr(real, name), name
        assert getattr(in_jvm, name) == getattr(real, name), name
    assert in_jvm.by_decision == real.by_decision
    for name in ("scanned", "redundant", "reversed", "reasserted", "redundant_by_attempt", "positions_after"):
        assert getattr(dry, name) == getattr(real, name), name


# --- the lease: two reconcilers at once ------------------------------------------------------------


def _failover_table(
    env: Any, spark: Any, tmp_path: Path, prefix: str
) -> tuple[LogStoreTable, set[tuple[int, int]]]:
    handle = new_table(env, prefix)
    paths = [
        write_jsonl(tmp_path / f"{prefix}{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:2], start=1)
    ]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    dead_epochs = fenced_attempts(spark, handle, "w", paths[1], 2, dead=1)
    return handle, data_records(read_log(handle, consistency="eventual"), batch=2, epochs=set(dead_epochs))


def test_two_reconcilers_at_once_only_one_reverses(env, spark, tmp_path: Path) -> None:
    handle, dead = _failover_table(env, spark, tmp_path, "two")
    has_lease, other_done = threading.Event(), threading.Event()
    results: dict[str, ReconcileReport] = {}

    def pause(stage: str) -> None:
        if stage == "lease-acquired":
            has_lease.set()
            assert other_done.wait(120)

    first = threading.Thread(target=lambda: results.setdefault("first", reconcile(handle, stage_hook=pause)))
    first.start()
    assert has_lease.wait(120)
    second = reconcile(handle)  # runs while the first one holds the lease
    other_done.set()
    first.join(300)
    assert second.status == "lease-held" and second.reversed == 0 and not second.progress_recorded
    assert second.lease_holder is not None and second.lease_holder["owner"] == results["first"].owner
    assert results["first"].status == "reconciled" and results["first"].reversed == len(dead)
    assert reversals(read_log(handle, consistency="eventual")) == Counter({record: 1 for record in dead})

    # racing for real: whoever loses writes nothing, the other finds everything reversed
    racers: list[ReconcileReport] = []
    barrier = threading.Barrier(2)
    threads = [
        threading.Thread(target=lambda: (barrier.wait(), racers.append(reconcile(handle)))) for _ in "ab"
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert len(racers) == 2 and sum(r.reversed for r in racers) == 0
    assert reversals(read_log(handle, consistency="eventual")) == Counter({record: 1 for record in dead})


def test_a_reconciler_that_lost_its_lease_is_fenced(env, spark, tmp_path: Path) -> None:
    handle, dead = _failover_table(env, spark, tmp_path, "fence")
    planned, resume = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def pause(stage: str) -> None:
        if stage == "planned":
            planned.set()
            assert resume.wait(120)

    def slow() -> None:
        try:
            outcome["report"] = reconcile(handle, stage_hook=pause)
        except FencedError as exc:
            outcome["fenced"] = exc

    thread = threading.Thread(target=slow)
    thread.start()
    assert planned.wait(120)
    holder = control_state(handle).live_lease(LEASE_NAME)
    assert holder is not None
    handle.control().append(control.lease_key(LEASE_NAME), {"release": holder.lease_id})  # lost (expired)
    other = reconcile(handle)  # takes the lease and does the work
    resume.set()
    thread.join(300)
    assert other.status == "reconciled" and other.reversed == len(dead)
    assert "fenced" in outcome and "no longer held" in str(outcome["fenced"])
    assert reversals(read_log(handle, consistency="eventual")) == Counter({record: 1 for record in dead})


# --- retention -------------------------------------------------------------------------------------


def test_records_deleted_by_retention_before_reconcile_are_reported_as_a_gap(
    env, spark, tmp_path: Path
) -> None:
    from confluent_kafka import TopicPartition

    name = env.unique("retention")
    topic = f"{name}_log"
    kafka_config = kafka_client.client_config(env.bootstrap)
    # the log start moves when the test says so (DeleteRecords, what retention does), not on a clock
    kafka_client.ensure_topic(
        kafka_config,
        topic,
        partitions=1,
        replication_factor=1,
        topic_configs={"retention.ms": "-1", "cleanup.policy": "delete"},
    )
    handle = LogStoreTable.open(f"rec.{name}")
    created = create_table(
        handle,
        SCHEMA,
        primary_key=["id"],
        properties=env.log_properties(
            topic, **{"log-store.partitions": "1", "log-store.retention.ms": "2000"}
        ),
    )
    assert any("shorter than 3 reconcile intervals" in w for w in created.warnings)
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:3], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    fenced_attempts(spark, handle, "w", paths[1], 2, dead=1)
    writer_for(spark, handle, "w").write_path(str(paths[2]), 3)

    cons = kafka_client.consumer(kafka_config)
    try:
        _, after_3 = kafka_client.partition_offsets(cons, topic, 1)[0]
        cut = TopicPartition(topic, 0, after_3 - 1)  # batches 1-3 but their last record are gone
        admin = kafka_client.admin_client(kafka_config)
        assert admin.delete_records([cut])[cut].result(30).low_watermark == after_3 - 1
        batch_4 = write_jsonl(tmp_path / "b4.jsonl", BATCHES[3])
        writer_for(spark, handle, "w").write_path(str(batch_4), 4)
        log_start, end = kafka_client.partition_offsets(cons, topic, 1)[0]
        assert end > log_start > 0
    finally:
        cons.close()

    report = reconcile(handle)  # no OffsetOutOfRange, no crash
    assert report.status == "reconciled"
    assert report.gaps == [
        {"partition": 0, "from": 0, "to": log_start, "count": log_start, "detected": "log-start"}
    ]
    assert report.log_start == {"0": log_start} and report.positions_after == {"0": end}
    assert report.scanned == end - log_start
    gap = control_state(handle).gaps[0]
    assert (gap["from"], gap["to"], gap["count"]) == (0, log_start, log_start)
    assert "hybrid re-read" in gap["action"]
    shown = show_table(handle)["log_store"]
    assert shown["needs_hybrid_reread"] is True and shown["retention_gaps"]["0"]["count"] == log_start
    again = reconcile(handle)
    assert again.gaps == [] and again.reversed == 0

    # records deleted while a scan runs: the consumer resets to the log start, the gap is reported
    task = reconcile_scan.ScanTask(topic, kafka_config, {0: 0}, {0: end}, control_state(handle), {}, None)
    for scan in (reconcile_scan.scan_task, reconcile_scan.jvm_scan_task):
        plans = scan(task)
        assert plans[0].stats.first_offset == log_start and plans[0].stats.scanned == end - log_start
        assert [g.to_dict() for g in core.scan_gaps([plans[0].stats])] == [
            {"partition": 0, "from": 0, "to": log_start, "count": log_start, "detected": "scan"}
        ]


def test_table_creation_sets_the_topic_retention_and_warns_when_short(env) -> None:
    short = new_table(env, "short", **{"log-store.retention.ms": "60000"})
    config = short.config()
    info = kafka_client.describe_topic(short.kafka_config(config), config.topic or "")
    assert info is not None and info.configs["retention.ms"] == "60000"
    name = env.unique("shortw")
    warned = create_table(
        LogStoreTable.open(f"rec.{name}"),
        SCHEMA,
        primary_key=["id"],
        properties=env.log_properties(
            f"{name}_log", **{"log-store.retention.ms": "60000", "log-store.reconcile.interval.ms": "600000"}
        ),
    )
    assert len(warned.warnings) == 1 and "log-store.retention.ms=60000" in warned.warnings[0]
    default = new_table(env, "default")
    config = default.config()
    info = kafka_client.describe_topic(default.kafka_config(config), config.topic or "")
    assert info is not None and info.configs["retention.ms"] == str(7 * 24 * 3600 * 1000)


# --- dead letters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("scanner", ["librdkafka", "jvm"])
def test_undecodable_records_are_dead_lettered_and_counted(env, spark, tmp_path: Path, scanner: str) -> None:
    handle, dead = _failover_table(env, spark, tmp_path, f"dlq{scanner[0]}")
    config = handle.config()
    kafka_config = handle.kafka_config(config)
    prod = kafka_client.producer(kafka_config)
    tracker = kafka_client.DeliveryTracker()
    prod.produce(config.topic, key=b"[1]", value=b"not a logstore record", partition=0, on_delivery=tracker)
    prod.produce(
        config.topic,
        key=b"[2]",
        value=b'{"kind":"+I","row":{}}',
        headers=[("format-version", b"1"), ("writer-id", b"w"), ("epoch", b"NaN"), ("batch-id", b"1")],
        partition=1,
        on_delivery=tracker,
    )
    kafka_client.flush(prod, tracker, 2, "foreign records")
    report = reconcile(handle, engine=PythonEngine(scanner=scanner))
    assert report.dead_lettered == 2 and report.reversed == len(dead)
    assert report.dead_letter_topic == dead_letter_topic_name(config.topic or "")
    cons = kafka_client.consumer(kafka_config)
    try:
        entries = [
            json.loads(m.value())
            for batch in kafka_client.scan(cons, report.dead_letter_topic, {0: 0}, {0: 2})
            for m in batch
        ]
    finally:
        cons.close()
    assert sorted(e["partition"] for e in entries) == [0, 1]
    assert any("no LogStore headers" in e["reason"] for e in entries)
    assert any("not an integer" in e["reason"] for e in entries)


def test_log_reads_in_the_jvm_equal_reads_with_librdkafka(env, spark, tmp_path: Path) -> None:
    """Eventual, consistent and hybrid reads of a log with a failover, its reversals and an undecodable
    record: the JVM scan's columns give the rows, reports and dead letters of the librdkafka reader."""
    import io

    from airflow_logstore.read.reader import run_read

    handle, dead = _failover_table(env, spark, tmp_path, "jvmread")
    reconcile(handle)
    config = handle.config()
    prod = kafka_client.producer(handle.kafka_config(config))
    tracker = kafka_client.DeliveryTracker()
    prod.produce(config.topic, key=b"[1]", value=b"not a logstore record", partition=0, on_delivery=tracker)
    kafka_client.flush(prod, tracker, 1, "a foreign record")
    publish_visible_offsets(handle)
    for mode, consistency in (("log", "eventual"), ("log", "consistent"), ("hybrid", "eventual")):
        found = {}
        for scanner in ("librdkafka", "jvm"):
            out = io.StringIO()
            summary = run_read(handle, mode=mode, consistency=consistency, output=out, scanner=scanner)
            report = summary.pop("report")
            assert report.pop("scanner") == scanner
            lines = [json.loads(line) for line in out.getvalue().splitlines()]
            log_rows = [row for row in lines if "_offset" in row]
            for partition in {row["_partition"] for row in log_rows}:  # each partition in log order
                offsets = [row["_offset"] for row in log_rows if row["_partition"] == partition]
                assert offsets == sorted(offsets)
            # partitions may interleave differently: the same rows, not the same order across them
            found[scanner] = (sorted(json.dumps(row, sort_keys=True) for row in lines), summary, report)
        assert found["jvm"] == found["librdkafka"], (mode, consistency)
        rows, _, report = found["jvm"]
        assert rows and report["dead_lettered"] == 1 and report["scanned"] > len(dead)
    limited = run_read(
        handle, mode="log", consistency="eventual", output=io.StringIO(), scanner="jvm", limit=3
    )
    assert limited["records"] == 3
    import psutil

    scans = []
    for child in psutil.Process().children(recursive=True):  # other test workers may be scanning
        with contextlib.suppress(psutil.Error):
            if "airflow_logstore.LogScan" in child.cmdline():
                scans.append(child)
    assert scans == []  # a read stopped early stops its JVM


# --- the operator and the CLI ----------------------------------------------------------------------


def _printed_json(out: str) -> dict[str, Any]:
    """The JSON document the CLI printed (log lines may share stdout inside a test process)."""
    start = out.index("{\n")
    return json.loads(out[start : out.rindex("\n}") + 2])  # type: ignore[no-any-return]


def test_operator_and_cli_return_the_report(
    env, spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def main(argv: list[str]) -> int:  # cli.main without its logging set-up (pytest owns the streams)
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)

    handle, dead = _failover_table(env, spark, tmp_path, "op")
    capsys.readouterr()
    assert main(["reconcile", str(handle.name), "--dry-run", "--json"]) == 0
    printed = _printed_json(capsys.readouterr().out)
    assert printed["dry_run"] and printed["reversed"] == len(dead) and printed["status"] == "dry-run"

    operator = LogStoreReconcileOperator(task_id="reconcile", table=str(handle.name), dry_run="False")
    xcom = operator.execute(context={})
    assert xcom["status"] == "reconciled" and xcom["reversed"] == len(dead)
    assert json.loads(json.dumps(xcom)) == xcom  # JSON-serializable for XCom

    capsys.readouterr()
    assert main(["reconcile", str(handle.name), "--json"]) == 0
    assert _printed_json(capsys.readouterr().out)["reversed"] == 0


# --- the PySpark job -------------------------------------------------------------------------------


def test_spark_reconcile_job(env, spark, tmp_path: Path) -> None:
    handle = new_table(env, "sparkjob")
    paths = [write_jsonl(tmp_path / f"b{n}.jsonl", rows) for n, rows in enumerate(BATCHES[:4], start=1)]
    writer_for(spark, handle, "w").write_path(str(paths[0]), 1)
    dead = set()
    for batch in (2, 3, 4):
        epochs = fenced_attempts(spark, handle, "w", paths[batch - 1], batch, dead=1)
        dead |= data_records(read_log(handle, consistency="eventual"), batch=batch, epochs=set(epochs))
    config = handle.config()
    prod = kafka_client.producer(handle.kafka_config(config))
    tracker = kafka_client.DeliveryTracker()
    prod.produce(config.topic, key=b"[5]", value=b"garbage", partition=2, on_delivery=tracker)
    kafka_client.flush(prod, tracker, 1, "a foreign record")

    done = env.run_job("reconcile.py", ["--table", str(handle.name)])
    assert done.returncode == 0, done.stderr[-3000:]
    report = parse_result(done.stdout)
    assert report is not None and report["engine"] == "spark" and report["status"] == "reconciled"
    assert report["reversed"] == len(dead) and report["dead_lettered"] == 1 and report["progress_recorded"]
    log_after = assert_views_agree(handle, expected(*BATCHES[:4]))
    assert reversals(log_after) == Counter({record: 1 for record in dead})
    # the Python engine agrees: nothing left to do
    assert reconcile(handle).reversed == 0


# --- chaos -----------------------------------------------------------------------------------------


def _chaos_rows(rng: random.Random, batch: int, keys: int = 200) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for _ in range(rng.randint(300, 600)):
        key = rng.randint(1, keys)
        op = rng.choice(["insert", "update", "update", "delete"])
        if op == "delete":
            rows.append({"id": key, "op": "delete"})
        else:
            rows.append(
                {"id": key, "name": f"b{batch}-{rng.randint(0, 9)}", "amount": rng.randint(0, 999), "op": op}
            )
    return rows


#: Where a chaos writer dies (pause.py's points, in the order a batch reaches them): its first task about
#: to produce; a task's records flushed; the commit decided (before the compare-and-set of ``main``); the
#: commit in ``main`` before the ledger record.
CHAOS_POINTS = ("produce:started", "produce:flushed", "commit:decided", "commit:before-publish")


def _kill_at(args: list[str], point: str, folder: Path) -> int:
    """Run a writer process that stops at pause point ``point`` (pause.py's file protocol: it writes
    ``<point>.reached`` and waits); SIGKILL its whole process group (driver, JVM, Python workers) there.
    Returns its exit code; fails if it ended before reaching the point."""
    folder.mkdir(parents=True)
    env = {**os.environ, "LOGSTORE_PAUSE_AT": point, "LOGSTORE_PAUSE_DIR": str(folder)}
    log = folder / "writer.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "spark_jobs" / "dual_write.py"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            wait_reached(process, folder, point, 300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {log.read_text()[-3000:]}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return process.wait(60)


def test_chaos_seeded_kills_at_every_step_then_reconcile(env, spark, tmp_path: Path, record_property) -> None:
    """Writers killed at each step of a batch in a seeded order (one batch also loses a second writer),
    each followed by a restart in the test's process; reconciliation runs at seeded moments and at the
    end: both views agree with the batches, every redundant record is reversed exactly once."""
    seed = int(os.environ.get("LOGSTORE_CHAOS_SEED", "1123"))
    rng = random.Random(seed)
    handle = new_table(env, "chaos")
    count = int(os.environ.get("LOGSTORE_CHAOS_BATCHES", str(len(CHAOS_POINTS))))
    order = rng.sample(CHAOS_POINTS, len(CHAOS_POINTS))
    points = [order[b % len(order)] for b in range(count)]
    # the batch whose next writer also dies (a failover in a row); not one committed by its first
    twice = rng.choice([b for b in range(count) if points[b] != "commit:before-publish"])
    batches: list[list[dict[str, Any]]] = []
    killed: list[tuple[int, str, int]] = []
    for batch in range(1, count + 1):
        rows = _chaos_rows(rng, batch)
        batches.append(rows)
        path = write_jsonl(tmp_path / f"chaos{batch}.jsonl", rows)
        deaths = [points[batch - 1]] + ([rng.choice(CHAOS_POINTS)] if batch - 1 == twice else [])
        for n, point in enumerate(deaths):
            folder = tmp_path / f"kill{batch}_{n}"
            killed.append((batch, point, _kill_at(write_args(handle, "chaos", path, batch), point, folder)))
        writer_for(spark, handle, "chaos").write_path(str(path), batch)  # the restart (skips if committed)
        if rng.random() < 0.5:
            reconcile(handle)
    report = reconcile(handle)
    total = read_log(handle, consistency="eventual")
    all_reversals = reversals(total)
    summary = (
        f"chaos seed={seed}: batches={count} kills={[(b, p) for b, p, _ in killed]}; "
        f"log records={len(total.records)}, reversals={sum(all_reversals.values())}, "
        f"final run reversed={report.reversed} reasserted={report.reasserted}"
    )
    print("\n" + summary)
    record_property("report", summary)
    assert all(code == -signal.SIGKILL for _, _, code in killed), killed  # each died at its point
    assert report.skipped_in_flight == 0
    assert_views_agree(handle, expected(*batches))
    assert all_reversals and max(all_reversals.values()) == 1  # killed producers left records to reverse
    state = merged_state(handle.load(), control_state(handle))
    redundant = {
        (r.partition, r.offset)
        for r in total.records
        if classify(r.meta, r.partition, r.offset, state) is Decision.REDUNDANT
    }
    assert redundant == set(all_reversals)  # every redundant record reversed, and nothing else


# --- copies of reconciler records (issue 33, holes 1 and 2) ---------------------------------------------


def _reconciler_records(handle: LogStoreTable) -> Counter[tuple[Any, ...]]:
    """Every reconciler record in the log by identity, copies included (a raw scan, no reader's rule)."""
    from airflow_logstore.core.codec import decode_headers
    from airflow_logstore.core.visibility import output_identity

    config = handle.config()
    cons = kafka_client.consumer(handle.kafka_config(config))
    found: Counter[tuple[Any, ...]] = Counter()
    try:
        bounds = kafka_client.partition_offsets(cons, config.topic or "", config.partitions)
        ends = {p: high for p, (_, high) in bounds.items()}
        for batch in kafka_client.scan(cons, config.topic or "", {p: 0 for p in ends}, ends):
            for m in batch:
                identity = output_identity(decode_headers(m.headers()), m.partition())
                if identity is not None:
                    found[identity] += 1
    finally:
        cons.close()
    return found


def test_a_spark_reconcile_task_retried_after_its_flush_leaves_copies_every_reader_counts_once(
    env, spark, tmp_path: Path
) -> None:
    """Hole 1: the Spark reconcile job's produce task flushes its partition's reversals and reasserts,
    then fails; Spark runs it again and it sends them all again. The copies stay in the log; every reader
    (and the next reconciler) counts each record once, by its identity. Before, the eventual fold
    reversed the rows twice."""
    handle, dead = _failover_table(env, spark, tmp_path, "retried")
    done = env.run_job(
        "reconcile.py",
        ["--table", str(handle.name)],
        extra_env={
            "LOGSTORE_SPARK_MASTER": "local[2,3]",  # local mode with task retries (3 attempts)
            "LOGSTORE_FAIL_ONCE_AT": "reconcile:produce-flushed",
            "LOGSTORE_PAUSE_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "reconcile_produce-flushed.failed").exists()  # a task failed after its flush
    report = parse_result(done.stdout)
    assert report is not None and report["reversed"] == len(dead) and report["progress_recorded"]
    copies = _reconciler_records(handle)
    assert max(copies.values()) == 2  # the failed task's partition was written twice
    after = assert_views_agree(handle, expected(*BATCHES[:2]))
    assert reversals(after) == Counter({record: 1 for record in dead})
    again = reconcile(handle)
    assert again.reversed == again.reasserted == 0 and again.copies_seen > 0


def test_a_reconciler_stalled_past_its_lease_after_its_check_leaves_copies_every_reader_counts_once(
    env, spark, tmp_path: Path
) -> None:
    """Hole 2: reconciler A checks its lease before producing and stalls there (a GC pause, a SIGSTOP)
    past the lease; B takes the lease, plans the same window (A recorded no progress), writes the
    reversals and records its run; A wakes up and writes its own, then its progress check fences it.
    Every record of A's is a copy of one of B's: counted once by every reader and the next reconciler."""
    handle, dead = _failover_table(env, spark, tmp_path, "stalled")
    checked, resume = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def stall(stage: str) -> None:
        if stage == "lease-checked":
            checked.set()
            assert resume.wait(300)

    def a() -> None:
        try:
            outcome["report"] = reconcile(handle, stage_hook=stall)
        except FencedError as exc:
            outcome["fenced"] = exc

    thread = threading.Thread(target=a)
    thread.start()
    assert checked.wait(300)
    holder = control_state(handle).live_lease(LEASE_NAME)
    assert holder is not None  # A's lease runs out (the test ends it rather than waiting 120 s)
    handle.control().append(control.lease_key(LEASE_NAME), {"release": holder.lease_id})
    b = reconcile(handle)
    assert b.status == "reconciled" and b.reversed == len(dead) and b.progress_recorded
    resume.set()
    thread.join(300)
    assert "fenced" in outcome  # A wrote its records, then found the lease gone before its progress
    copies = _reconciler_records(handle)
    assert set(copies.values()) == {2} and len(copies) == b.reversed + 2 * b.reasserted
    after = assert_views_agree(handle, expected(*BATCHES[:2]))
    assert reversals(after) == Counter({record: 1 for record in dead})
    again = reconcile(handle)
    assert again.reversed == again.reasserted == again.reasserts_completed == 0
