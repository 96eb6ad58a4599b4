"""logstore_pipeline: create → dual write → wait for the snapshot → publish visible offsets → read.

Trigger it from the Airflow UI ("Trigger DAG" shows a form for the params below) or the REST API:

    POST /api/v2/dags/logstore_pipeline/dagRuns  {"logical_date": null, "conf": {"batch_id": 2, ...}}

The whole chain is one call, ``logstore_batch`` (``airflow_logstore.task_group``). DAGs downstream of the
table are scheduled on its *visible* asset (see logstore_downstream): they run once the batch is
published, never on the write alone.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from airflow_logstore.task_group import logstore_batch

SAMPLE_INPUT = str(Path(__file__).parent / "data" / "orders_batch_1.jsonl")
TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"

# [START logstore_pipeline_params]
PARAMS = {
    "table": Param(
        "demo.orders",
        type="string",
        pattern=TABLE_PATTERN,
        title="Table",
        description="namespace.table (letters, digits, '_')",
    ),
    "input_path": Param(
        SAMPLE_INPUT,
        type="string",
        minLength=1,
        title="Input path",
        description="JSON lines, CSV or Parquet file or folder; an 'op' column may say insert/update/delete",
    ),
    "batch_id": Param(
        1,
        type="integer",
        minimum=1,
        title="Batch id",
        description="The same batch id on a re-run is idempotent: nothing is written twice",
    ),
    "read_mode": Param(
        "log",
        type="string",
        enum=["file", "log", "hybrid"],
        title="Read mode",
        description="file: the snapshot; log: the Kafka log; hybrid: the snapshot, then the log "
        "from its offsets",
    ),
    "consistency": Param(
        "consistent",
        type="string",
        enum=["consistent", "eventual", "transactional"],
        title="Log consistency",
        description="consistent: exactly-once, after the snapshot commits; "
        "eventual: at once, at-least-once; transactional: Paimon's name of consistent",
    ),
    "emit_mode": Param(
        "file,log",
        type="string",
        enum=["file,log", "file"],
        title="Emit mode",
        description="mixed-format.emit.mode of this write (log-only writes have no snapshot "
        "to wait for: use the CLI or the operator directly)",
    ),
}
# [END logstore_pipeline_params]

with DAG(
    dag_id="logstore_pipeline",
    description="Dual write a batch to an Iceberg table and its Kafka log, gate visibility on the snapshot",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=PARAMS,
    tags=["logstore", "example"],
    doc_md=__doc__,
) as dag:
    # [START logstore_pipeline_tasks]
    logstore_batch(
        table="{{ params.table }}",
        input_path="{{ params.input_path }}",
        batch_id="{{ params.batch_id }}",
        writer_id="logstore_pipeline",
        emit_mode="{{ params.emit_mode }}",
        schema="id int, customer string, amount long, status string",
        primary_key=["id"],
        properties={
            "log-store.enabled": "true",
            "log-store.topic": "{{ params.table | replace('.', '_') }}_log",
            "log-store.address": "{{ var.value.get('logstore_kafka_address', '127.0.0.1:19092') }}",
            "log-store.partitions": "3",
            "log.consumer.changelog.modes": "all-kinds",
        },
        read_mode="{{ params.read_mode }}",
        consistency="{{ params.consistency }}",
        retries=2,
        prefix_group_id=False,  # the tasks keep their short ids: create_table, dual_write, ...
    )
    # [END logstore_pipeline_tasks]
