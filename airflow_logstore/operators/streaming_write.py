"""LogStoreStreamingDualWriteOperator: a supervised, long-running streaming dual write (deferrable)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import first_line
from airflow_logstore.operators._base import SparkJobOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin, kafka_dataset

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable

#: the folder of the applications' output in the temporary directory (one per OS user, see tempdirs)
OUTPUT_FOLDER = "logstore-streams"
#: an application's output not written to for this long is removed when the next one starts
OUTPUT_MAX_AGE_S = 7 * 24 * 3600
#: Spark settings of a long-running application unless the operator's ``spark_conf`` says otherwise:
#: Spark's own INFO lines, per micro-batch, would fill its output file over days
STREAM_CONF = {"spark.log.level": "WARN"}
#: seconds between the task's lines while it waits for the application's first heartbeat
STARTUP_PROGRESS_S = 30.0


def output_file(report_id: str) -> Path:
    """Where the application submitted with ``report_id`` writes its output; outputs of applications
    that ended long ago (:data:`OUTPUT_MAX_AGE_S` without a write) are removed first."""
    from airflow_logstore.tempdirs import private_folder

    folder = private_folder(OUTPUT_FOLDER)
    now = time.time()
    for old in folder.glob("*.log"):
        try:
            if now - old.stat().st_mtime > OUTPUT_MAX_AGE_S:
                old.unlink()
        except OSError:
            pass
    return folder / f"{report_id}.log"


def launch_detached(hook: Any, application: str, log_path: Path) -> subprocess.Popen[bytes]:
    """Start spark-submit as the Spark provider's hook builds it (the same command, secrets in the
    properties file, the same scrubbed environment), in a session of its own so that it outlives the
    task's process while the task is deferred; its output goes to ``log_path``.

    Its stdin is ``/dev/null``, not the task's: in Airflow 3 that is the task's socket to its supervisor,
    which would then wait for the application's end to report the deferral (a worker slot held all
    along, and that late report, arriving when the stream ends while the resumed task runs, makes the
    scheduler fail the running try)."""
    from airflow_logstore.spark.jobconf import submit_environment

    command = hook._build_spark_submit_command(application)
    env = submit_environment(os.environ)
    if hook._env:
        env.update({str(k): str(v) for k, v in hook._env.items()})
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=os.getcwd(),
        )


def default_checkpoint(location: str, writer_id: str) -> str:
    """The checkpoint folder of ``writer_id``'s stream next to its table (a Hadoop path)."""
    from urllib.parse import quote

    base = "s3a://" + location[len("s3://") :] if location.startswith("s3://") else location
    return f"{base.rstrip('/')}/logstore/streams/checkpoints/{quote(writer_id, safe='')}"


class LogStoreStreamingDualWriteOperator(LineageMixin, SparkJobOperator):
    """Run the Structured Streaming dual write (``dual_write.py --source-topic``) as a long-running Spark
    application, and supervise it from the triggerer.

    Each micro-batch of the source topic is one LogStore batch (its id is the micro-batch id): committed
    to the table, its records in the log. The task submits the application, waits for its first
    heartbeat, then defers to :class:`~airflow_logstore.triggers.streaming_write.StreamingDualWriteTrigger`,
    which frees the worker slot and watches the application until it ends:

    - it ends by itself (``run_for`` elapsed, or a stop request): the task succeeds with its result;
    - it fails: the task fails with the driver's error (``AirflowFailException`` when a retry cannot
      fix it, e.g. a source record that does not fit the table);
    - it is lost (killed, its host gone, no heartbeat for ``heartbeat_timeout``): the task fails and
      its retries apply.

    A retry submits the application again with the same writer and checkpoint: it claims a new epoch,
    which fences the dead one, and the query goes on from its checkpoint (a micro-batch that was not
    committed runs again; one that was is skipped on both stores). The dead epoch's records stay in
    the log: consistent readers never see them, and reconciliation reverses them for eventual readers.
    Visibility is published by whoever publishes the table (``dags/logstore_publish.py`` on its commit
    events). ``on_kill`` stops the application (and, when the task is stopped while deferred, the
    trigger's ``on_kill`` does, on Airflow 3.3+).

    :param table: ``namespace.table`` (templated)
    :param source_topic: the Kafka topic of JSON change rows (table columns and ``change_column``)
    :param checkpoint: the streaming query's checkpoint folder, a Hadoop path the driver can reach
        (templated); default: next to the table, ``<table location>/logstore/streams/checkpoints/<writer>``
        (``s3a://`` for an ``s3://`` table). Keep it for the writer's whole life: a new checkpoint reads
        the source again
    :param writer_id: default ``<dag_id>.<task_id>``, the same on every retry (templated)
    :param source_bootstrap: the source's Kafka servers (default: the table's)
    :param trigger_interval: the micro-batch interval, e.g. ``"1 second"``
    :param run_for: stop after this many seconds (None: until stopped)
    :param heartbeat_interval: seconds between the application's heartbeats
    :param heartbeat_timeout: seconds without a heartbeat before the application counts as lost
    :param poll_interval: seconds between the trigger's looks
    :param publish_after_commit: the application publishes the watermark right after each micro-batch it
        commits (one long-lived publisher): its batches are visible without waiting for a publish task
    :param startup_timeout: seconds the task waits for the first heartbeat before it gives up

    The Spark and connection parameters are :class:`~airflow_logstore.operators._base.SparkJobOperator`'s.
    """

    template_fields: Sequence[str] = ("table", "source_topic", "checkpoint", "writer_id", "run_for")
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        table: str,
        source_topic: str,
        checkpoint: str | None = None,
        writer_id: str | None = None,
        source_bootstrap: str | None = None,
        trigger_interval: str = "1 second",
        max_offsets_per_trigger: int | None = None,
        run_for: float | str | None = None,
        change_column: str = "op",
        emit_mode: str | None = None,
        heartbeat_interval: float = 5.0,
        heartbeat_timeout: float = 120.0,
        poll_interval: float = 5.0,
        startup_timeout: float = 600.0,
        publish_after_commit: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.source_topic = source_topic
        self.checkpoint = checkpoint
        self.writer_id = writer_id
        self.source_bootstrap = source_bootstrap
        self.trigger_interval = trigger_interval
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.run_for = run_for
        self.change_column = change_column
        self.emit_mode = emit_mode
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.startup_timeout = startup_timeout
        self.publish_after_commit = publish_after_commit
        self._process: subprocess.Popen[bytes] | None = None
        self._killed = False  # on_kill ran: the wait for the first heartbeat ends with that, not a death

    def application_args(self, writer_id: str, report_id: str, checkpoint: str) -> list[str]:
        args = [
            "--table",
            self.table,
            "--source-topic",
            self.source_topic,
            "--checkpoint",
            checkpoint,
            "--writer-id",
            writer_id,
            "--trigger",
            self.trigger_interval,
            "--change-column",
            self.change_column,
            "--heartbeat-interval",
            str(self.heartbeat_interval),
            "--report-id",
            report_id,
        ]
        if self.source_bootstrap:
            args += ["--source-bootstrap", self.source_bootstrap]
        if self.max_offsets_per_trigger:
            args += ["--max-offsets-per-trigger", str(self.max_offsets_per_trigger)]
        if self.run_for not in (None, "", "None"):
            args += ["--timeout", str(float(self.run_for))]  # type: ignore[arg-type]
        if self.emit_mode:
            args += ["--emit-mode", self.emit_mode]
        if self.publish_after_commit:
            args.append("--publish-after-commit")
        return args

    def execute(self, context: Any) -> None:
        import psutil

        from airflow_logstore.core.properties import parse_emit_mode
        from airflow_logstore.operators._failures import fail_fast
        from airflow_logstore.operators._spark import job_path, spark_submit_hook
        from airflow_logstore.triggers.streaming_write import StreamingDualWriteTrigger

        writer_id = self.writer_id or f"{self.dag_id}.{self.task_id}"
        with fail_fast():  # a missing table or a bad emit mode: no Spark
            handle = self.logstore_table(self.table)
            config = handle.config()
            config.require_log()
            parse_emit_mode(self.emit_mode, config)
        report_id = self._report_id = uuid.uuid4().hex
        log_path = output_file(report_id)
        with spark_submit_hook(
            catalog=handle.catalog,
            kafka_extra=handle.kafka_extra,
            conn_id=self.spark_conn_id,
            name=f"logstore-stream-{self.table}",
            application_args=self.application_args(
                writer_id,
                report_id,
                self.checkpoint or default_checkpoint(handle.load().location(), writer_id),
            ),
            jars=self.jars,
            python=self.python,
            conf={**STREAM_CONF, **self.spark_conf},
        ) as hook:
            application = job_path("dual_write_app.py")
            command = hook._build_spark_submit_command(application)
            self.log.info("submitting the streaming dual write: %s", hook._mask_cmd(command))
            self._process = launch_detached(hook, application, log_path)
            # the properties file (secrets) is removed when the block ends: once the application runs
            try:
                status = self._wait_started(handle, report_id, log_path)
            except BaseException:  # never an application left running with no trigger watching it
                self._stop_application(report_id)
                raise
        pid = self._process.pid
        try:
            pid_started = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:  # spark-submit ended since its first heartbeat (a short run_for)
            pid_started = 0.0  # no process of that start: the trigger reads the result at once
        self.log.info(
            "streaming dual write of %s started: writer %s, epoch %s, spark-submit pid %s, output %s",
            self.table,
            writer_id,
            status.get("epoch"),
            pid,
            log_path,
        )
        self.defer(
            trigger=StreamingDualWriteTrigger(
                table=self.table,
                report_id=report_id,
                pid=pid,
                pid_started=pid_started,
                host=socket.gethostname(),
                heartbeat_timeout=self.heartbeat_timeout,
                poll_interval=self.poll_interval,
                log_path=str(log_path),
                logstore_conn_id=self.logstore_conn_id,
                kafka_config_id=self.kafka_config_id,
            ),
            method_name="execute_complete",
        )

    def _wait_started(self, handle: LogStoreTable, report_id: str, log_path: Path) -> dict[str, Any]:
        """The application's first heartbeat; its own error when it ended before it."""
        from airflow_logstore.exceptions import JobFailedError
        from airflow_logstore.operators._failures import failure_exception
        from airflow_logstore.table import streams
        from airflow_logstore.table.reports import read_attempt_failure

        assert self._process is not None
        started = time.monotonic()
        deadline, progress = started + self.startup_timeout, started + STARTUP_PROGRESS_S
        what = f"streaming dual write of {self.table}"
        self.log.info("waiting up to %.0fs for the application's first heartbeat", self.startup_timeout)
        read_error: str | None = None
        while True:
            if self._killed:
                raise JobFailedError(
                    "StreamKilled",
                    f"{what}: the task was killed before the application's first heartbeat; its "
                    f"application was stopped (output: {log_path})",
                    retryable=True,
                )
            try:
                status = streams.read_status(handle.load(), report_id)
            except Exception as exc:  # the catalog or its storage blinked: the deadline decides
                status, error = None, f"{type(exc).__name__}: {first_line(exc)}"
                if error != read_error:
                    self.log.warning("reading the heartbeat failed (%s); trying again", error)
                read_error = error
            if status is not None:
                return status
            code = self._process.poll()
            if code is not None:
                try:
                    failure = read_attempt_failure(handle.load(), report_id)
                except Exception as exc:  # the exit says more than the catalog's error
                    self.log.warning("could not read the application's failure report: %s", first_line(exc))
                    failure = None
                if failure is not None:
                    raise failure_exception(failure, what)
                raise JobFailedError(
                    "StreamDidNotStart",
                    f"{what}: spark-submit exited with code {code} before the application's first "
                    f"heartbeat, without a failure report; the end of its output ({log_path}): "
                    f"{_tail(log_path)}",
                    retryable=True,
                )
            now = time.monotonic()
            if now > deadline:
                self._stop_application(report_id)
                unread = f" (the last read of its heartbeat failed: {read_error})" if read_error else ""
                raise JobFailedError(
                    "StreamDidNotStart",
                    f"{what}: no heartbeat within {self.startup_timeout:.0f}s{unread}; stopped it. The end "
                    f"of its output ({log_path}): {_tail(log_path)}",
                    retryable=True,
                )
            if now > progress:
                progress = now + STARTUP_PROGRESS_S
                self.log.info("no heartbeat yet after %.0fs (output: %s)", now - started, log_path)
            time.sleep(1.0)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_logstore.core.failures import JobFailure
        from airflow_logstore.exceptions import JobFailedError
        from airflow_logstore.operators._failures import failure_exception

        status = event.get("status")
        what = f"streaming dual write of {self.table} (report {event.get('report_id')})"
        if status == "failed":
            raise failure_exception(JobFailure.from_json(event["failure"]), what)
        if status == "lost":
            raise JobFailedError("StreamLost", str(event.get("message")), retryable=True)
        if status not in ("finished", "stopped"):
            raise JobFailedError("StreamLost", f"{what}: unexpected event {event}", retryable=True)
        result = dict(event.get("result") or {})
        self.log.info("%s %s: %s", what, status, result)
        self.lineage_result = {
            "table": self.table,
            "status": status,
            "report_id": event.get("report_id"),
            **result,
        }
        return self.lineage_result

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the source topic in; the table (at the last micro-batch's snapshot) and its log
        topic out."""
        table = self.table_lineage(self.table)
        bootstrap = self.source_bootstrap or (table.config.bootstrap_servers if table.config else None)
        source = kafka_dataset(bootstrap, self.source_topic) if bootstrap else None
        last = (result or {}).get("last_batch") or {}
        return Lineage.of([source], table.written(self.emit_mode, last.get("snapshot_id")))

    def _stop_application(self, report_id: str | None) -> None:
        """Stop the application whatever went wrong (never raising over the error at hand): a stop
        request next to the table (a driver elsewhere, in cluster deploy mode, obeys it at its next
        heartbeat; none before the application was submitted) and the process group of the
        spark-submit started here."""
        from airflow_logstore.table import streams

        if report_id is not None:
            try:
                streams.request_stop(self.logstore_table(self.table).load(), report_id)
            except Exception as exc:
                self.log.warning("could not leave a stop request: %s", first_line(exc))
        try:
            self._stop_process()
        except Exception as exc:
            self.log.warning("could not stop the spark-submit process: %s", first_line(exc))

    def _stop_process(self) -> None:
        """Kill the process group of the spark-submit this task started, if it still runs."""
        import psutil

        from airflow_logstore.triggers.streaming_write import kill_group

        if self._process is None or self._process.poll() is not None:
            return
        try:
            started = psutil.Process(self._process.pid).create_time()
        except psutil.NoSuchProcess:
            return
        kill_group(self._process.pid, started)

    def on_kill(self) -> None:
        """Stop the application this task started (the task is killed while it waits for the first
        heartbeat): a stop request next to the table, and its process group."""
        self._killed = True
        self._stop_application(self._report_id)


def _tail(path: Path, lines: int = 8) -> str:
    try:
        with open(path, errors="replace") as out:
            return " | ".join(line.strip() for line in out.readlines()[-lines:] if line.strip())
    except OSError:
        return "(no output)"
