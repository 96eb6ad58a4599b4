"""What the LogStore operators share: their connections (:class:`LogStoreOperator`) and, for those that
submit a PySpark job (dual write, compaction, reconciliation), one submission that hands the job a new
report id and reads the job's result back from next to the table, and cancelling the job when the task
is killed (:class:`SparkJobOperator`). Light at DAG parse time: the Spark provider's hook is imported
only when a job is submitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_logstore.hooks.logstore import LogStoreHook

if TYPE_CHECKING:
    from airflow_logstore.table.tables import LogStoreTable


class LogStoreOperator(BaseOperator):
    """Base of the LogStore operators: the connections a table is reached through.

    :param logstore_conn_id: the LogStore connection (the catalog)
    :param kafka_config_id: Apache Kafka provider connection with client settings (SASL, TLS); the
        bootstrap servers always come from the table
    """

    def __init__(
        self,
        *,
        logstore_conn_id: str = LogStoreHook.default_conn_name,
        kafka_config_id: str | None = "kafka_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id

    def logstore_table(self, name: str) -> LogStoreTable:
        """The LogStore table ``name`` through this operator's connections."""
        return LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(name)


class SparkJobOperator(LogStoreOperator):
    """Base of the operators that run a PySpark application of ``airflow_logstore/spark_apps/`` through
    the Airflow Spark provider. Catalog and Kafka secrets reach Spark through a private properties file.

    :param spark_conn_id: Airflow Spark connection (master, deploy mode, spark-submit binary)
    :param jars: comma-separated jars for Spark; None: ``LOGSTORE_SPARK_JARS``, ``spark.jars`` /
        ``spark.jars.packages`` in the settings, else the local cache; "": none (in the Spark image)
    :param python: Python executable of the driver and executors (default: ``spark.pyspark.python``
        from ``spark_conf`` or the connection's ``spark-conf`` extra, ``PYSPARK_PYTHON``; this
        interpreter only for a local master)
    :param spark_conf: extra Spark settings (over the connection's ``spark-conf`` extra)
    """

    def __init__(
        self,
        *,
        spark_conn_id: str = "spark_default",
        jars: str | None = None,
        python: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.jars = jars
        self.python = python
        self.spark_conf = dict(spark_conf or {})
        self._submit_hook: Any = None
        #: the ``--report-id`` of the last job submitted (its result and failure report)
        self._report_id: str | None = None

    def run_job(
        self,
        handle: LogStoreTable,
        script: str,
        *,
        name: str,
        application_args: Sequence[str],
        what: str,
        writer_id: str | None = None,
        batch_id: int | None = None,
    ) -> dict[str, Any]:
        """Submit ``script`` with ``application_args`` and a new ``--report-id``; return the result the
        job left next to the table (``what`` names the job in errors).

        When spark-submit fails, the job's own failure report (of ``writer_id``'s batch ``batch_id``
        for a dual write, else under the report id) gives the task's exception: its cause, not the
        spark-submit command line (:func:`~airflow_logstore.operators._failures.job_failure`).
        """
        from airflow.sdk.exceptions import AirflowException

        from airflow_logstore.operators._failures import job_failure
        from airflow_logstore.operators._spark import job_path, job_result, spark_submit_hook

        report_id = self._report_id = uuid.uuid4().hex
        with spark_submit_hook(
            catalog=handle.catalog,
            kafka_extra=handle.kafka_extra,
            conn_id=self.spark_conn_id,
            name=name,
            application_args=[*application_args, "--report-id", report_id],
            jars=self.jars,
            python=self.python,
            conf=self.spark_conf,
        ) as hook:
            self._submit_hook = hook
            try:
                hook.submit(job_path(script))
            except AirflowException as exc:
                raise job_failure(
                    handle,
                    what=what,
                    report_id=report_id,
                    submit_error=exc,
                    writer_id=writer_id,
                    batch_id=batch_id,
                ) from None
        return job_result(handle, report_id, what)

    def on_kill(self) -> None:
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
