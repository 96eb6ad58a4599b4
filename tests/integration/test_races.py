"""Races of the protocol on the real broker, Spark and Iceberg, lined up with pause points (no sleeps).

Each test stops one actor at an exact step (``airflow_logstore.pause``), lets another act, then
releases the first, and checks the end state with the same oracles as the other integration tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.core.changelog import apply_retract
from airflow_logstore.core.codec import RowKind
from airflow_logstore.exceptions import FencedError
from airflow_logstore.log.kafka_client import wait_until
from airflow_logstore.pause import on_pause
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.follow import follow
from airflow_logstore.read.reader import HybridRead, LogReader, read_hybrid, read_log
from airflow_logstore.table.tables import LogStoreTable, snapshot_commits
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, table_state, write_jsonl
from tests.pause_files import wait_reached

WAIT_S = 300.0


class Paused:
    """Holds the first thread that reaches a pause point (other threads pass) until released."""

    def __init__(self, only: Callable[[], bool] = lambda: True) -> None:
        self.reached = threading.Event()
        self.released = threading.Event()
        self.only = only

    def __call__(self) -> None:
        if self.only() and not self.reached.is_set():
            self.reached.set()
            assert self.released.wait(WAIT_S), "pause point never released"


class Actor:
    """``target`` running in a thread named "actor"; :meth:`finish` joins it and returns its outcome (the
    ``result`` or the ``error``)."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, args=(target,), name="actor")
        self.thread.start()

    def _run(self, target: Callable[[], Any]) -> None:
        try:
            self.outcome["result"] = target()
        except BaseException as exc:
            self.outcome["error"] = exc

    def finish(self) -> dict[str, Any]:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "actor did not finish"
        return self.outcome


@contextmanager
def in_thread(target: Callable[[], Any]) -> Iterator[dict[str, Any]]:
    """Run ``target`` in a thread; the dict gets its ``result`` or ``error`` once the block ends."""
    actor = Actor(target)
    try:
        yield actor.outcome
    finally:
        actor.finish()


def is_actor() -> bool:
    return threading.current_thread().name == "actor"


def rows(ids: range, tag: str = "") -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}{tag}", "amount": i} for i in ids]


def commits_of(handle: LogStoreTable, writer: str, batch: int) -> list[Any]:
    return [c for c in snapshot_commits(handle.load()) if (c.writer_id, c.batch_id) == (writer, batch)]


def first_offsets(handle: LogStoreTable, writer: str) -> dict[int, int]:
    """Per partition the offset of ``writer``'s first record in the log (committed or not)."""
    first: dict[int, int] = {}
    for record in read_log(handle, consistency="eventual").records:
        if record.meta.writer_id == writer:
            first[record.partition] = min(record.offset, first.get(record.partition, record.offset))
    return first


def hybrid_state(read: HybridRead, key: str = "id") -> dict[Any, dict[str, Any]]:
    """Fold a hybrid read: the snapshot's rows, then its log records (retract semantics)."""
    records = [((row[key],), RowKind.INSERT, row) for row in read.file_rows.to_pylist()]
    records += [((r.row[key],), r.kind, r.row) for r in read.log.records]
    result = apply_retract(records)
    assert not result.anomalies, f"hybrid read does not fold: {dict(list(result.anomalies.items())[:3])}"
    return result.state


# -- a zombie attempt against a newer one ----------------------------------------------------------


@pytest.mark.parametrize("primary_key", [("id",), ()], ids=["key-table", "append-only"])
def test_zombie_paused_after_its_decision_cannot_commit_the_batch_again(
    env, spark, tmp_path: Path, primary_key: tuple[str, ...]
) -> None:
    handle = make_table(env, primary_key=primary_key)
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 11)))
    zombie = open_writer(spark, str(handle.name), writer_id="w")
    pause = Paused(is_actor)
    with on_pause("commit:decided", pause), in_thread(lambda: zombie.write_path(str(batch), 1)) as outcome:
        assert pause.reached.wait(WAIT_S)
        newer = open_writer(spark, str(handle.name), writer_id="w")  # a newer attempt claims and commits
        assert newer.epoch > zombie.epoch
        newer_result = newer.write_path(str(batch), 1)
        pause.released.set()

    assert isinstance(outcome.get("error"), FencedError), outcome
    assert f"epoch {newer.epoch}" in str(outcome["error"])
    [commit] = commits_of(handle, "w", 1)
    assert commit.epoch == newer.epoch and commit.snapshot_id == newer_result.snapshot_id
    rows_now = handle.load().scan().to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows_now) == list(range(1, 11))  # not twice (append-only)
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent")
    assert sorted(r.row["id"] for r in consistent.records) == list(range(1, 11))
    assert {r.meta.epoch for r in consistent.records} == {newer.epoch}


def test_zombie_paused_before_its_publish_loses_the_compare_and_set(env, spark, tmp_path: Path) -> None:
    """Paused after writing its staging branch, the zombie finds ``main`` moved and decides again."""
    handle = make_table(env)
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 6)))
    zombie = open_writer(spark, str(handle.name), writer_id="w")
    pause = Paused(is_actor)
    with (
        on_pause("commit:before-publish", pause),
        in_thread(lambda: zombie.write_path(str(batch), 1)) as outcome,
    ):
        assert pause.reached.wait(WAIT_S)
        newer = open_writer(spark, str(handle.name), writer_id="w")
        newer.write_path(str(batch), 1)
        pause.released.set()

    assert isinstance(outcome.get("error"), FencedError), outcome
    assert [c.epoch for c in commits_of(handle, "w", 1)] == [newer.epoch]
    loaded = handle.load()
    assert not [ref for ref in loaded.metadata.refs if ref.startswith("logstore_stage_")]


@pytest.mark.parametrize("held_at", ["commit:decided", "commit:before-publish"])
def test_a_newer_claim_alone_fences_a_zombie_that_already_decided(
    env, spark, tmp_path: Path, held_at: str
) -> None:
    """Hole 1's strict condition: the zombie decided to commit (no newer epoch yet) and is held before
    its write, or after it before its publish; a newer attempt only claims (it commits nothing). The
    zombie's publish must fail: a newer epoch exists at the moment of its commit."""
    handle = make_table(env, primary_key=())
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 6)))
    zombie = open_writer(spark, str(handle.name), writer_id="w")
    pause = Paused(is_actor)
    with on_pause(held_at, pause), in_thread(lambda: zombie.write_path(str(batch), 1)) as outcome:
        assert pause.reached.wait(WAIT_S)
        newer = open_writer(spark, str(handle.name), writer_id="w")  # claims and fences; writes nothing
        assert newer.epoch > zombie.epoch
        pause.released.set()

    assert isinstance(outcome.get("error"), FencedError), outcome
    assert commits_of(handle, "w", 1) == []  # the zombie committed nothing
    assert not [
        r for r in handle.load().metadata.refs if r.startswith(("logstore_stage_", "logstore_fence_"))
    ]
    result = newer.write_path(str(batch), 1)
    assert [c.snapshot_id for c in commits_of(handle, "w", 1)] == [result.snapshot_id]
    assert sorted(r["id"] for r in handle.load().scan().to_arrow().to_pylist()) == list(range(1, 6))


# -- publish against a new epoch -------------------------------------------------------------------


def test_publish_paused_between_its_reads_loses_no_record_of_a_new_epoch(env, spark, tmp_path: Path) -> None:
    """A publish paused after reading the log's end offsets, before reading the control state; meanwhile
    writer b claims a new epoch and produces its batch, and is held at ``commit:decided`` (its records
    are in the log, not committed). The publish must leave b's records undecided (the watermark stays
    below them), not pass them as foreign. Then b commits and a publish makes its records visible:
    a consistent follower and an incremental consistent read each return every committed record once.

    With the old read order (control state, then log ends) the state does not know b's epoch while the
    ends include b's records: they are classified foreign and the watermark moves over them."""
    handle = make_table(env)
    first = open_writer(spark, str(handle.name), writer_id="a")
    first.write_path(str(write_jsonl(tmp_path / "a1.jsonl", rows(range(1, 6)))), 1)
    seen: list[Any] = []
    stop = threading.Event()
    follower = threading.Thread(
        target=lambda: seen.extend(follow(LogReader(handle, consistency="consistent"), "earliest", stop=stop))
    )
    follower.start()
    held_publish, held_b = Paused(is_actor), Paused(is_actor)
    actors: list[Actor] = []
    try:
        with on_pause("publish:offsets-read", held_publish), on_pause("commit:decided", held_b):
            actors.append(publish := Actor(lambda: publish_visible_offsets(handle)))
            assert held_publish.reached.wait(WAIT_S)
            second = open_writer(spark, str(handle.name), writer_id="b")  # claimed after the ends were read
            b_batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(101, 106)))
            actors.append(b_write := Actor(lambda: second.write_path(str(b_batch), 1)))
            assert held_b.reached.wait(WAIT_S)  # b's records are in the log, its batch is undecided
            held_publish.released.set()
            published = publish.finish()
            assert "error" not in published, published

            b_first = first_offsets(handle, "b")
            assert b_first, "writer b's records are not in the log"
            watermark = {int(p): o for p, o in published["result"].watermark_after.items()}
            # partition -> (watermark, b's first offset) where the watermark passed b's undecided records
            passed = {p: (watermark[p], o) for p, o in b_first.items() if watermark.get(p, -1) >= o}
            assert not passed, f"the paused publish passed writer b's undecided records: {passed}"
            before_b = read_log(handle, consistency="consistent")
            assert sorted(r.row["id"] for r in before_b.records) == list(range(1, 6))

            held_b.released.set()
            written = b_write.finish()
            assert "error" not in written, written
        publish_visible_offsets(handle)
        assert wait_until(lambda: len(seen) >= 10, timeout=120), f"follower saw {len(seen)} of 10"
    finally:
        held_publish.released.set()
        held_b.released.set()
        for actor in actors:
            actor.finish()
        stop.set()
        follower.join(60)

    expected = Counter([*range(1, 6), *range(101, 106)])
    assert Counter(r.row["id"] for r in seen) == expected  # each committed record exactly once
    resumed = {int(p): o for p, o in before_b.report.end.items()}
    after_b = read_log(handle, resumed, consistency="consistent")
    assert Counter(r.row["id"] for r in [*before_b.records, *after_b.records]) == expected
    consistent = read_log(handle, consistency="consistent")
    assert Counter(r.row["id"] for r in consistent.records) == expected


# -- two writers in one partition ------------------------------------------------------------------


def test_two_writers_on_disjoint_keys_interleaved_hybrid_reads_equal_the_table(
    env, spark, tmp_path: Path
) -> None:
    handle = make_table(env, properties={"log-store.partitions": "1"})
    slow = open_writer(spark, str(handle.name), writer_id="slow")
    fast = open_writer(spark, str(handle.name), writer_id="fast")
    pause = Paused(is_actor)
    slow_batch = write_jsonl(tmp_path / "slow.jsonl", rows(range(1, 11)))
    with on_pause("commit:decided", pause), in_thread(lambda: slow.write_path(str(slow_batch), 1)) as outcome:
        assert pause.reached.wait(WAIT_S)  # the slow writer's records are in the log, uncommitted
        fast_result = fast.write_path(str(write_jsonl(tmp_path / "fast.jsonl", rows(range(101, 111)))), 1)
        publish_visible_offsets(handle)
        pause.released.set()
    assert "error" not in outcome, outcome
    publish_visible_offsets(handle)

    table_now = table_state(handle)
    assert len(table_now) == 20
    for consistency in ("consistent", "eventual"):
        for snapshot_id in (fast_result.snapshot_id, None):
            read = read_hybrid(handle, snapshot_id, consistency=consistency)
            assert hybrid_state(read) == table_now, (consistency, snapshot_id)


# -- a Spark task that fails inside its produce step -----------------------------------------------


def test_task_retried_after_a_failure_inside_the_produce_step_duplicates_nothing(env, tmp_path: Path) -> None:
    """A separate ``logstore write`` with a Spark master that retries tasks, failing one task once after
    its records were flushed: the retry's records are committed, the failed attempt's are not.

    Every record is tagged with its Spark task attempt *id* (``<partition>.<TaskContext.taskAttemptId()>``,
    unique in the application), in its headers and in the snapshot summary: the run's Spark event log
    says which id each attempt of the produce stage had, and the tags must be exactly those. Tags of the
    attempt *number* (``<partition>.0``, ``<partition>.1``) are not, and repeat across the stage's tasks.

    What makes attempt numbers unsafe is a stage *resubmission* (a FetchFailed after a lost executor:
    Spark counts attempt numbers from 0 again, so a partial first run shares its tag with the run that
    commits). That needs a shuffle output lost in the middle of the stage, which cannot be forced
    deterministically in local mode; the simulation proves that case (planted bug ``attempt_number_tags``
    in ``tests/simulation``). This test proves that the real dual write tags by attempt id."""
    handle = make_table(env)
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 41)))
    events = tmp_path / "spark-events"
    events.mkdir()
    event_log = f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={events.as_uri()}"
    process_env = {
        **os.environ,
        **env.env,
        "LOGSTORE_SPARK_MASTER": "local[2,3]",  # local mode with task retries (3 attempts)
        "LOGSTORE_FAIL_ONCE_AT": "produce:flushed",
        "LOGSTORE_PAUSE_DIR": str(tmp_path),
        "PYSPARK_SUBMIT_ARGS": f"{event_log} {EVENT_LOG_AS_ONE_FILE} pyspark-shell",
    }
    command = [sys.executable, "-m", "airflow_logstore.cli", "write", str(handle.name), "--input", str(batch)]
    command += ["--batch-id", "1", "--writer-id", "retry"]
    done = subprocess.run(command, env=process_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "produce_flushed.failed").exists(), "the injected failure did not happen"
    failed, succeeded = produce_task_attempts(events)

    eventual = read_log(handle, consistency="eventual")
    assert len(eventual.records) > 40  # the failed attempt's records are in the log too
    tags = {r.meta.task for r in eventual.records}
    assert failed <= tags <= failed | succeeded, (tags, failed, succeeded)  # the headers
    suffixes = [tag.split(".")[1] for tag in tags]
    assert len(set(suffixes)) == len(suffixes), f"two task attempts share an attempt id: {sorted(tags)}"
    [commit] = commits_of(handle, "retry", 1)
    assert set(commit.tasks or ()) == succeeded  # the snapshot summary: the failed attempt is not in it
    publish_visible_offsets(handle)
    consistent = read_log(handle, consistency="consistent")
    assert not {r.meta.task for r in consistent.records} & failed
    assert Counter(r.row["id"] for r in consistent.records) == Counter(range(1, 41))


#: Spark settings for an event log that is one plain JSON-lines file (Spark 4 rolls and compresses it).
EVENT_LOG_AS_ONE_FILE = "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false"


def produce_task_attempts(events: Path) -> tuple[set[str], set[str]]:
    """From a run's Spark event log: the tags (``<partition>.<task attempt id>``) of the produce stage's
    failed attempt (the one the injected failure stopped) and of its successful attempts."""
    [log_file] = list(events.iterdir())
    ends = [
        e for e in map(json.loads, log_file.read_text().splitlines()) if e["Event"] == "SparkListenerTaskEnd"
    ]

    def tag(event: dict[str, Any]) -> str:
        info = event["Task Info"]
        return f"{info.get('Partition ID', info['Index'])}.{info['Task ID']}"

    injected = [e for e in ends if "injected failure" in json.dumps(e["Task End Reason"])]
    assert len(injected) == 1, f"{len(injected)} task attempts failed by the injected failure"
    stage = injected[0]["Stage ID"]
    succeeded = {
        tag(e) for e in ends if e["Stage ID"] == stage and e["Task End Reason"]["Reason"] == "Success"
    }
    return {tag(injected[0])}, succeeded


# -- another write of the same Spark application ---------------------------------------------------


def test_a_concurrent_write_of_the_application_never_carries_the_batch_summary(
    env, spark, tmp_path: Path
) -> None:
    """While a batch sits staged (its summary set for its own write only), a plain Spark write of the
    same application commits to ``main``: that snapshot has no ``logstore.*`` summary, and the batch
    then loses its compare-and-set, decides again and commits on top of it."""
    handle = make_table(env)
    writer = open_writer(spark, str(handle.name), writer_id="w")
    pause = Paused(is_actor)
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 6)))
    with (
        on_pause("commit:before-publish", pause),
        in_thread(lambda: writer.write_path(str(batch), 1)) as outcome,
    ):
        assert pause.reached.wait(WAIT_S)
        assert not [k for k in spark.conf.getAll if k.startswith("spark.sql.iceberg.snapshot-property.")]
        spark.sql(f"INSERT INTO {handle.spark_name()} VALUES (500, 'other', 5)")
        inserted_id = handle.load().current_snapshot().snapshot_id
        pause.released.set()
    assert "error" not in outcome, outcome

    inserted = handle.load().snapshot_by_id(inserted_id)
    assert inserted is not None and inserted.summary is not None
    assert not [k for k in inserted.summary.additional_properties if k.startswith("logstore.")]
    [commit] = commits_of(handle, "w", 1)
    assert commit.snapshot_id == outcome["result"].snapshot_id
    assert handle.load().snapshot_by_id(commit.snapshot_id).parent_snapshot_id == inserted_id
    assert sorted(table_state(handle)) == [(i,) for i in [1, 2, 3, 4, 5, 500]]


# -- an attempt killed between its staged write and its publish ------------------------------------


def test_attempt_killed_before_its_publish_leaves_nothing_the_next_attempt_keeps(
    env, spark, tmp_path: Path
) -> None:
    """A ``logstore write`` process paused (by file) after writing its staging branch is SIGKILLed: the
    table is unchanged, and the next attempt commits the batch once and removes the dead branch."""
    handle = make_table(env)
    batch = write_jsonl(tmp_path / "b1.jsonl", rows(range(1, 8)))
    process_env = {
        **os.environ,
        **env.env,
        "LOGSTORE_PAUSE_AT": "commit:before-publish",
        "LOGSTORE_PAUSE_DIR": str(tmp_path),
    }
    command = [sys.executable, "-m", "airflow_logstore.cli", "write", str(handle.name), "--input", str(batch)]
    command += ["--batch-id", "1", "--writer-id", "w"]
    process = subprocess.Popen(command, env=process_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            wait_reached(process, tmp_path, "commit:before-publish", WAIT_S)
        except AssertionError as exc:
            tail = process.stderr.read().decode()[-3000:] if process.stderr else ""
            raise AssertionError(f"{exc}: {tail}") from None
    finally:
        process.kill()
        process.wait(60)
    staged = sorted(ref for ref in handle.load().metadata.refs if ref.startswith("logstore_stage_"))
    # the write-through's staging branch (attempt 0) and the branch of commit attempt 1
    assert [ref.rsplit("_", 1)[1] for ref in staged] == ["0", "1"], staged
    assert commits_of(handle, "w", 1) == []

    result = open_writer(spark, str(handle.name), writer_id="w").write_path(str(batch), 1)
    assert [c.snapshot_id for c in commits_of(handle, "w", 1)] == [result.snapshot_id]
    assert not set(staged) & set(handle.load().metadata.refs)
    assert sorted(table_state(handle)) == [(i,) for i in range(1, 8)]


def _recreate_topic(handle: LogStoreTable, topic: str) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id), as an operator might."""
    from airflow_logstore.log import kafka_client
    from airflow_logstore.log.control_topic import ControlTopic

    config = handle.kafka_config()
    admin = kafka_client.admin_client(config)
    admin.delete_topics([topic])[topic].result(timeout=60)
    assert wait_until(lambda: kafka_client.topic_id(config, topic) is None, timeout=60)
    assert wait_until(lambda: ControlTopic(config, topic).ensure() or True, timeout=60)


def test_a_control_topic_recreated_while_a_writer_runs_stops_its_commit(env, spark, tmp_path: Path) -> None:
    """Hole 7 of issue 33: the control topic is deleted and re-created while a writer job runs. Its
    epoch's claim is gone with the old topic, its records look foreign in the new one (a publish settles
    them as such), and the attempt used to decide that it may commit: the batch landed with its records
    settled as never committed. Now the attempt checks that the state it decides on comes from the topic
    its epoch was claimed in (the topic id) and holds the claim, and stops with an error naming both ids;
    a retry claims an epoch in the new topic and commits the batch once."""
    from airflow_logstore.exceptions import ControlTopicChangedError

    handle = make_table(env)
    rows = [{"id": n, "name": f"n{n}", "amount": n} for n in range(4)]
    path = str(write_jsonl(tmp_path / "b1.jsonl", rows))
    writer = open_writer(spark, str(handle.name), writer_id="w")  # epoch claimed in the first topic
    config = handle.config()
    claimed_in = writer.control_topic_id
    _recreate_topic(handle, config.control_topic or "")

    with pytest.raises(ControlTopicChangedError, match="deleted and re-created") as stopped:
        writer.write_path(path, 1)
    assert claimed_in in str(stopped.value) and not snapshot_commits(handle.load())
    assert writer.control.topic_id() != claimed_in

    retried = open_writer(spark, str(handle.name), writer_id="w")
    result = retried.write_path(path, 1)
    assert result.snapshot_id is not None
    [commit] = snapshot_commits(handle.load())
    assert commit.control_topic_id == retried.control_topic_id != claimed_in
    publish_visible_offsets(handle)
    assert len(read_log(handle, consistency="consistent").records) == 4
