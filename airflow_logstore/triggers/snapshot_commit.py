"""SnapshotCommitTrigger: waits in the triggerer for an Iceberg snapshot committing a LogStore batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_logstore.exceptions import ServiceError, classify, first_line

if TYPE_CHECKING:
    from airflow_logstore.hooks.logstore import LogStoreHook

#: Longest wait between two attempts after errors (the backoff doubles up to it).
MAX_BACKOFF_S = 60.0

#: States of the writing task that end the wait: it failed for good (``up_for_retry`` does not: a
#: retry comes).
WRITE_FAILED_STATES = frozenset({"failed", "upstream_failed"})


def task_state(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str | None:
    """The state of one task instance of a DAG run, asked of Airflow through the Task SDK (as the
    standard provider's external-task triggers do: in the triggerer and in a worker alike); None
    while it has none. An error (Airflow's API unreachable) is a retryable ``ServiceError``."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    try:
        states = RuntimeTaskInstance.get_task_states(
            dag_id=dag_id, task_ids=[task_id], run_ids=[run_id], map_index=map_index
        )
    except Exception as exc:
        raise ServiceError(
            f"could not read the state of task '{task_id}' of run {run_id} of DAG '{dag_id}': "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from exc
    key = task_id if map_index < 0 else f"{task_id}_{map_index}"
    state = (states.get(run_id) or {}).get(key)
    return None if state is None else str(state)


class SnapshotCommitTrigger(BaseTrigger):
    """Poll the table's metadata (pyiceberg) until a matching dual-write snapshot exists.

    :param table: ``namespace.table``
    :param writer_id: only this writer's commits (optional)
    :param batch_id: the batch to wait for (else: any LogStore commit after ``after_snapshot_id``)
    :param after_snapshot_id: wait for a commit newer than this snapshot
    :param poll_interval: seconds between metadata reads
    :param timeout: seconds before the trigger gives up with a ``timeout`` event (None: never)
    :param not_before_ms: a failure report of the batch written at or after this time (ms since the
        epoch; e.g. the run's start) ends the wait with a ``failed`` event; None: any report
    :param max_backoff: longest wait between attempts after errors; a retryable error (an unreachable
        catalog) is retried, waiting ``poll_interval`` doubled per failed attempt, until ``timeout``
    :param dag_id: with ``run_id`` and ``write_task_id``: the DAG run whose task writes the batch
    :param run_id: see ``dag_id``
    :param write_task_id: the task writing the batch in that run (optional): when neither a commit nor
        a failure report is found and that task is ``failed`` or ``upstream_failed`` (its last try was
        killed: the OOM killer, a lost worker; it left no report), the wait ends with a ``failed``
        event. Its state is asked of Airflow at each such poll (:func:`task_state`)
    :param write_map_index: the map index of that task (-1: not mapped)
    :param log_defaults: log once which embedded default applies when no connection is configured
        (False: the task that deferred said so already)

    The wait ends early (``failed``) when the write of the batch failed for good: its failure report
    says so, or its task (``write_task_id``) failed without leaving one. A commit always wins.

    The loop's clock and sleep are attributes (``clock``, ``sleep``) so that tests can drive it.
    """

    def __init__(
        self,
        *,
        table: str,
        logstore_conn_id: str = "logstore_default",
        kafka_config_id: str | None = "kafka_default",
        writer_id: str | None = None,
        batch_id: int | None = None,
        after_snapshot_id: int | None = None,
        poll_interval: float = 2.0,
        timeout: float | None = None,
        not_before_ms: int | None = None,
        max_backoff: float = MAX_BACKOFF_S,
        dag_id: str | None = None,
        run_id: str | None = None,
        write_task_id: str | None = None,
        write_map_index: int = -1,
        log_defaults: bool = True,
    ) -> None:
        super().__init__()
        self.table = table
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.after_snapshot_id = after_snapshot_id
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.not_before_ms = not_before_ms
        self.max_backoff = max_backoff
        self.dag_id = dag_id
        self.run_id = run_id
        self.write_task_id = write_task_id
        self.write_map_index = write_map_index
        self.log_defaults = log_defaults
        if write_task_id is not None and (dag_id is None or run_id is None):
            raise ValueError(f"write_task_id '{write_task_id}' needs the dag_id and run_id of its DAG run")
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self._hook: LogStoreHook | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "logstore_conn_id": self.logstore_conn_id,
                "kafka_config_id": self.kafka_config_id,
                "writer_id": self.writer_id,
                "batch_id": self.batch_id,
                "after_snapshot_id": self.after_snapshot_id,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "not_before_ms": self.not_before_ms,
                "max_backoff": self.max_backoff,
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "write_task_id": self.write_task_id,
                "write_map_index": self.write_map_index,
                "log_defaults": self.log_defaults,
            },
        )

    def poll_once(self) -> tuple[str, dict[str, Any]]:
        """One look, in this order: the table's commit (``success``: a commit always wins, even of a
        write killed after it), the batch's failure report since ``not_before_ms`` (``failed``: a retry
        cannot fix it), the state of ``write_task_id`` (``failed``: it failed for good without a
        report); else ``waiting``."""
        from airflow_logstore.table.reports import read_failure
        from airflow_logstore.table.snapshots import commit_xcom, find_commit

        handle = self.hook().table(self.table)
        table = handle.load()
        commit = find_commit(
            handle,
            writer_id=self.writer_id,
            batch_id=self.batch_id,
            after_snapshot_id=self.after_snapshot_id,
            table=table,
        )
        if commit is not None:
            return "success", {"commit": commit_xcom(commit, self.table)}
        if self.writer_id is not None and self.batch_id is not None:
            failure = read_failure(table, self.writer_id, self.batch_id)
            if failure is not None and failure.stops_wait_since(self.not_before_ms):
                return "failed", {
                    "failure": failure.to_json(),
                    "message": f"{self._the_write()} failed for good (epoch {failure.epoch}): "
                    f"{failure.describe()}",
                }
        if self.write_task_id is not None:
            assert self.dag_id is not None and self.run_id is not None  # checked in __init__
            state = task_state(self.dag_id, self.run_id, self.write_task_id, self.write_map_index)
            if state in WRITE_FAILED_STATES:
                task = self.write_task_id + (f"[{self.write_map_index}]" if self.write_map_index >= 0 else "")
                why = (
                    "it never ran: a task upstream of it failed"
                    if state == "upstream_failed"
                    else "it left no failure report: its last try was killed or could not report "
                    "(the OOM killer, a lost worker, a heartbeat timeout; see the task's log)"
                )
                return "failed", {
                    "failure": {
                        "task_id": self.write_task_id,
                        "map_index": self.write_map_index,
                        "state": state,
                    },
                    "message": f"{self._the_write()} failed for good: its task '{task}' is {state} in run "
                    f"{self.run_id}; {why}",
                }
        return "waiting", {}

    def hook(self) -> LogStoreHook:
        """The hook every poll of this trigger goes through: it reads the connections at each poll, and
        says once which embedded default applies."""
        from airflow_logstore.hooks.logstore import LogStoreHook

        if self._hook is None:
            self._hook = LogStoreHook(
                self.logstore_conn_id, self.kafka_config_id, log_defaults=self.log_defaults
            )
        return self._hook

    def _the_write(self) -> str:
        """The write waited for, in words (for messages)."""
        what = "the dual write" if self.batch_id is None else f"the dual write of batch {self.batch_id}"
        what += f" of {self.table}"
        return what if self.writer_id is None else f"{what} by writer '{self.writer_id}'"

    def backoff(self, failed_attempts: int) -> float:
        """Seconds to wait after the ``failed_attempts``-th failed attempt in a row."""
        return float(min(self.max_backoff, self.poll_interval * 2 ** (failed_attempts - 1)))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = self.clock()
        polls = failed = 0
        last_error = ""
        while True:
            polls += 1
            try:
                status, payload = await sync_to_async(self.poll_once)()
            except Exception as exc:
                error_class, retryable = classify(exc)
                last_error = f"{error_class}: {first_line(exc)}"
                if not retryable:  # e.g. a missing table: waiting longer cannot help
                    yield TriggerEvent({"status": "error", "message": last_error, "polls": polls})
                    return
                failed += 1
                delay = self.backoff(failed)
                self.log.warning(
                    "attempt %s to read %s failed (%s, %s in a row); retrying in %.1fs",
                    polls,
                    self.table,
                    last_error,
                    failed,
                    delay,
                )
            else:
                if status != "waiting":
                    yield TriggerEvent({"status": status, "polls": polls, **payload})
                    return
                failed, delay = 0, self.poll_interval
                self.log.info("no matching snapshot of %s yet (poll %s)", self.table, polls)
            elapsed = self.clock() - started
            if self.timeout is not None and elapsed >= self.timeout:
                yield TriggerEvent(self._timeout_event(polls, last_error if failed else ""))
                return
            if self.timeout is not None:
                delay = min(delay, self.timeout - elapsed)
            await self.sleep(delay)

    def _timeout_event(self, polls: int, last_error: str) -> dict[str, Any]:
        message = f"no matching snapshot of {self.table} after {self.timeout:.0f}s"
        if last_error:
            message += f" (the last attempts failed: {last_error})"
        return {"status": "timeout", "polls": polls, "message": message}
