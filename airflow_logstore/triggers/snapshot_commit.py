"""SnapshotCommitTrigger: waits in the triggerer for an Iceberg snapshot committing a LogStore batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_logstore.exceptions import classify, first_line

#: Longest wait between two attempts after errors (the backoff doubles up to it).
MAX_BACKOFF_S = 60.0


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
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep

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
            },
        )

    def _check(self) -> dict[str, Any] | None:
        """The matching commit (as pushed to XCom), or None."""
        status, payload = self.poll_once()
        return payload["commit"] if status == "success" else None

    def poll_once(self) -> tuple[str, dict[str, Any]]:
        """One look at the table: ``success`` (the commit), ``failed`` (the batch's write failed for
        good since ``not_before_ms``: a retry cannot fix it) or ``waiting``."""
        from airflow_logstore.hooks.logstore import LogStoreHook
        from airflow_logstore.table.reports import read_failure
        from airflow_logstore.table.snapshots import commit_xcom, find_commit

        handle = LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(self.table)
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
                    "message": f"the dual write of batch {self.batch_id} of {self.table} by writer "
                    f"'{self.writer_id}' failed for good (epoch {failure.epoch}): {failure.describe()}",
                }
        return "waiting", {}

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
