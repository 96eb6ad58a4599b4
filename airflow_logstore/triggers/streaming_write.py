"""StreamingDualWriteTrigger: watches a running streaming dual write (a long-running Spark application).

It reads what the application leaves next to the table (:mod:`airflow_logstore.table.streams`, its
result and failure report), so it works wherever the driver runs, and fires once, when the application
ended:

- ``finished`` or ``stopped``: its result (a bounded run ended, or a stop request was obeyed);
- ``failed``: the driver's failure report (the error, and whether a retry can help);
- ``lost``: the application ended without either (killed: SIGKILL, the OOM killer, a lost host), or
  its heartbeat stopped for ``heartbeat_timeout`` seconds; then a stop request is left for it (a
  driver that was only cut off stops when it sees it) and, when it runs on this host, its process group
  is killed.

Liveness is judged by the heartbeat's counter changing, measured with this process's own monotonic
clock (never by comparing the driver's clock with this one), and, when the application was started on
this host, by its process (pid and start time, so a reused pid is not taken for it). Errors reading the
table (a catalog that is down) are logged and retried; they never end the wait by themselves.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_logstore.exceptions import classify, first_line

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable

MAX_BACKOFF_S = 60.0
#: seconds between two progress lines of a running application (the first: at the first look at its status)
PROGRESS_EVERY_S = 60.0


def process_alive(pid: int | None, started: float | None) -> bool | None:
    """Whether process ``pid`` (started at ``started``, psutil's create time) still runs; None when
    there is no such process to look at (no pid given)."""
    if pid is None:
        return None
    import psutil

    try:
        process = psutil.Process(pid)
        if started is not None and abs(process.create_time() - started) > 1.0:
            return False  # the pid was reused by another process
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_group(pid: int | None, started: float | None, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to the process group led by ``pid`` (spark-submit, its JVM and the Python driver),
    when it is still that process. True when it was sent."""
    if not process_alive(pid, started):
        return False
    assert pid is not None
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


class StreamingDualWriteTrigger(BaseTrigger):
    """Wait until the streaming dual write submitted with ``report_id`` ends; fire how it ended.

    :param table: ``namespace.table``
    :param report_id: the id the operator submitted the application with
    :param pid: spark-submit's process (a process group leader), when started on ``host``
    :param pid_started: its start time (psutil's ``create_time``)
    :param host: the host ``pid`` is on (its processes are looked at only there)
    :param heartbeat_timeout: seconds without a new heartbeat after which the application counts as lost
    :param poll_interval: seconds between two looks
    :param log_path: the application's output on ``host`` (its end is quoted when it was lost)
    """

    def __init__(
        self,
        *,
        table: str,
        report_id: str,
        pid: int | None = None,
        pid_started: float | None = None,
        host: str | None = None,
        heartbeat_timeout: float = 120.0,
        poll_interval: float = 5.0,
        log_path: str | None = None,
        logstore_conn_id: str = "logstore_default",
        kafka_config_id: str | None = "kafka_default",
        max_backoff: float = MAX_BACKOFF_S,
    ) -> None:
        super().__init__()
        self.table = table
        self.report_id = report_id
        self.pid = pid
        self.pid_started = pid_started
        self.host = host
        self.heartbeat_timeout = heartbeat_timeout
        self.poll_interval = poll_interval
        self.log_path = log_path
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.max_backoff = max_backoff
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self._beats: Any = None
        self._beat_seen_at: float | None = None
        self._progress_at: float | None = None  # when the last progress line was logged
        self._hook: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "report_id": self.report_id,
                "pid": self.pid,
                "pid_started": self.pid_started,
                "host": self.host,
                "heartbeat_timeout": self.heartbeat_timeout,
                "poll_interval": self.poll_interval,
                "log_path": self.log_path,
                "logstore_conn_id": self.logstore_conn_id,
                "kafka_config_id": self.kafka_config_id,
                "max_backoff": self.max_backoff,
            },
        )

    def _handle(self) -> LogStoreTable:
        """The table, through one hook for every poll (it reads the connections at each poll and says once
        which embedded default applies)."""
        from airflow_logstore.hooks.logstore import LogStoreHook

        if self._hook is None:
            self._hook = LogStoreHook(self.logstore_conn_id, self.kafka_config_id)
        return self._hook.table(self.table)

    def _local(self) -> bool:
        return self.pid is not None and self.host == socket.gethostname()

    def look(self) -> dict[str, Any] | None:
        """One look (blocking): the event to fire, or None while the application runs."""
        from airflow_logstore.table import streams
        from airflow_logstore.table.reports import read_attempt_failure, read_result

        gone = self._local() and not process_alive(self.pid, self.pid_started)  # before the files
        table = self._handle().load()
        result = read_result(table, self.report_id)
        if result is not None:
            stopped = bool(result.get("stopped")) if isinstance(result, dict) else False
            streams.remove(table, self.report_id)  # the application ended: its heartbeat is history
            return {"status": "stopped" if stopped else "finished", "result": result}
        failure = read_attempt_failure(table, self.report_id)
        if failure is not None:
            streams.remove(table, self.report_id)
            return {"status": "failed", "failure": failure.to_json(), "message": failure.describe()}
        if gone:  # decided without the heartbeat: what the dead process left there says nothing more
            return self._lost(table, f"its process {self.pid} ended without a result or a failure report")
        status = streams.read_status(table, self.report_id)
        beats = (status or {}).get("beats")
        now = self.clock()
        if beats != self._beats or self._beat_seen_at is None:
            self._beats, self._beat_seen_at = beats, now
        elif now - self._beat_seen_at >= self.heartbeat_timeout:
            return self._lost(table, f"no heartbeat for {now - self._beat_seen_at:.0f}s")
        if status is not None and (self._progress_at is None or now - self._progress_at >= PROGRESS_EVERY_S):
            self._progress_at = now
            self.log.info(
                "streaming dual write of %s (writer %s, epoch %s): %s, %s micro-batches, last %s",
                self.table,
                status.get("writer_id"),
                status.get("epoch"),
                status.get("state"),
                status.get("batches"),
                (status.get("last_batch") or {}).get("batch_id"),
            )
        return None

    def _lost(self, table: Any, why: str) -> dict[str, Any]:
        """The application is gone or cut off: ask it to stop, kill it here, say what is known."""
        from airflow_logstore.table import streams

        try:
            streams.request_stop(table, self.report_id)
        except Exception as exc:
            self.log.warning("could not leave a stop request: %s", first_line(exc))
        killed = self._local() and kill_group(self.pid, self.pid_started)
        message = f"the streaming dual write of {self.table} (report {self.report_id}) was lost: {why}"
        if killed:
            message += f"; its process group {self.pid} was killed"
        tail = self._log_tail()
        if tail:
            message += f"; the end of its output ({self.log_path}): {tail}"
        return {"status": "lost", "message": message}

    def _log_tail(self, lines: int = 5) -> str:
        if not self.log_path or self.host != socket.gethostname():
            return ""
        try:
            with open(self.log_path, errors="replace") as out:
                return " | ".join(line.strip() for line in out.readlines()[-lines:] if line.strip())
        except OSError:
            return ""

    def backoff(self, failed_attempts: int) -> float:
        return float(min(self.max_backoff, self.poll_interval * 2 ** (failed_attempts - 1)))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        failed = 0
        while True:
            try:
                event = await asyncio.to_thread(self.look)
            except Exception as exc:
                failed += 1
                delay = self.backoff(failed)
                error_class, _ = classify(exc)
                self.log.warning(
                    "looking at the streaming dual write of %s failed (%s: %s; %s in a row); retry in %.1fs",
                    self.table,
                    error_class,
                    first_line(exc),
                    failed,
                    delay,
                )
                await self.sleep(delay)
                continue
            failed = 0
            if event is not None:
                yield TriggerEvent({"report_id": self.report_id, **event})
                return
            await self.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The task was marked failed, cleared or set to success while deferred (Airflow 3.3+): stop the
        application (a stop request; its process group too when it runs here)."""
        from airflow_logstore.table import streams

        def stop() -> None:
            try:  # each step on its own: a catalog that cannot be reached still lets the process go
                streams.request_stop(self._handle().load(), self.report_id)
            except Exception as exc:
                self.log.warning(
                    "could not leave a stop request (%s: %s)", type(exc).__name__, first_line(exc)
                )
            if self._local():
                kill_group(self.pid, self.pid_started, signal.SIGTERM)

        await asyncio.to_thread(stop)
