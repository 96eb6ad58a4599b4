"""The streaming dual write's operator, trigger and heartbeat, on a real SQLite catalog (no Spark here:
the application is a process the test controls; the real one runs in the integration and e2e tests)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
import sqlalchemy.exc
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_logstore.core.failures import JobFailure
from airflow_logstore.exceptions import BadInputError, JobFailedError, KafkaUnavailableError
from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.operators import streaming_write
from airflow_logstore.operators.streaming_write import (
    LogStoreStreamingDualWriteOperator,
    default_checkpoint,
    launch_detached,
)
from airflow_logstore.table import streams
from airflow_logstore.table.reports import failure_of, report_failure, write_result
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.triggers.streaming_write import StreamingDualWriteTrigger, kill_group, process_alive
from airflow_logstore.write.stream_monitor import StreamMonitor
from airflow_logstore.write.writer import BatchResult
from tests.threads import in_thread

LOG_PROPERTIES = {
    "log-store.enabled": "true",
    "log-store.topic": "orders_log",
    "log-store.address": "127.0.0.1:1",
}


@pytest.fixture
def table(handle: LogStoreTable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LogStoreTable:
    """``db.orders`` with its log enabled (no broker needed: nothing here talks to Kafka); the
    operator's files (properties, output) in the test's own temporary folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with handle.load().transaction() as tx:
        tx.set_properties(LOG_PROPERTIES)
    return handle


def operator(**kwargs: Any) -> LogStoreStreamingDualWriteOperator:
    return LogStoreStreamingDualWriteOperator(
        task_id="stream",
        table="db.orders",
        source_topic="orders_src",
        jars="",
        **{"startup_timeout": 30, **kwargs},
    )


# -- the operator ----------------------------------------------------------------------------------


class Launched:
    """What ``launch_detached`` was given, and a process that ends as the test says."""

    def __init__(
        self, table: LogStoreTable, monkeypatch: pytest.MonkeyPatch, code: int | None = None
    ) -> None:
        self.table = table
        self.code = code
        self.commands: list[list[str]] = []
        self.env: dict[str, str] = {}
        self.new_session = False
        self.on_start: Any = None

        def popen(command: list[str], **kwargs: Any) -> Any:
            self.commands.append(command)
            self.env = kwargs["env"]
            self.new_session = kwargs.get("start_new_session", False)
            if self.on_start is not None:
                self.on_start(command[command.index("--report-id") + 1])
            self.process = subprocess.Popen(  # in a session of its own, as asked (the real one is)
                [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=self.new_session
            )
            return SimpleNamespace(pid=self.process.pid, poll=lambda: self.code)

        fake = SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT, DEVNULL=subprocess.DEVNULL)
        monkeypatch.setattr(streaming_write, "subprocess", fake)  # this module's, not everyone's

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def test_the_application_is_submitted_detached_as_the_spark_provider_builds_it_and_the_task_defers(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = Launched(table, monkeypatch)
    launched.on_start = lambda report_id: streams.write_status(
        table.load(), report_id, {"beats": 1, "epoch": 5}
    )
    task = operator(writer_id="orders-stream", run_for=30, checkpoint="file:///ckpt")
    try:
        with pytest.raises(TaskDeferred) as deferred:
            task.execute({})
        started = psutil.Process(launched.process.pid).create_time()
    finally:
        launched.stop()
    (command,) = launched.commands
    assert command[0].endswith("spark-submit") and "--properties-file" in command
    assert command[command.index("--master") + 1] == "local[2]"
    args = command
    for flag, value in (
        ("--source-topic", "orders_src"),
        ("--checkpoint", "file:///ckpt"),
        ("--writer-id", "orders-stream"),
        ("--trigger", "1 second"),
        ("--heartbeat-interval", "5.0"),
        ("--timeout", "30.0"),
    ):
        assert args[args.index(flag) + 1] == value
    assert launched.new_session  # it outlives the task's process group while the task is deferred
    assert not any("password" in key.lower() for key in launched.env)
    trigger = deferred.value.trigger
    assert isinstance(trigger, StreamingDualWriteTrigger) and deferred.value.method_name == "execute_complete"
    assert trigger.report_id == command[command.index("--report-id") + 1] == task._report_id
    assert (trigger.pid, trigger.host) == (launched.process.pid, socket.gethostname())
    assert trigger.pid_started == pytest.approx(started)


def test_the_application_does_not_hold_the_tasks_stdin(tmp_path: Path) -> None:
    """The task's stdin (in Airflow 3 its socket to its supervisor, here a socket too) is not the
    application's: the supervisor sees the task end when it defers, not when the stream ends."""
    script = "import os; print(os.path.realpath('/proc/self/fd/0'))"
    hook = SimpleNamespace(_build_spark_submit_command=lambda app: [sys.executable, "-c", script], _env=None)
    ours, theirs = socket.socketpair()
    saved = os.dup(0)
    try:
        os.dup2(ours.fileno(), 0)
        process = launch_detached(hook, "dual_write_app.py", tmp_path / "out.log")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        ours.close()
    try:
        assert process.wait(60) == 0
        assert (tmp_path / "out.log").read_text().strip() == os.devnull
    finally:
        theirs.close()


def test_the_default_checkpoint_lives_next_to_the_table() -> None:
    assert (
        default_checkpoint("file:///w/db/orders", "dag.stream")
        == "file:///w/db/orders/logstore/streams/checkpoints/dag.stream"
    )
    assert (
        default_checkpoint("s3://warehouse/db/orders/", "a/b")
        == "s3a://warehouse/db/orders/logstore/streams/checkpoints/a%2Fb"
    )


def test_an_application_that_fails_before_its_first_heartbeat_fails_the_task_with_the_drivers_error(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = Launched(table, monkeypatch, code=1)
    error = BadInputError("source record field 'colour' is not in the table")

    def failed(report_id: str) -> None:
        failure = failure_of(error, writer_id=None, batch_id=None, epoch=3, report_id=report_id)
        report_failure(table.load(), failure)

    launched.on_start = failed
    try:
        with pytest.raises(AirflowFailException, match="BadInputError: source record field 'colour'"):
            operator().execute({})
    finally:
        launched.stop()


def test_an_application_that_dies_before_its_first_heartbeat_says_so_and_is_retried(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    launched = Launched(table, monkeypatch, code=137)
    try:
        with pytest.raises(
            JobFailedError, match="exited with code 137 before the application's first heartbeat"
        ) as e:
            operator().execute({})
    finally:
        launched.stop()
    assert e.value.retryable


def test_a_task_killed_before_the_first_heartbeat_stops_its_application_and_says_so(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow calls ``on_kill`` while ``execute`` waits for the first heartbeat: the application's
    process group is killed, a stop request is left, and the wait ends naming the kill (not a death)."""
    launched = Launched(table, monkeypatch)  # an application that never heartbeats, never exits itself
    task = operator()
    runner, outcome = in_thread(task.execute, {})
    try:
        for _ in range(600):
            if task._process is not None:
                break
            runner.join(0.05)
        assert task._process is not None and task._report_id is not None
        task.on_kill()
        runner.join(30)
        assert not runner.is_alive()
        assert launched.process.wait(30) == -signal.SIGKILL  # its process group was killed
    finally:
        launched.stop()
    assert streams.stop_requested(table.load(), task._report_id)
    error = outcome.get("error")
    assert isinstance(error, JobFailedError), outcome
    assert "killed before the application's first heartbeat" in str(error)
    assert error.retryable


def test_a_heartbeat_that_cannot_be_read_for_a_moment_is_read_again(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog blinks while the task waits for the first heartbeat: the read is tried again (the
    startup deadline decides), and the task defers once the heartbeat is there."""
    launched = Launched(table, monkeypatch)
    launched.on_start = lambda report_id: streams.write_status(table.load(), report_id, {"beats": 1})
    real, failures = streams.read_status, [OSError("the catalog's database is locked")]

    def blinking(loaded: Any, report_id: str) -> Any:
        if failures:
            raise failures.pop()
        return real(loaded, report_id)

    monkeypatch.setattr(streams, "read_status", blinking)
    try:
        with pytest.raises(TaskDeferred):
            operator().execute({})
        assert launched.process.poll() is None  # still running: the trigger watches it now
    finally:
        launched.stop()
    assert failures == []


class TaskTimeout(BaseException):
    """As Airflow's ``AirflowTaskTimeout``: a ``BaseException``, which no ``except Exception`` stops."""


@pytest.mark.parametrize(
    ("error", "expected", "match"),
    [
        # the catalog gone for longer than the startup timeout: the deadline ends the wait
        (OSError("the catalog's database is gone"), JobFailedError, "the last read of its heartbeat failed"),
        # the task's execution_timeout: Airflow raises a BaseException (AirflowTaskTimeout) in the wait
        (TaskTimeout("Timeout, PID: 1"), TaskTimeout, "Timeout"),
    ],
)
def test_whatever_ends_the_wait_for_the_first_heartbeat_stops_the_application(
    table: LogStoreTable,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    expected: type[BaseException],
    match: str,
) -> None:
    """No application is left running that no trigger watches (a retry would start a second one on the
    same checkpoint)."""
    launched = Launched(table, monkeypatch)

    def failing(loaded: Any, report_id: str) -> Any:
        raise error

    monkeypatch.setattr(streams, "read_status", failing)
    try:
        with pytest.raises(expected, match=match) as raised:
            task = operator(startup_timeout=2)
            task.execute({})
        assert launched.process.wait(30) == -signal.SIGKILL  # its process group was killed
    finally:
        launched.stop()
    # and a stop request, for a driver that runs elsewhere (cluster deploy mode)
    assert streams.stop_requested(table.load(), str(task._report_id)), raised.value


def test_how_the_application_ended_decides_how_the_task_ends() -> None:
    task = operator()
    done = task.execute_complete({}, {"status": "stopped", "report_id": "r", "result": {"batches": 4}})
    assert done == {"table": "db.orders", "status": "stopped", "report_id": "r", "batches": 4}
    bad = JobFailure(
        None, None, "BadInputError", "row 1 does not fit", retryable=False, epoch=2, report_id="r"
    )
    with pytest.raises(AirflowFailException, match="BadInputError: row 1 does not fit"):
        task.execute_complete({}, {"status": "failed", "report_id": "r", "failure": bad.to_json()})
    down = JobFailure(
        None, None, "KafkaUnavailableError", "no broker", retryable=True, epoch=2, report_id="r"
    )
    with pytest.raises(JobFailedError, match="no broker") as retried:
        task.execute_complete({}, {"status": "failed", "report_id": "r", "failure": down.to_json()})
    assert retried.value.retryable
    with pytest.raises(JobFailedError, match="was lost: its process") as lost:
        task.execute_complete(
            {}, {"status": "lost", "message": "the stream of db.orders was lost: its process"}
        )
    assert lost.value.retryable


# -- the trigger ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watcher(report_id: str = "r1", **kwargs: Any) -> StreamingDualWriteTrigger:
    trigger = StreamingDualWriteTrigger(
        table="db.orders", report_id=report_id, heartbeat_timeout=30, **kwargs
    )
    trigger.clock = Clock()
    return trigger


def test_the_trigger_serializes_to_plain_arguments() -> None:
    trigger = watcher(pid=7, pid_started=1.5, host="h", log_path="/tmp/x.log")
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_logstore.triggers.streaming_write.StreamingDualWriteTrigger"
    assert StreamingDualWriteTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs


def test_the_trigger_fires_the_result_or_the_drivers_failure(table: LogStoreTable) -> None:
    trigger = watcher()
    streams.write_status(table.load(), "r1", {"beats": 1, "state": "running"})
    assert trigger.look() is None
    status_file = Path(streams.status_path(table.load().location(), "r1").removeprefix("file://"))
    assert status_file.exists()
    write_result(table.load(), "r1", {"batches": 3, "stopped": True})
    assert trigger.look() == {"status": "stopped", "result": {"batches": 3, "stopped": True}}
    assert not status_file.exists()  # the application ended: its heartbeat is removed, not left behind
    failure = failure_of(
        KafkaUnavailableError("broker gone"), writer_id=None, batch_id=None, epoch=4, report_id="r2"
    )
    streams.write_status(table.load(), "r2", {"beats": 1, "state": "running"})
    report_failure(table.load(), failure)
    event = watcher("r2").look()
    assert event is not None and event["status"] == "failed"
    assert event["message"] == "KafkaUnavailableError: broker gone" and event["failure"]["epoch"] == 4
    assert streams.read_status(table.load(), "r2") is None


def test_the_trigger_names_the_embedded_default_once_not_at_every_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every look of the trigger goes through one hook: the triggerer's log names the embedded default
    once for the stream's whole life, not at every poll."""
    from structlog.testing import capture_logs

    from airflow_logstore.table.tables import create_table

    monkeypatch.setenv("LOGSTORE_HOME", str(tmp_path))
    monkeypatch.delenv("LOGSTORE_CATALOG", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_LOGSTORE_DEFAULT", raising=False)
    handle = LogStoreTable.open("db.orders")
    create_table(handle, "id int, amount long", primary_key=["id"])
    streams.write_status(handle.load(), "r1", {"beats": 1, "state": "running"})
    trigger = watcher()
    with capture_logs() as logs:
        assert [trigger.look() for _ in range(3)] == [None] * 3
    said = [e for e in logs if "no LogStore connection configured" in e["event"]]
    assert len(said) == 1, logs


def test_a_running_application_gets_a_progress_line_a_minute_whatever_the_poll_interval(
    table: LogStoreTable,
) -> None:
    """One line at the first look at a status, then one a minute: a trigger polling every second does
    not log 60 lines a minute (a line per 12 polls would), and one polling every 30 s still says it."""
    from structlog.testing import capture_logs

    lines = {}
    for interval in (1.0, 30.0):
        trigger = watcher(poll_interval=interval)
        clock = trigger.clock
        assert isinstance(clock, Clock)
        with capture_logs() as logs:
            for beat in range(int(180 / interval)):  # three minutes of looks
                streams.write_status(table.load(), "r1", {"beats": beat + 1, "state": "running"})
                assert trigger.look() is None
                clock.now += interval
        lines[interval] = [e for e in logs if "micro-batches" in e["event"]]
    assert len(lines[1.0]) == 3 and len(lines[30.0]) == 3, lines


def test_a_heartbeat_that_stops_means_lost_and_leaves_a_stop_request(table: LogStoreTable) -> None:
    trigger = watcher()
    clock = trigger.clock
    assert isinstance(clock, Clock)
    for beats in (1, 2, 2, 2):
        streams.write_status(table.load(), "r1", {"beats": beats})
        clock.now += 20  # 20 s per look: the counter stood still from 20 s to 60 s
        event = trigger.look()
        if beats < 2 or clock.now < 60:
            assert event is None
    assert event is not None and event["status"] == "lost"
    assert "no heartbeat for 40s" in event["message"]
    assert streams.stop_requested(table.load(), "r1")


def test_a_process_that_ended_without_a_word_is_lost_at_once(table: LogStoreTable, tmp_path: Path) -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(done.pid).create_time()
    done.wait()
    log = tmp_path / "out.log"
    log.write_text("starting\nKilled\n")
    trigger = watcher(pid=done.pid, pid_started=started, host=socket.gethostname(), log_path=str(log))
    streams.write_status(table.load(), "r1", {"beats": 1})
    event = trigger.look()
    assert event is not None and event["status"] == "lost"
    assert f"its process {done.pid} ended without a result or a failure report" in event["message"]
    assert "starting | Killed" in event["message"]


@pytest.mark.parametrize("left", [b"", b'{"beats": 3, "sta'])
def test_a_process_killed_while_writing_its_heartbeat_is_lost_not_watched_forever(
    table: LogStoreTable, left: bytes
) -> None:
    """A driver killed while it rewrote its heartbeat leaves the file empty or half written: the
    trigger reports the process lost (before, every look raised on the file and the task stayed
    deferred), and a heartbeat cut short reads as none."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(done.pid).create_time()
    done.wait()
    loaded = table.load()
    with loaded.io.new_output(streams.status_path(loaded.location(), "r1")).create(overwrite=True) as out:
        out.write(left)
    assert streams.read_status(loaded, "r1") is None
    trigger = watcher(pid=done.pid, pid_started=started, host=socket.gethostname())
    event = trigger.look()
    assert event is not None and event["status"] == "lost", event
    assert f"its process {done.pid} ended without a result or a failure report" in event["message"]


def test_a_cut_short_heartbeat_of_a_remote_driver_is_no_heartbeat(table: LogStoreTable) -> None:
    """No process to check (the driver runs elsewhere): a heartbeat cut short counts as none, and the
    heartbeat timeout decides, as for a driver that stopped beating."""
    trigger = watcher()
    clock = trigger.clock
    assert isinstance(clock, Clock)
    streams.write_status(table.load(), "r1", {"beats": 1})
    assert trigger.look() is None
    loaded = table.load()
    with loaded.io.new_output(streams.status_path(loaded.location(), "r1")).create(overwrite=True) as out:
        out.write(b"")
    events = []
    for _ in range(4):
        clock.now += 20
        events.append(trigger.look())
    assert events[:2] == [None, None]
    assert (
        events[-1] is not None
        and events[-1]["status"] == "lost"
        and "no heartbeat for" in events[-1]["message"]
    )


def test_a_process_is_told_from_another_that_reused_its_pid() -> None:
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        started = psutil.Process(running.pid).create_time()
        assert process_alive(running.pid, started) is True
        assert process_alive(running.pid, started - 100) is False  # another process had this pid
        assert process_alive(None, None) is None
        assert not kill_group(running.pid, started - 100)  # never signals the other process
        assert kill_group(running.pid, started, signal.SIGKILL)
        running.wait(timeout=30)
        assert process_alive(running.pid, started) is False
    finally:
        running.kill()


def test_errors_reading_the_table_are_retried_without_an_event(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    trigger = watcher(poll_interval=0.01, max_backoff=0.02)
    calls = {"n": 0}
    load = table.load

    def flaky() -> Any:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))
        return load()

    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: SimpleNamespace(load=flaky))
    write_result(table.load(), "r1", {"batches": 1})

    async def first() -> Any:
        stream = trigger.run()
        try:
            return await asyncio.wait_for(stream.__anext__(), 30)
        finally:
            await stream.aclose()

    event = asyncio.run(first())
    assert calls["n"] == 4 and event.payload == {
        "report_id": "r1",
        "status": "finished",
        "result": {"batches": 1},
    }


def test_on_kill_stops_the_process_when_no_stop_request_can_be_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task is marked failed while the catalog cannot be reached: the stop request fails (logged),
    and the application's process group, here on this host, is still stopped."""

    def unreachable() -> Any:
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("unable to open database file"))

    monkeypatch.setattr(LogStoreHook, "table", lambda self, name: SimpleNamespace(load=unreachable))
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        started = psutil.Process(process.pid).create_time()
        trigger = watcher(pid=process.pid, pid_started=started, host=socket.gethostname())
        asyncio.run(trigger.on_kill())
        assert process.wait(30) == -signal.SIGTERM
    finally:
        process.kill()
        process.wait()


# -- the heartbeat, in the driver -------------------------------------------------------------------


class Query:
    def __init__(self, failures: int = 0) -> None:
        self.stopped = asyncio.Event()
        self.failures = failures  # calls of ``stop`` that raise first
        self.calls = 0

    def stop(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("py4j: the JVM did not answer")
        self.stopped.set()


def batch(batch_id: int, **numbers: Any) -> BatchResult:
    return BatchResult("db.orders", "w", batch_id, 9, "file,log", **numbers)


def test_the_heartbeat_counts_up_and_a_stop_request_stops_the_query(table: LogStoreTable) -> None:
    writer = SimpleNamespace(handle=table, writer_id="w", epoch=9)
    monitor = StreamMonitor(writer, "r9", interval=0.05)  # type: ignore[arg-type]
    first = streams.read_status(table.load(), "r9")
    assert first is not None and first["state"] == "starting" and first["epoch"] == 9
    query = Query(failures=2)  # the first two tries to stop it fail: the heartbeat goes on, tries again
    monitor.attach(query)
    monitor.batch_done(0, batch(0, log_records=4))
    streams.request_stop(table.load(), "r9")
    for _ in range(400):  # the monitor's thread looks at every beat
        if query.stopped.is_set():
            break
        asyncio.run(asyncio.sleep(0.01))
    assert query.stopped.is_set() and monitor.stop_requested and query.calls == 3
    assert monitor._thread.is_alive()
    monitor.close("stopped")
    monitor.close("failed")  # the job's own close after run_stream's: nothing more
    last = streams.read_status(table.load(), "r9")
    assert last is not None and last["state"] == "stopped" and last["beats"] > first["beats"]
    assert last["batches"] == 1 and last["last_batch"] == {**batch(0, log_records=4).to_dict(), "batch_id": 0}
    assert last["pid"] == os.getpid() and last["host"] == socket.gethostname()


def test_the_micro_batches_are_summed_up_in_a_line_a_minute_not_one_each(
    table: LogStoreTable, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A long run writes a micro-batch a second: the application's output gets one line a minute with
    the numbers of the micro-batches since the last line, not 86,400 lines a day."""
    writer = SimpleNamespace(handle=table, writer_id="w", epoch=9)
    clock = {"now": 1000.0}
    monkeypatch.setattr(StreamMonitor, "clock", staticmethod(lambda: clock["now"]))
    monitor = StreamMonitor(writer, "r9", interval=60)  # type: ignore[arg-type]
    try:
        with caplog.at_level("INFO", logger="airflow_logstore.write.stream_monitor"):
            for i in range(1, 121):  # two minutes of micro-batches, one a second
                clock["now"] += 1
                skipped = i == 5
                monitor.batch_done(i, batch(i, rows_in=10, log_records=12, skipped=skipped, snapshot_id=i))
    finally:
        monitor.close("finished")
    lines = [r.getMessage() for r in caplog.records if r.name == "airflow_logstore.write.stream_monitor"]
    assert lines == [
        "1 micro-batches in the last 1s (1 in all): 10 rows in, 12 log records, 0 skipped as committed; "
        "the last: batch 1, snapshot 1, offsets {}",  # the first at once: the run is under way
        "60 micro-batches in the last 60s (61 in all): 600 rows in, 720 log records, 1 skipped as committed; "
        "the last: batch 61, snapshot 61, offsets {}",
        "59 micro-batches in the last 59s (120 in all): 590 rows in, 708 log records, 0 skipped as "
        "committed; the last: batch 120, snapshot 120, offsets {}",  # the rest, when it closes
    ]
    assert monitor.batches == 120 and monitor.last_batch is not None and monitor.last_batch["batch_id"] == 120


def test_publish_after_commit_reaches_the_application_only_when_asked() -> None:
    from airflow_logstore.write.write_job import dual_write_parser

    asked = operator(publish_after_commit=True).application_args("w", "r", "file:///ckpt")
    plain = operator().application_args("w", "r", "file:///ckpt")
    assert "--publish-after-commit" in asked and "--publish-after-commit" not in plain
    assert dual_write_parser().parse_args(asked).publish_after_commit
    assert not dual_write_parser().parse_args(plain).publish_after_commit
