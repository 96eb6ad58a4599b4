"""logstore_streaming: a streaming dual write from a Kafka topic, supervised by Airflow.

Each micro-batch of the source topic (JSON change rows: the table's columns and an optional ``op``) is
committed to the table and its log. The write runs as a long-running Spark application, watched from
the triggerer: the task ends when the application does (after ``run_for`` seconds, or a stop request),
fails with the driver's error when it fails, and is retried when it is lost; a retry goes on from the
checkpoint under a new epoch (logstore_reconcile reverses what the lost one left in the log).
Visibility is published continuously on the table's commit events (logstore_publish), and
logstore_downstream reads what becomes visible.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_logstore.operators.create_table import LogStoreCreateTableOperator
from airflow_logstore.operators.streaming_write import LogStoreStreamingDualWriteOperator

# [START logstore_streaming_table]
TABLE = "demo.orders_stream"
# [END logstore_streaming_table]

with DAG(
    dag_id="logstore_streaming",
    description="A streaming dual write (Structured Streaming) supervised from the triggerer",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "source_topic": Param(
            "orders_source", type="string", minLength=1, title="Source topic", description="JSON change rows"
        ),
        "run_for": Param(
            None,
            type=["null", "number"],
            minimum=1,
            title="Run for (seconds)",
            description="Stop after this long; empty: until the task is stopped",
        ),
    },
    tags=["logstore", "example"],
    doc_md=__doc__,
) as dag:
    # [START logstore_streaming_tasks]
    create = LogStoreCreateTableOperator(
        task_id="create_table",
        table=TABLE,
        schema="id int, customer string, amount long, status string",
        primary_key=["id"],
        properties={
            "log-store.enabled": "true",
            "log-store.topic": TABLE.replace(".", "_") + "_log",
            "log-store.address": "{{ var.value.get('logstore_kafka_address', '127.0.0.1:19092') }}",
            "log-store.partitions": "3",
            # a snapshot a micro-batch: keep an hour of them (logstore_compaction expires the rest), so
            # that each commit stays cheap (README: "A stream's snapshots")
            "history.expire.max-snapshot-age-ms": str(3600 * 1000),
        },
    )
    stream = LogStoreStreamingDualWriteOperator(
        task_id="stream",
        table=TABLE,
        source_topic="{{ params.source_topic }}",
        run_for="{{ params.run_for }}",
        trigger_interval="1 second",
        retries=2,
        retry_delay=timedelta(seconds=30),
    )
    create >> stream
    # [END logstore_streaming_tasks]
