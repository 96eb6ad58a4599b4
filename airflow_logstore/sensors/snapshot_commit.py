"""SnapshotCommitSensor: wait for the Iceberg snapshot that commits a LogStore batch."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_logstore.hooks.logstore import LogStoreHook
from airflow_logstore.triggers.snapshot_commit import SnapshotCommitTrigger


class SnapshotCommitSensor(BaseSensorOperator):
    """Wait until a dual-write snapshot matching the condition is committed; push its commit to XCom.

    Matches a given batch (and writer), or any LogStore commit newer than ``after_snapshot_id``.
    Reads table metadata with pyiceberg only. Compaction snapshots never match. In deferrable mode
    the wait runs in the triggerer (:class:`SnapshotCommitTrigger`) and frees the worker slot; errors
    there (an unreachable catalog) are retried with backoff until ``timeout``.

    When the write of the batch (writer and batch given) fails for good during this DAG run (its job
    left a failure report that a retry cannot fix, e.g. bad input, or its task's last try failed and
    left a final report), the sensor fails at once with ``AirflowFailException`` naming the failed
    write, instead of waiting for its timeout; so does an error of the trigger that waiting longer
    cannot fix (a missing table). A write task whose last try is killed (the OOM killer, a lost worker,
    a heartbeat timeout) leaves no report: name it in ``write_task_id`` and the sensor also fails at
    once when that task of the same DAG run is ``failed`` or ``upstream_failed`` (not
    ``up_for_retry``: a retry comes) while no commit of the batch exists (a commit always wins).

    :param table: ``namespace.table``
    :param batch_id: batch to wait for (templated)
    :param writer_id: writer of the batch (templated; optional)
    :param after_snapshot_id: else wait for any commit newer than this snapshot (templated)
    :param poke_before_defer: check once in the worker before deferring (False: the whole wait runs
        in the triggerer)
    :param write_task_id: the task of this DAG that writes the batch (optional; of a mapped writer,
        the instance with this sensor's map index); None: only failure reports end the wait
    """

    template_fields: Sequence[str] = ("table", "batch_id", "writer_id", "after_snapshot_id")
    ui_color = "#e8f0fb"

    def __init__(
        self,
        *,
        table: str,
        batch_id: int | str | None = None,
        writer_id: str | None = None,
        after_snapshot_id: int | str | None = None,
        logstore_conn_id: str = LogStoreHook.default_conn_name,
        kafka_config_id: str | None = "kafka_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poke_before_defer: bool = True,
        write_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.batch_id = batch_id
        self.writer_id = writer_id
        self.after_snapshot_id = after_snapshot_id
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.deferrable = deferrable
        self.poke_before_defer = poke_before_defer
        self.write_task_id = write_task_id
        #: the trigger whose ``poll_once`` every poke of this try runs (one hook: its notices said once)
        self._poller: SnapshotCommitTrigger | None = None

    @staticmethod
    def _int(name: str, value: int | str | None) -> int | None:
        if value in (None, "", "None"):
            return None
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be an integer, got {value!r}") from None

    @staticmethod
    def _run_started_ms(context: Any) -> int | None:
        """When this DAG run started (a cleared run starts again): older failure reports are stale."""
        dag_run = context.get("dag_run") if hasattr(context, "get") else None
        started = getattr(dag_run, "start_date", None)
        return int(started.timestamp() * 1000) if started is not None else None

    def _write_task(self, context: Any) -> dict[str, Any]:
        """The trigger's arguments naming the write task's instance in this DAG run (none without
        ``write_task_id``)."""
        if self.write_task_id is None:
            return {}
        if self.has_dag() and not self.dag.has_task(self.write_task_id):
            raise AirflowFailException(
                f"write_task_id '{self.write_task_id}' of {self.task_id} is no task of DAG '{self.dag_id}'"
            )
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is None:
            raise AirflowFailException(
                f"write_task_id '{self.write_task_id}': {self.task_id} runs without a task instance"
            )
        writer_mapped = self.has_dag() and bool(self.dag.get_task(self.write_task_id).is_mapped)
        map_index = getattr(ti, "map_index", -1) if writer_mapped else -1
        return {
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "write_task_id": self.write_task_id,
            "write_map_index": map_index if isinstance(map_index, int) else -1,
        }

    def _trigger(self, context: Any = None, *, log_defaults: bool = True) -> SnapshotCommitTrigger:
        return SnapshotCommitTrigger(
            table=self.table,
            logstore_conn_id=self.logstore_conn_id,
            kafka_config_id=self.kafka_config_id,
            writer_id=self.writer_id or None,
            batch_id=self._int("batch_id", self.batch_id),
            after_snapshot_id=self._int("after_snapshot_id", self.after_snapshot_id),
            poll_interval=float(self.poke_interval),
            timeout=float(self.timeout) if self.timeout else None,
            not_before_ms=self._run_started_ms(context or {}),
            log_defaults=log_defaults,
            **self._write_task(context or {}),
        )

    def _look(self, trigger: SnapshotCommitTrigger) -> dict[str, Any] | None:
        """The commit, None while waiting; ``AirflowFailException`` when the write failed for good."""
        status, payload = trigger.poll_once()
        if status == "failed":
            raise AirflowFailException(payload["message"])
        return payload["commit"] if status == "success" else None

    def poke(self, context: Any) -> PokeReturnValue:
        if self._poller is None:
            self._poller = self._trigger(context)
        found = self._look(self._poller)
        if found is not None:
            self.log.info(
                "snapshot %s committed batch %s of %s (epoch %s, offsets %s)",
                found["snapshot_id"],
                found["batch_id"],
                found["writer_id"],
                found["epoch"],
                found["offsets"],
            )
        return PokeReturnValue(found is not None, found)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        found = self._look(self._trigger(context)) if self.poke_before_defer else None
        if found is not None:
            self.log.info("snapshot %s already committed batch %s", found["snapshot_id"], found["batch_id"])
            return found
        self.log.info(
            "deferring: waiting for a snapshot of %s (batch %s, writer %s)",
            self.table,
            self.batch_id,
            self.writer_id,
        )
        self.defer(
            # the poll above said which embedded default applies: the triggerer does not repeat it
            trigger=self._trigger(context, log_defaults=not self.poke_before_defer),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") in ("failed", "error"):  # the trigger's errors are those a retry cannot fix
            raise AirflowFailException(
                f"waiting for a snapshot of {self.table} failed: {event.get('message', event)}"
                if event.get("status") == "error"
                else event.get("message", event)
            )
        if event.get("status") == "timeout":  # as Airflow's sensors end a wait: no retry
            raise AirflowSensorTimeout(
                f"waiting for a snapshot of {self.table}: {event.get('message', event)}"
            )
        if event.get("status") != "success":
            raise RuntimeError(
                f"waiting for a snapshot of {self.table} failed: {event.get('message', event)}"
            )
        commit = event["commit"]
        self.log.info(
            "snapshot %s committed batch %s of %s (epoch %s, offsets %s) after %s polls in the triggerer",
            commit["snapshot_id"],
            commit["batch_id"],
            commit["writer_id"],
            commit["epoch"],
            commit["offsets"],
            event.get("polls"),
        )
        return commit
