"""The ``logstore`` Spark source on the real broker, Spark and Iceberg.

- A batch read, ``spark.read.format("logstore")``, returns what the Python reader returns from the same
  table, in every mode: consistent and eventual log reads, append-only, from a snapshot, hybrid.
- Bad options fail at ``load()`` (batch and stream), with a message that names the option.
- A stream's offsets are plain JSON in its checkpoint, and its progress shows how far it is behind (the
  log end and the watermark); a checkpoint written by version 1 of the source is read by this one.
- Exactly once across SIGKILLs: a Spark application (``stream_driver.py``, its own driver process) runs
  a consistent log stream, a consistent hybrid stream and an eventual stream into sinks that record
  every delivery, while batches with failovers are written, one waits in flight, the reconciler runs
  and publishes move the watermark; the driver is SIGKILLed three times, at three different points
  (a task holding records it read, the sink after it wrote a micro-batch, the driver after it chose a
  micro-batch's end) and restarted from its checkpoints. The consistent sinks hold each committed
  change exactly once (the hybrid one: the snapshot's rows, then the changes after it), a replayed
  micro-batch is delivered with the same rows, and the eventual sink folds to the table.

Every wait is for a condition (a pause point's file, the sinks' contents), never a sleep that lines
things up.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.changelog import apply_retract
from airflow_logstore.core.codec import RowKind
from airflow_logstore.exceptions import FencedError
from airflow_logstore.pause import on_pause
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_hybrid, read_log
from airflow_logstore.reconcile.reconciler import reconcile
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, table_state, write_jsonl

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "stream_driver.py"
FIXTURE_V1 = HERE / "fixtures" / "logstore_source_checkpoint_v1"
WAIT_S = 240.0
#: The queries of ``stream_driver.py`` (its ``QUERIES``).
QUERIES = ("log", "hybrid", "eventual")

BATCHES: list[list[dict[str, Any]]] = [
    [{"id": i, "name": f"n{i}", "amount": i} for i in range(1, 9)],
    [{"id": i, "name": f"b{i}", "amount": 10 * i, "op": "update"} for i in range(1, 4)]
    + [{"id": 4, "op": "delete"}, {"id": 9, "name": "n9", "amount": 9}],
    [
        {"id": 1, "name": "c1", "amount": 100, "op": "update"},
        {"id": 5, "op": "delete"},
        {"id": 10, "name": "n10"},
    ],
    [{"id": 2, "name": "d2", "amount": 200, "op": "update"}, {"id": 11, "name": "n11", "amount": 11}],
    [{"id": 3, "op": "delete"}, {"id": 12, "name": "n12", "amount": 12}],
    [{"id": 6, "name": "e6", "amount": 60, "op": "update"}, {"id": 13, "name": "n13", "amount": 13}],
]
COLUMNS = ("id", "name", "amount")


def _path(folder: Path, batch: int) -> str:
    return str(write_jsonl(folder / f"b{batch}.jsonl", BATCHES[batch - 1]))


def _writer(spark: Any, handle: LogStoreTable, writer_id: str = "w") -> Any:
    spark.catalog.refreshTable(handle.spark_name())
    return open_writer(spark, str(handle.name), writer_id=writer_id)


def _failover(spark: Any, handle: LogStoreTable, folder: Path, batch: int) -> Any:
    """An attempt that produces the batch's records and is fenced by a newer one, which commits."""
    dead, live = _writer(spark, handle), _writer(spark, handle)
    with pytest.raises(FencedError):
        dead.write_path(_path(folder, batch), batch)
    return live.write_path(_path(folder, batch), batch)


def _log_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["_partition"], row["_offset"], row["_kind"], *(row[c] for c in COLUMNS), row["_record_type"])


def _file_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in COLUMNS)


def _python_log(records: Any) -> Counter[tuple[Any, ...]]:
    return Counter(
        (r.partition, r.offset, r.kind.value, *(r.row[c] for c in COLUMNS), r.meta.record_type.value)
        for r in records
    )


def _spark_rows(spark: Any, table: str, **options: str) -> list[dict[str, Any]]:
    return [
        row.asDict() for row in spark.read.format("logstore").options(table=table, **options).load().collect()
    ]


# -- batch reads equal the Python reader --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(env: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Batch 1; batch 2 after a failover, reconciled (reversals, reasserts); batch 3 only as an attempt
    fenced by a newer claim that never committed (dead pending: the watermark stops before it)."""
    folder = tmp_path_factory.mktemp("source-mixed")
    handle = make_table(env, prefix="src")
    first = _writer(spark, handle).write_path(_path(folder, 1), 1)
    publish_visible_offsets(handle)
    _failover(spark, handle, folder, 2)
    reconcile(handle)
    stuck = _writer(spark, handle)
    _writer(spark, handle)  # a newer claim: the attempt below is fenced, batch 3 never commits
    with pytest.raises(FencedError):
        stuck.write_path(_path(folder, 3), 3)
    publish_visible_offsets(handle)
    return {"handle": handle, "snapshot_1": first.snapshot_id}


@pytest.mark.parametrize(
    "case",
    [
        "consistent",
        "consistent-jvm-scan",
        "eventual",
        "append-only",
        "eventual-from-snapshot",
        "eventual-from-timestamp",
        "the-tables-defaults",
        "a-property-as-an-option",
        "hybrid-consistent",
        "hybrid-eventual",
    ],
)
def test_a_batch_read_equals_the_python_reader(mixed: dict[str, Any], spark: Any, case: str) -> None:
    handle, s1 = mixed["handle"], mixed["snapshot_1"]
    name = str(handle.name)
    if case.startswith("consistent"):
        scanner = "jvm" if case.endswith("jvm-scan") else "auto"  # the JVM scan in a Spark task's worker
        # with the JVM scan, a task per log partition (minPartitions): slices read apart, then together
        tasks = {"minPartitions": "8"} if scanner == "jvm" else {}
        rows = _spark_rows(spark, name, consistency="consistent", scanner=scanner, **tasks)
        want = read_log(handle, consistency="consistent").records
        frame = spark.read.format("logstore").options(table=name, consistency="consistent", **tasks).load()
        assert frame.rdd.getNumPartitions() == (len({r["_partition"] for r in rows}) if tasks else 1)
    elif case == "eventual":
        rows = _spark_rows(spark, name, consistency="eventual")
        want = read_log(handle, consistency="eventual").records
        assert {r["_record_type"] for r in rows} >= {"data", "reversal"}
    elif case == "append-only":
        rows = _spark_rows(spark, name, consistency="consistent", **{"changelog-mode": "append-only"})
        want = read_log(handle, consistency="consistent", changelog_mode="append-only").records
        assert {r["_kind"] for r in rows} == {"+I"}
    elif case == "eventual-from-snapshot":
        rows = _spark_rows(spark, name, consistency="eventual", startingPosition=f"snapshot:{s1}")
        want = read_log(handle, f"snapshot:{s1}", consistency="eventual").records
    elif case == "eventual-from-timestamp":  # batch 2's records on: the first after batch 1's commit
        at = f"timestamp:{handle.load().snapshot_by_id(s1).timestamp_ms + 1}"
        rows = _spark_rows(spark, name, consistency="eventual", startingPosition=at)
        want = read_log(handle, at, consistency="eventual").records
        assert 0 < len(rows) < len(_spark_rows(spark, name, consistency="eventual"))
    elif case == "the-tables-defaults":  # no consistency or changelog mode: the table's properties
        defaults = {"log.consistency": "eventual", "log.consumer.changelog.modes": "append-only"}
        with _table_properties(handle, defaults):  # not the source's own defaults (consistent, all kinds)
            rows = _spark_rows(spark, name)
            want = read_log(handle).records
        assert {r["_kind"] for r in rows} == {"+I"}
        consistent = read_log(handle, consistency="consistent", changelog_mode="append-only").records
        assert Counter(_log_key(r) for r in rows) != _python_log(consistent)  # eventual: the attempts too
    elif case == "a-property-as-an-option":  # a read hint under its table property's name
        rows = _spark_rows(spark, name, **{"log.consistency": "eventual"})
        want = read_log(handle, options={"log.consistency": "eventual"}).records
        assert {r["_record_type"] for r in rows} >= {"data", "reversal"}  # eventual: reversals too
    else:  # from batch 1's snapshot: its rows, then the log from its positions on (batch 2 and after)
        consistency = case.split("-")[1]
        rows = _spark_rows(
            spark, name, mode="hybrid", consistency=consistency, startingPosition=f"snapshot:{s1}"
        )
        hybrid = read_hybrid(handle, s1, consistency=consistency)
        files = [r for r in rows if r["_source"] == "file"]
        assert files and Counter(_file_key(r) for r in files) == Counter(
            _file_key(r) for r in hybrid.file_rows.to_pylist()
        )
        assert {r["_kind"] for r in files} == {"+I"}
        rows, want = [r for r in rows if r["_source"] == "log"], hybrid.log.records
    assert Counter(_log_key(r) for r in rows) == _python_log(want)
    assert rows, "the read returned nothing: the comparison says nothing"


@contextlib.contextmanager
def _table_properties(handle: Any, properties: dict[str, str]) -> Iterator[None]:
    """``properties`` set on the table for the block, then removed."""
    with handle.load().transaction() as tx:
        tx.set_properties(properties)
    try:
        yield
    finally:
        with handle.load().transaction() as tx:
            tx.remove_properties(*properties)


@pytest.mark.parametrize("kind", ["batch", "stream"])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "changes"}, "option 'mode': 'changes' is not log or hybrid"),
        ({"table": "it.no_such_table"}, "option 'table': table 'it.no_such_table' does not exist in catalog"),
        ({"startingPosition": "offset:12"}, "option 'startingPosition': 'offset:12' is not earliest"),
        ({"startingPosition": "snapshot:1"}, "option 'startingPosition': snapshot 1 does not exist"),
        ({"consistency": "strict"}, "option 'consistency': 'strict' is not one of consistent, eventual or"),
    ],
)
def test_a_bad_option_fails_at_load_naming_it(
    mixed: dict[str, Any], spark: Any, kind: str, options: dict[str, str], message: str
) -> None:
    from pyspark.errors import AnalysisException

    reader = spark.read if kind == "batch" else spark.readStream
    with pytest.raises(AnalysisException) as caught:
        reader.format("logstore").options(**{"table": str(mixed["handle"].name), **options}).load()
    assert message in str(caught.value)


# -- a stream's checkpoint and progress ----------------------------------------------------------------------


class _Sink:
    """A ``foreachBatch`` sink in this process: the rows of each micro-batch, by its id."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches[batch_id] = [row.asDict() for row in frame.collect()]

    def rows(self) -> list[dict[str, Any]]:
        return [row for batch in sorted(self.batches) for row in self.batches[batch]]


def _until(done: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_streams_progress_shows_the_log_end_and_the_watermark_and_its_checkpoint_is_json(
    env: Any, spark: Any, tmp_path: Path
) -> None:
    from airflow_logstore.read.spark_source import stream_lag

    handle = make_table(env, prefix="lag")
    writer = _writer(spark, handle)
    writer.write_path(_path(tmp_path, 1), 1)
    publish_visible_offsets(handle)
    writer.write_path(_path(tmp_path, 2), 2)  # committed, not published: behind the watermark
    sink = _Sink()
    query = (
        spark.readStream.format("logstore")
        .options(table=str(handle.name), consistency="consistent")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        _until(lambda: len(sink.rows()) == len(BATCHES[0]), "batch 1")
        _until(lambda: query.lastProgress is not None and query.lastProgress.sources, "a progress")
        lag = stream_lag(query.lastProgress)
        assert lag["unpublished"] and sum(lag["unpublished"].values()) == 8  # batch 2: 3 x 2 + 2
        assert sum(lag["behind"].values()) == 8 and lag["positions"] != lag["log_end"]
        publish_visible_offsets(handle)
        _until(lambda: len(sink.rows()) == len(BATCHES[0]) + 8, "batch 2")
        _until(lambda: sum(stream_lag(query.lastProgress)["behind"].values()) == 0, "the stream to catch up")
    finally:
        query.stop()
    offsets = sorted((tmp_path / "checkpoint" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])  # Spark's line, then the source's
    assert last["version"] == 1 and last["consistency"] == "consistent"
    assert {int(p): o for p, o in last["positions"].items()} == {
        int(p): o for p, o in stream_lag(query.lastProgress)["log_end"].items()
    }


def test_a_checkpoint_written_by_version_1_of_the_source_is_read(
    env: Any, spark: Any, tmp_path: Path
) -> None:
    """``fixtures/logstore_source_checkpoint_v1``: a consistent log stream's checkpoint after batch 1 of
    ``BATCHES``, written by version 1 (``make_checkpoint_fixture.py``), which named the consistency
    ``transactional`` (its old name). Keys go to partitions by their hash, so batch 1 ends at the same
    positions in any new table; the stream goes on from there."""
    handle = make_table(env, prefix="v1")
    writer = _writer(spark, handle)
    writer.write_path(_path(tmp_path, 1), 1)
    writer.write_path(_path(tmp_path, 2), 2)
    publish_visible_offsets(handle)
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(FIXTURE_V1, checkpoint)
    assert '"consistency": "transactional"' in (checkpoint / "offsets" / "0").read_text()  # the old name
    sink = _Sink()
    query = (
        spark.readStream.format("logstore")
        .options(table=str(handle.name), consistency="consistent")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(WAIT_S)
    assert query.exception() is None
    want = [r for r in read_log(handle, consistency="consistent").records if r.meta.batch_id == 2]
    assert Counter(_log_key(r) for r in sink.rows()) == _python_log(want)
    assert min(sink.batches) == 1  # the fixture's batch 0 is committed: the stream went on after it


def test_streams_return_batches_a_control_checkpoint_retired_once(
    env: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish settles batches 1-12 and its checkpoint retires their ledger entries (tombstoned): a
    stream running across it (its control follower folds the tombstones), one stopped before it and
    restarted from its own checkpoint after it, and one started after it (from the control checkpoint)
    decide those records by the settled ranges, and return each once."""
    from airflow_logstore.log import control_topic
    from tests.integration.test_checkpoints import write_batches

    monkeypatch.setattr(control_topic, "CHECKPOINT_EVERY", 20)
    handle = make_table(env, prefix="retired", properties={"log-store.partitions": "1"})
    write_batches(handle, 1, 6)
    assert publish_visible_offsets(handle).checkpoint is None  # batches 1-6 visible, nothing retired yet

    def start(sink: _Sink, name: str, **options: str) -> Any:
        options = options or {"consistency": "consistent", "maxRecordsPerTrigger": "7"}
        return (
            spark.readStream.format("logstore")
            .options(table=str(handle.name), **options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    across, restarted, after, tail = _Sink(), _Sink(), _Sink(), _Sink()
    stopped = start(restarted, "restarted")
    try:  # stopped part of the way: batches 1-6 read, its checkpoint's offset before the retirement
        _until(lambda: len(restarted.rows()) >= 30, "the restarted stream's first run")
    finally:
        stopped.stop()
    running = start(across, "across")
    try:
        _until(lambda: running.lastProgress is not None, "the first stream's first micro-batch")
        write_batches(handle, 7, 6)
        report = publish_visible_offsets(handle)
        assert report.checkpoint is not None and report.checkpoint["retired"] == 12
        assert not handle.control().read().commits  # every entry retired: only the settled ranges decide
        resumed = start(restarted, "restarted")  # from its own checkpoint, across the retirement
        later = start(after, "after")
        # an eventual stream from `latest`: its first micro-batch fixes where it starts (the log's end)
        tailing = start(tail, "tail", consistency="eventual", startingPosition="latest")
        try:
            _until(lambda: tailing.lastProgress is not None, "the latest stream's first micro-batch")
            write_batches(handle, 13, 3)
            publish_visible_offsets(handle)
            want = _python_log(read_log(handle, consistency="consistent").records)
            assert sum(want.values()) == 15 * 5
            _until(
                lambda: min(len(across.rows()), len(after.rows()), len(restarted.rows())) >= 75,
                "every committed record",
            )
            _until(lambda: len(tail.rows()) >= 15, "the records written after the latest stream started")
        finally:
            tailing.stop()
            later.stop()
            resumed.stop()
    finally:
        running.stop()
    for sink in (across, restarted, after):
        assert Counter(_log_key(r) for r in sink.rows()) == want
    # exactly the batches written after its start, each record once (nothing before `latest`)
    newer = [r for r in read_log(handle, consistency="eventual").records if r.meta.batch_id >= 13]
    assert Counter(_log_key(r) for r in tail.rows()) == _python_log(newer) and len(newer) == 15


# -- exactly once across SIGKILLs of the driver --------------------------------------------------------------


class _Driver:
    """``stream_driver.py`` as its own process group (its driver JVM and Python workers with it)."""

    def __init__(
        self, env: Any, handle: LogStoreTable, root: Path, snapshot: int, pause: str | None = None
    ) -> None:
        self.root = root
        self.pause_dir = root / f"pause-{time.monotonic_ns()}"
        self.pause_dir.mkdir(parents=True)
        (root / "started").unlink(missing_ok=True)
        extra = {"LOGSTORE_PAUSE_AT": pause, "LOGSTORE_PAUSE_DIR": str(self.pause_dir)} if pause else {}
        self.log = (root / "driver.log").open("a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                "--table",
                str(handle.name),
                "--root",
                str(root),
                "--hybrid-snapshot",
                str(snapshot),
            ],
            env={**os.environ, **env.env, **extra},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started = time.monotonic()

    def wait_reached(self, point: str) -> None:
        """Until a query reached ``point`` and every query is under way (the driver says ``started``)."""
        reached = self.pause_dir / f"{point.replace(':', '_')}.reached"
        started = self.root / "started"
        _until(
            lambda: (reached.exists() and started.exists()) or self.process.poll() is not None,
            f"pause point {point}",
        )
        assert reached.exists(), (
            f"the driver exited ({self.process.returncode}) before {point}: {self._tail()}"
        )

    def until(self, done: Callable[[], bool], what: str) -> None:
        """Until ``done``, while the driver runs (its own error when it ended first)."""
        _until(lambda: done() or self.process.poll() is not None, what)
        assert done(), f"the driver exited ({self.process.returncode}) before {what}: {self._tail()}"

    def kill(self) -> float:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        self.log.close()
        return time.monotonic() - self.started

    def stop(self) -> float:
        (self.root / "stop").touch()
        code = self.process.wait(WAIT_S)
        self.log.close()
        (self.root / "stop").unlink()
        assert code == 0, f"the driver failed ({code}): {self._tail()}"
        return time.monotonic() - self.started

    def _tail(self) -> str:
        errors = {p.parent.name: p.read_text()[:2000] for p in self.root.glob("*/error.txt")}
        return f"{errors} {(self.root / 'driver.log').read_text()[-3000:]}"


def _deliveries(root: Path, query: str) -> dict[int, list[list[dict[str, Any]]]]:
    """Per micro-batch id, the rows of each delivery the query's sink recorded, in delivery order."""
    found: dict[int, list[tuple[int, list[dict[str, Any]]]]] = {}
    for path in (root / query / "sink").glob("*.jsonl"):
        batch, delivery, _ = path.name.split(".")
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found.setdefault(int(batch), []).append((int(delivery), rows))
    return {batch: [rows for _, rows in sorted(each)] for batch, each in found.items()}


def _planned(root: Path, query: str) -> int:
    """The micro-batches ``query``'s checkpoint planned (its offsets log)."""
    return len([p for p in (root / query / "checkpoint" / "offsets").glob("*") if p.name.isdigit()])


def _committed(root: Path, query: str) -> int:
    """The micro-batches ``query``'s checkpoint committed (its sink ran for them)."""
    return len([p for p in (root / query / "checkpoint" / "commits").glob("*") if p.name.isdigit()])


def _delivered(root: Path, query: str) -> int:
    """The deliveries ``query``'s sink recorded, replays included."""
    return len(list((root / query / "sink").glob("*.jsonl")))


def _received(root: Path, query: str) -> list[dict[str, Any]]:
    """What the sink holds once each micro-batch counts once (its first delivery): an idempotent sink."""
    deliveries = _deliveries(root, query)
    return [row for batch in sorted(deliveries) for row in deliveries[batch][0]]


class _Held:
    """Holds a writer thread at ``commit:decided`` (its records produced, its batch undecided)."""

    def __init__(self) -> None:
        self.reached, self.released = threading.Event(), threading.Event()

    def __call__(self) -> None:
        if threading.current_thread().name == "held-writer" and not self.reached.is_set():
            self.reached.set()
            assert self.released.wait(WAIT_S), "never released"


@pytest.fixture
def held_writer(spark: Any) -> Iterator[Callable[..., tuple[_Held, threading.Thread, dict[str, Any]]]]:
    threads: list[tuple[_Held, threading.Thread]] = []

    def hold() -> None:
        for held, _ in threads:
            held()

    with on_pause("commit:decided", hold):

        def start(
            handle: LogStoreTable, path: str, batch: int
        ) -> tuple[_Held, threading.Thread, dict[str, Any]]:
            held, outcome = _Held(), {}
            writer = _writer(spark, handle)

            def run() -> None:
                outcome["result"] = writer.write_path(path, batch)

            thread = threading.Thread(target=run, name="held-writer")
            threads.append((held, thread))
            thread.start()
            assert held.reached.wait(WAIT_S), "the writer never reached its commit"
            return held, thread, outcome

        yield start
        for held, thread in threads:
            held.released.set()
            thread.join(WAIT_S)


def test_streams_return_each_committed_change_once_across_sigkills_of_the_driver(
    env: Any, spark: Any, tmp_path: Path, held_writer: Any
) -> None:
    handle = make_table(env, prefix="kill")
    root = env.scratch(f"driver-{handle.name.table}")
    costs: dict[str, float] = {}
    _writer(spark, handle).write_path(_path(tmp_path, 1), 1)
    publish_visible_offsets(handle)
    s2 = _writer(spark, handle).write_path(_path(tmp_path, 2), 2).snapshot_id  # the hybrid stream's snapshot

    # run 1: killed while a task holds records it read (the micro-batch's end is in the checkpoint);
    # meanwhile batch 3 is written after a failover and published. Every query is killed with a planned
    # micro-batch in its checkpoint: each of the three is restarted from it.
    driver = _Driver(env, handle, root, s2, "source:slice-read")
    driver.wait_reached("source:slice-read")
    _failover(spark, handle, tmp_path, 3)
    publish_visible_offsets(handle)
    driver.until(lambda: all(_planned(root, q) for q in QUERIES), "a planned micro-batch in every checkpoint")
    costs["run 1 (killed in a task)"] = driver.kill()

    # run 2: killed after every sink wrote a micro-batch, before Spark committed it (each query then
    # delivers it again); batch 4 waits in flight
    delivered = {q: _delivered(root, q) for q in QUERIES}
    driver = _Driver(env, handle, root, s2, "sink:written")
    driver.wait_reached("sink:written")
    held, thread, outcome = held_writer(handle, _path(tmp_path, 4), 4)
    publish_visible_offsets(handle)  # the watermark stops before batch 4's records
    driver.until(lambda: all(_delivered(root, q) > delivered[q] for q in QUERIES), "a delivery in every sink")
    costs["run 2 (killed in the sink)"] = driver.kill()

    # run 3: killed after the driver chose the end of a micro-batch; batch 4 commits meanwhile, and the
    # reconciler reverses batch 3's dead attempt
    held.released.set()
    thread.join(WAIT_S)
    assert outcome["result"].snapshot_id is not None
    publish_visible_offsets(handle)
    reconcile(handle)
    publish_visible_offsets(handle)
    driver = _Driver(env, handle, root, s2, "source:offsets-chosen")
    driver.wait_reached("source:offsets-chosen")
    costs["run 3 (killed in the driver)"] = driver.kill()

    # run 4: to the end; batch 5 after a failover, reconciled, published; then batch 6 in flight while
    # the streams run and plan (its records move the log end: a consistent stream plans a micro-batch
    # for the lag, at the watermark), and returned only once it commits and is published
    driver = _Driver(env, handle, root, s2)
    _failover(spark, handle, tmp_path, 5)
    reconcile(handle)
    publish_visible_offsets(handle)
    before_6 = len(read_log(handle, consistency="consistent").records)
    hybrid_5 = read_hybrid(handle, s2, consistency="consistent")
    driver.until(lambda: len(_received(root, "log")) >= before_6, "the consistent stream up to batch 5")
    driver.until(
        lambda: len(_received(root, "hybrid")) >= hybrid_5.file_rows.num_rows + len(hybrid_5.log.records),
        "the hybrid stream up to batch 5",
    )
    planned = {q: _planned(root, q) for q in ("log", "hybrid")}
    held, thread, outcome = held_writer(handle, _path(tmp_path, 6), 6)
    publish_visible_offsets(handle)  # the watermark stops before batch 6's records
    driver.until(
        lambda: all(_planned(root, q) > n for q, n in planned.items()), "a micro-batch planned in flight"
    )
    # that micro-batch ran through its sink (committed) before anything is asserted of the sinks
    in_flight = {q: _planned(root, q) for q in planned}
    driver.until(lambda: all(_committed(root, q) >= n for q, n in in_flight.items()), "it reached the sinks")
    for query in ("log", "hybrid"):
        assert 6 not in {r.get("_batch_id") for r in _received(root, query)}, query
    held.released.set()
    thread.join(WAIT_S)
    assert outcome["result"].snapshot_id is not None
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent").records
    hybrid = read_hybrid(handle, s2, consistency="consistent")
    table = {row["id"]: row for row in table_state(handle).values()}
    driver.until(lambda: len(_received(root, "log")) >= len(consistent), "the consistent stream")
    driver.until(
        lambda: len(_received(root, "hybrid")) >= hybrid.file_rows.num_rows + len(hybrid.log.records),
        "hybrid",
    )
    driver.until(
        lambda: _fold(_received(root, "eventual")) == table, "the eventual stream to fold to the table"
    )
    costs["run 4 (to the end)"] = driver.stop()

    log_rows = _received(root, "log")
    assert Counter(_log_key(r) for r in log_rows) == _python_log(consistent)  # each committed change once
    assert {r["_batch_id"] for r in log_rows} == {1, 2, 3, 4, 5, 6}
    rows = _received(root, "hybrid")
    files, log = [r for r in rows if r["_source"] == "file"], [r for r in rows if r["_source"] == "log"]
    # a union read: the snapshot's rows first, then its log part (no log row before the last file row)
    assert {r["_source"] for r in rows[: len(files)]} == {"file"}
    assert Counter(_file_key(r) for r in files) == Counter(_file_key(r) for r in hybrid.file_rows.to_pylist())
    assert Counter(_log_key(r) for r in log) == _python_log(hybrid.log.records)
    assert {r["_batch_id"] for r in log} == {3, 4, 5, 6}  # the snapshot holds batches 1 and 2
    eventual = _received(root, "eventual")
    assert len({(r["_partition"], r["_offset"]) for r in eventual}) == len(eventual)
    assert "reversal" in {r["_record_type"] for r in eventual}

    replays = dict.fromkeys(QUERIES, 0)
    for query in QUERIES:
        for batch, each in _deliveries(root, query).items():
            # a replay: the same rows, in the same order (the message says which of the two differs)
            assert all(rows == each[0] for rows in each), (query, batch, _replay_difference(each))
            replays[query] += len(each) - 1
    assert all(replays.values()), replays  # every query delivered a micro-batch again after a kill
    print(f"\ncosts (s): {json.dumps({k: round(v, 1) for k, v in costs.items()})}, replays: {replays}")


def _replay_difference(deliveries: list[list[dict[str, Any]]]) -> str:
    """How the deliveries of one micro-batch differ: only in order, or in their rows (for a failure)."""
    texts = [[json.dumps(row, sort_keys=True) for row in rows] for rows in deliveries]
    if all(sorted(t) == sorted(texts[0]) for t in texts):
        orders = [[(row["_partition"], row["_offset"]) for row in rows] for rows in deliveries]
        return f"the same rows in another order: {orders}"
    return f"other rows: {texts}"


def _fold(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]] | None:
    """The eventual sink's rows applied with retract semantics (None while a key does not net to one row)."""
    changes = [((r["id"],), RowKind(r["_kind"]), {c: r[c] for c in COLUMNS}) for r in rows]
    result = apply_retract(changes)
    if result.anomalies:
        return None
    return {int(key[0]): row for key, row in result.state.items()}  # type: ignore[index]
