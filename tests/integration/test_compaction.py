"""Compaction on the real broker, real Spark and real Iceberg: files, reads, ledger, concurrency."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.compaction.compact_job import IcebergActions, run_compaction
from airflow_logstore.compaction.policy import HOUR_MS, S_COMPACTION_RUN, CompactionOptions
from airflow_logstore.core.summary import OP_COMPACTION, S_OPERATION, CommitInfo
from airflow_logstore.exceptions import FencedError
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_file, read_hybrid, read_log
from airflow_logstore.reconcile.reconciler import reconcile
from airflow_logstore.spark.results import parse_result
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from airflow_logstore.write.writer import DualWriter, open_writer
from logstore_dev.testing.tables import fold_log, make_table
from tests.threads import in_thread

pytestmark = pytest.mark.integration

FRAME_SCHEMA = "id int, name string, amount long, op string"
Row = tuple[Any, ...]


def batch_rows(batch: int) -> list[Row]:
    """Batch 1 inserts ids 1..10; every later batch inserts three ids, updates two rows of the
    previous batch and deletes a third one (so each batch leaves deletes against older files)."""
    if batch == 1:
        return [(i, f"n{i}", i, "insert") for i in range(1, 11)]
    previous = 100 * (batch - 1) if batch > 2 else 0
    base = 100 * batch
    rows: list[Row] = [(base + i, f"n{base + i}", base + i, "insert") for i in (1, 2, 3)]
    rows += [
        (previous + 1, f"u{batch}", batch, "update"),
        (previous + 2, f"u{batch}", batch, "update"),
        (previous + 3, None, None, "delete"),
    ]
    return rows


def expected_rows(batches: range | list[int]) -> list[dict[str, Any]]:
    state: dict[int, dict[str, Any]] = {}
    for batch in batches:
        for key, name, amount, op in batch_rows(batch):
            if op == "delete":
                state.pop(key, None)
            else:
                state[key] = {"id": key, "name": name, "amount": amount}
    return [state[k] for k in sorted(state)]


def write_batches(spark: Any, writer: DualWriter, batches: range | list[int]) -> list[Any]:
    return [writer.write_frame(spark.createDataFrame(batch_rows(b), FRAME_SCHEMA), b) for b in batches]


def file_rows(handle: LogStoreTable, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return sorted(read_file(handle, snapshot_id).to_pylist(), key=lambda r: r["id"])


def log_view(read: Any) -> list[Row]:
    return sorted((r.partition, r.offset, r.kind.value, tuple(sorted(r.row.items()))) for r in read.records)


def ledger_view(handle: LogStoreTable) -> dict[tuple[str, int], Row]:
    commits = handle.control().read().commits
    return {key: (c.epoch, c.offsets, c.record_count) for key, c in commits.items()}


def marked_snapshots_since(handle: LogStoreTable, sequence: int) -> list[Any]:
    return [s for s in handle.load().snapshots() if (s.sequence_number or 0) > sequence]


REWRITE_ONLY = CompactionOptions(expire_snapshots=False, remove_orphans=False)


def forced(**options: Any) -> CompactionOptions:
    """A forced rewrite without expiry or orphan removal."""
    return CompactionOptions(force=True, expire_snapshots=False, remove_orphans=False, **options)


def assert_compaction_snapshot(snapshot: Any) -> None:
    summary = snapshot.summary.additional_properties
    assert summary[S_OPERATION] == OP_COMPACTION and summary.get(S_COMPACTION_RUN)
    assert CommitInfo.from_summary(summary) is None  # never "a dual-write commit"


def test_thirty_batches_compact_expire_and_read_the_same(env, spark, tmp_path: Path) -> None:
    handle = make_table(env)
    first = open_writer(spark, str(handle.name), writer_id="compactee")
    results = write_batches(spark, first, range(1, 16))
    # A failover: a new attempt of the writer fences the first one, whose batch 16 reaches the log but
    # never the table (its records are what reconciliation reverses, after the compaction below).
    writer = open_writer(spark, str(handle.name), writer_id="compactee")
    with pytest.raises(FencedError):
        first.write_frame(spark.createDataFrame(batch_rows(16), FRAME_SCHEMA), 16)
    dead = [r for r in read_log(handle, consistency="eventual").records if r.meta.batch_id == 16]
    assert dead and {r.meta.epoch for r in dead} == {first.epoch}
    results += write_batches(spark, writer, range(16, 31))
    publish_visible_offsets(handle)

    before_rows = file_rows(handle)
    assert before_rows == expected_rows(range(1, 31))
    before_consistent = log_view(read_log(handle, consistency="consistent"))
    before_eventual = log_view(read_log(handle, consistency="eventual"))
    before_hybrid = read_hybrid(handle, consistency="consistent")
    before_ledger = ledger_view(handle)
    assert sorted(b for _, b in before_ledger) == list(range(1, 31))
    last_batch_snapshot = results[-1].snapshot_id
    start_sequence = handle.load().current_snapshot().sequence_number

    # Orphans: one old enough to go, one young file that may belong to a commit in flight.
    data_dir = Path(handle.load().location().removeprefix("file:")) / "data"
    old_orphan, young_orphan = data_dir / "orphan-old.parquet", data_dir / "orphan-young.parquet"
    for orphan in (old_orphan, young_orphan):
        orphan.write_bytes(b"not referenced by any snapshot")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(old_orphan, (two_hours_ago, two_hours_ago))

    report = run_compaction(
        spark,
        handle,
        CompactionOptions(max_snapshot_age_ms=0, min_snapshots_to_keep=1, orphan_age_ms=HOUR_MS),
    )

    # Files: 30+ small data files and their delete files become one data file, no delete file.
    assert report.status == "compacted", report.to_dict()
    assert report.decision["compact"] and report.decision["apply_deletes"]
    assert report.before["data_files"] >= 30 and report.before["delete_files"] >= 29
    assert report.after["data_files"] == 1 and report.after["delete_files"] == 0
    assert report.after["data_records"] == len(before_rows)
    assert report.rewrite["data_files_rewritten"] == report.before["data_files"]
    assert report.rewrite["bytes_rewritten"] > 0 and report.rewrite["bytes_per_second"] > 0
    # Every snapshot the run committed is marked, and none of them is a dual-write commit.
    new_snapshots = marked_snapshots_since(handle, start_sequence)
    assert [s.snapshot_id for s in new_snapshots] == report.compaction_snapshots
    assert new_snapshots
    for snapshot in new_snapshots:
        assert_compaction_snapshot(snapshot)
    # Expiry: everything older went, but the last batch's snapshot stays (compaction snapshots carry no
    # log positions; hybrid reads of the current snapshot take them from there).
    live = {s.snapshot_id for s in handle.load().snapshots()}
    assert live == {*report.compaction_snapshots, last_batch_snapshot}
    assert report.snapshots["kept_for_hybrid_reads"][-1] == last_batch_snapshot
    # 29 batches and the empty base snapshot the table got before its first staged commit
    assert report.snapshots["expired"] == 30 == len(report.snapshots["expired_ids"])
    assert report.snapshots["commits_in_expired"] == 29
    assert [c.batch_id for c in snapshot_commits(handle.load())] == [30]
    # Orphans: the old one is gone, the young one is left alone.
    assert report.orphans["removed"] == 1 and report.orphans["files"][0].endswith("orphan-old.parquet")
    assert not old_orphan.exists() and young_orphan.exists()

    # Reads: file, consistent (after publishing again), eventual and hybrid are unchanged.
    assert file_rows(handle) == before_rows
    publish_visible_offsets(handle)
    assert log_view(read_log(handle, consistency="consistent")) == before_consistent
    assert log_view(read_log(handle, consistency="eventual")) == before_eventual
    hybrid = read_hybrid(handle, consistency="consistent")
    assert hybrid.snapshot_id == handle.load().current_snapshot().snapshot_id != before_hybrid.snapshot_id
    assert hybrid.positions == before_hybrid.positions
    assert sorted(hybrid.file_rows.to_pylist(), key=lambda r: r["id"]) == sorted(
        before_hybrid.file_rows.to_pylist(), key=lambda r: r["id"]
    )
    assert log_view(hybrid.log) == log_view(before_hybrid.log)

    # Reconciliation inputs: the ledger still holds every batch, with its epoch, offsets and count,
    # although 29 of the 30 snapshots are gone (the reconciler runs at the end of this test).
    assert ledger_view(handle) == before_ledger
    # A retried, already-committed batch is still recognized (from the ledger) and writes nothing.
    retry = open_writer(spark, str(handle.name), writer_id="compactee")
    again = retry.write_frame(spark.createDataFrame(batch_rows(5), FRAME_SCHEMA), 5)
    assert again.skipped and again.epoch == first.epoch

    # A batch after the compaction: hybrid from the compaction snapshot has no gap and no overlap.
    compacted_snapshot = hybrid.snapshot_id
    write_batches(spark, retry, [31])
    later = read_hybrid(handle, compacted_snapshot, consistency="eventual")
    state = {row["id"]: row for row in later.file_rows.to_pylist()}
    for record in later.log.records:
        if record.kind.is_addition:
            state[record.row["id"]] = record.row
        else:
            assert state.pop(record.row["id"]) == record.row
    assert sorted(state.values(), key=lambda r: r["id"]) == expected_rows(range(1, 32))
    assert {record.meta.batch_id for record in later.log.records} == {31}

    # Right after a compaction, the policy finds nothing to do, and says why in numbers.
    again_report = run_compaction(
        spark, handle, CompactionOptions(expire_snapshots=False, remove_orphans=False)
    )
    assert again_report.status == "nothing-to-do"
    assert "small data files" in again_report.decision["summary"]
    assert again_report.compaction_snapshots == []

    # Reconciliation of batches written before the compaction, from the ledger (their snapshots are
    # gone): exactly the fenced attempt's records are reversed, and every view agrees with the table.
    reconciled = reconcile(handle)
    assert reconciled.status == "reconciled" and reconciled.reversed == len(dead), reconciled.to_dict()
    assert reconcile(handle).reversed == 0
    final = {(row["id"],): row for row in expected_rows(range(1, 32))}
    assert fold_log(read_log(handle, consistency="eventual"), ["id"]) == final
    publish_visible_offsets(handle)
    assert fold_log(read_log(handle, consistency="consistent"), ["id"]) == final


def test_dry_run_cli_and_the_spark_job(env, spark, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_logstore.cli import main as cli_main

    handle = make_table(env, properties={"self-optimizing.minor.trigger.file-count": "3"})
    write_batches(spark, open_writer(spark, str(handle.name), writer_id="small"), range(1, 5))
    snapshots_before = {s.snapshot_id for s in handle.load().snapshots()}
    rows_before = file_rows(handle)

    assert cli_main(["compact", str(handle.name), "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["status"] == "dry-run" and dry["decision"]["compact"]
    assert dry["rewrite"]["planned"] and dry["rewrite"]["options"]["min-input-files"] == "2"
    assert dry["snapshots"]["expired"] == 0  # nothing is 5 days old
    assert dry["orphans"]["removed"] == 0
    assert {s.snapshot_id for s in handle.load().snapshots()} == snapshots_before

    # The PySpark entry point, as spark-submit runs it: its own driver, one result line.
    done = env.run_job("compact.py", ["--table", str(handle.name), "--no-orphans"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = parse_result(done.stdout)
    assert result is not None and result["status"] == "compacted"
    assert result["before"]["data_files"] >= 4 and result["after"]["data_files"] == 1
    assert result["after"]["delete_files"] == 0
    assert result["snapshots"]["expired"] == 0 and result["seconds"]["total"] > 0
    assert result["compaction_snapshots"]
    for snapshot in handle.load().snapshots():
        if snapshot.snapshot_id in result["compaction_snapshots"]:
            assert_compaction_snapshot(snapshot)
    assert file_rows(handle) == rows_before == expected_rows(range(1, 5))


def java_conflict(spark: Any) -> Exception:
    """A real Py4JJavaError carrying an Iceberg ValidationException (what a lost race raises)."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    try:
        jvm.org.apache.iceberg.exceptions.ValidationException.check(
            False,
            "Cannot commit, found new position delete for replaced data file (simulated)",
            spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 0),
        )
    except Py4JJavaError as exc:
        return exc
    raise AssertionError("ValidationException.check(false, ...) did not throw")


def test_a_rewrite_that_keeps_losing_its_race_aborts_cleanly(env, spark, monkeypatch) -> None:
    handle = make_table(env)
    write_batches(spark, open_writer(spark, str(handle.name), writer_id="loser"), range(1, 4))
    snapshots_before = [s.snapshot_id for s in handle.load().snapshots()]
    rows_before = file_rows(handle)
    error = java_conflict(spark)
    calls: list[int] = []
    real = IcebergActions.rewrite_data_files

    def losing(self: IcebergActions, options: Any) -> Any:
        calls.append(1)
        raise error

    monkeypatch.setattr(IcebergActions, "rewrite_data_files", losing)
    report = run_compaction(
        spark,
        handle,
        CompactionOptions(force=True, max_attempts=2, expire_snapshots=False, remove_orphans=False),
    )
    assert report.status == "aborted" and len(calls) == 2
    assert report.rewrite["attempts"] == 2 and "ValidationException" in report.rewrite["conflicts"][0]
    assert "lost 2 commit races" in report.warnings[0]
    assert [s.snapshot_id for s in handle.load().snapshots()] == snapshots_before
    assert file_rows(handle) == rows_before

    # One lost race, then a win: the rewrite is planned again and commits.
    calls.clear()

    def loses_once(self: IcebergActions, options: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(self, options)

    monkeypatch.setattr(IcebergActions, "rewrite_data_files", loses_once)
    report = run_compaction(
        spark, handle, CompactionOptions(force=True, expire_snapshots=False, remove_orphans=False)
    )
    assert report.status == "compacted" and report.rewrite["attempts"] == 2 and len(calls) == 2
    assert report.after["data_files"] == 1 and file_rows(handle) == rows_before


def _gate(started: Path, release: Path) -> Any:
    """A UDF that signals (one file per Spark task in ``started``) and waits until ``release`` exists."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    started_dir, release_marker = str(started), str(release)

    def gate(value):  # type: ignore[no-untyped-def]  # no hints: PySpark would try to infer a UDF kind
        import time as _time
        from pathlib import Path as _Path

        from pyspark import TaskContext

        context = TaskContext.get()
        _Path(started_dir, str(context.partitionId() if context else 0)).touch()
        waited = _time.monotonic()
        while not _Path(release_marker).exists() and _time.monotonic() - waited < 120:
            _time.sleep(0.05)
        return value

    return F.udf(gate, IntegerType())


class GatedWriter(DualWriter):
    """A dual writer whose MERGE (of the final rows it commits) blocks in ``tasks`` Spark tasks until
    released: its target snapshot is planned, its commit not made yet. With two tasks it holds both
    cores of ``local[2]``."""

    gate: Any = None
    tasks = 1

    def _commit_logged(self, counted: Any, produced: Any, rows: Any) -> Any:
        from pyspark.sql import functions as F

        gated = rows.final.repartition(self.tasks).withColumn("id", self.gate(F.col("id")))
        return super()._commit_logged(counted, produced, replace(rows, final=gated))


class Gate:
    def __init__(self, tmp_path: Path) -> None:
        self.started = tmp_path / "gate-started"
        self.started.mkdir()
        self.release = tmp_path / "gate-release"

    def writer(self, spark: Any, handle: LogStoreTable, writer_id: str, tasks: int = 1) -> GatedWriter:
        writer = GatedWriter(spark, handle, writer_id=writer_id)
        writer.gate, writer.tasks = _gate(self.started, self.release), tasks
        return writer

    def wait_started(self, tasks: int = 1, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(list(self.started.iterdir())) < tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(self.started.iterdir())) >= tasks, "the gated MERGE never started"


def test_writer_retries_its_commit_when_a_compaction_wins_the_race(env, spark, tmp_path, caplog) -> None:
    handle = make_table(env)
    write_batches(spark, open_writer(spark, str(handle.name), writer_id="racer"), range(1, 4))
    gate = Gate(tmp_path)
    writer = gate.writer(spark, handle, "racer")
    caplog.set_level(logging.WARNING, logger="airflow_logstore.write.writer")
    thread, outcome = in_thread(write_batches, spark, writer, [4])
    try:
        gate.wait_started()
        # The MERGE has planned against the current snapshot; the compaction now rewrites its files.
        report = run_compaction(spark, handle, forced())
        assert report.status == "compacted" and report.rewrite["attempts"] == 1
    finally:
        gate.release.touch()
        thread.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    (result,) = outcome["result"]
    assert result.snapshot_id is not None and not result.skipped
    # its compare-and-set on main lost to the compaction: it decided again and wrote on the new main
    assert any("batch 4: main moved" in r.getMessage() for r in caplog.records)
    assert file_rows(handle) == expected_rows(range(1, 5))
    commits = {c.batch_id: c for c in snapshot_commits(handle.load())}
    assert sorted(commits) == [1, 2, 3, 4] and commits[4].snapshot_id == result.snapshot_id
    compacted = [s for s in handle.load().snapshots() if s.snapshot_id in report.compaction_snapshots]
    assert (commits[4].sequence_number or 0) > max(s.sequence_number or 0 for s in compacted)
    assert ("racer", 4) in handle.control().read().commits


def test_compaction_while_a_dual_write_commits(env, spark, tmp_path, caplog) -> None:
    """The compaction plans, a batch commits deletes into the files it rewrites, the compaction's
    commit fails validation and is planned again; both finish and nothing is lost."""
    handle = make_table(env)
    write_batches(spark, open_writer(spark, str(handle.name), writer_id="busy"), range(1, 11))
    gate = Gate(tmp_path)
    writer = gate.writer(spark, handle, "busy", tasks=2)
    caplog.set_level(logging.WARNING, logger="airflow_logstore.table.commit_retry")
    tracker = spark.sparkContext.statusTracker()

    write_thread, written = in_thread(write_batches, spark, writer, [11])
    compact_thread: threading.Thread | None = None
    try:
        gate.wait_started(tasks=2)  # the MERGE holds both cores, its commit still to come
        merge_jobs = set(tracker.getActiveJobsIds())
        # One file per group, one group at a time: a long rewrite, planned now, queued behind the MERGE.
        options = forced(
            rewrite_options={"max-file-group-size-bytes": "1", "max-concurrent-file-group-rewrites": "1"}
        )
        compact_thread, compacted = in_thread(run_compaction, spark, handle, options)
        deadline = time.monotonic() + 60
        while not set(tracker.getActiveJobsIds()) - merge_jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(tracker.getActiveJobsIds()) - merge_jobs, "the rewrite never started"
    finally:
        gate.release.touch()
        write_thread.join(timeout=300)
        if compact_thread is not None:
            compact_thread.join(timeout=600)

    assert "error" not in written, written.get("error")
    assert "error" not in compacted, compacted.get("error")
    report = compacted["result"]
    assert report.status == "compacted", report.to_dict()
    writer_conflicts = [r.getMessage() for r in caplog.records if "batch 11" in r.getMessage()]
    # The batch committed first: the rewrite lost its race, was planned again and committed.
    assert report.rewrite["attempts"] >= 2 or writer_conflicts, report.rewrite
    assert all("ValidationException" in c for c in report.rewrite["conflicts"])
    # Nothing lost: the table, the ledger and the consistent log all have all 11 batches.
    assert file_rows(handle) == expected_rows(range(1, 12))
    assert sorted(b for _, b in handle.control().read().commits) == list(range(1, 12))
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent")
    assert sorted({r.meta.batch_id for r in consistent.records}) == list(range(1, 12))
    for snapshot in handle.load().snapshots():
        if snapshot.snapshot_id in report.compaction_snapshots:
            assert_compaction_snapshot(snapshot)
