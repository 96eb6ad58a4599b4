"""A real Airflow (api-server, scheduler, dag-processor, triggerer) runs logstore_pipeline end to end.

The run is triggered through the REST API with a conf, as the UI's trigger form does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from airflow_logstore.publish.publisher import is_visible, publish_visible_offsets
from airflow_logstore.read.reader import read_log
from airflow_logstore.table.tables import LogStoreTable, create_table, snapshot_commits
from logstore_dev.services.airflow_local import LocalAirflow
from logstore_dev.testing.environment import REPO_ROOT, free_port_pair
from logstore_dev.testing.tables import write_jsonl

pytestmark = pytest.mark.airflow_e2e


#: logstore_pipeline with no retries of its write, whose Spark tasks wait at a pause point (see below).
HELD_DAG = "logstore_pipeline_held"


def held_pipeline(pauses: Path) -> str:
    """logstore_pipeline's source as DAG ``HELD_DAG``: its write is not retried (a killed try is its
    last) and its Spark tasks stop at ``produce:started`` (before any record, so before any commit)
    until the test creates ``<pauses>/produce_started.release``."""
    source = (REPO_ROOT / "dags" / "logstore_pipeline.py").read_text()
    held = {
        "spark.executorEnv.LOGSTORE_PAUSE_AT": "produce:started",
        "spark.executorEnv.LOGSTORE_PAUSE_DIR": str(pauses),
    }
    for old, new in (
        ('dag_id="logstore_pipeline",', f'dag_id="{HELD_DAG}",'),
        ("retries=2,", f"retries=0, spark_conf={held!r},"),
    ):
        assert source.count(old) == 1, f"dags/logstore_pipeline.py no longer has {old!r} once"
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def pauses(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pauses")


#: when the module's Airflow was started
STARTED: dict[str, datetime] = {}


def _event_table(env, name: str, partitions: int) -> str:
    """A new LogStore table of the event-driven tests (created before Airflow starts, so its watchers
    find it at once), with ``partitions`` log partitions."""
    table = f"e2e.{env.unique(name)}"
    create_table(
        LogStoreTable.open(table),
        "id int, customer string, amount long, status string",
        primary_key=["id"],
        properties={
            "log-store.enabled": "true",
            "log-store.topic": table.replace(".", "_") + "_log",
            "log-store.address": env.settings.kafka_bootstrap,
            "log-store.partitions": str(partitions),
        },
    )
    return table


@pytest.fixture(scope="module")
def stream(env, tmp_path_factory) -> StreamSetup:
    """The event-driven tests' table and folders: the streaming writer's pause points, the downstream
    runs' outputs."""
    table = _event_table(env, "stream", 3)
    return StreamSetup(table, tmp_path_factory.mktemp("stream-pauses"), tmp_path_factory.mktemp("downstream"))


@pytest.fixture(scope="module")
def strand(env, tmp_path_factory) -> StreamSetup:
    """The catch-up test's table, the folder of its downstream DAG's hold (``reached``/``release``) and
    its reads' outputs."""
    table = _event_table(env, "strand", 1)
    return StreamSetup(table, tmp_path_factory.mktemp("strand-hold"), tmp_path_factory.mktemp("strand-out"))


#: logstore_downstream on the catch-up test's table, its first run held (see ``strand_dag``)
STRAND_DAG = "logstore_downstream_strand"


def strand_dag(strand: StreamSetup) -> str:
    """logstore_downstream's source as DAG ``STRAND_DAG`` on ``strand``'s table, its reads written to
    ``strand.outputs``, each run first passing a task that waits (the first run only) until the test
    creates ``<strand.pauses>/release``: visible events then come while the DAG is at max_active_runs."""
    hold = (
        "    @task\n"
        "    def hold() -> None:\n"
        "        import pathlib, time\n"
        f"        folder = pathlib.Path({str(strand.pauses)!r})\n"
        "        (folder / 'reached').touch()\n"
        "        while not (folder / 'release').exists():\n"
        "            time.sleep(0.2)\n"
        "\n"
        "    held = hold()\n"
    )
    return _replace_once(
        (REPO_ROOT / "dags" / "logstore_downstream.py").read_text(),
        [
            ('dag_id="logstore_downstream",', f'dag_id="{STRAND_DAG}",'),
            ('TABLES = ["demo.orders", "demo.orders_stream"]', f"TABLES = [{strand.table!r}]"),
            ("from airflow.sdk import DAG, AssetAny", "from airflow.sdk import DAG, AssetAny, task"),
            ("    # [START logstore_downstream_tasks]\n", "    # [START logstore_downstream_tasks]\n" + hold),
            (
                "table=table)",
                f"table=table, output_path={str(strand.outputs)!r} + '/{{{{ run_id }}}}.jsonl')",
            ),
            (
                "        read >> LogStoreVisibleCatchUpOperator(",
                "        held >> read >> LogStoreVisibleCatchUpOperator(",
            ),
        ],
        "dags/logstore_downstream.py",
    )


@pytest.fixture(scope="module")
def lineage_events(tmp_path_factory) -> Path:
    """Where the module's Airflow writes its OpenLineage events (the provider's listener, file
    transport: one JSON event a line, from every task and run)."""
    return tmp_path_factory.mktemp("openlineage") / "events.jsonl"


@pytest.fixture(scope="module")
def airflow(
    env, tmp_path_factory, pauses: Path, stream: StreamSetup, strand: StreamSetup, lineage_events: Path
):
    dags = tmp_path_factory.mktemp("dags")
    for dag in ("logstore_pipeline.py", "logstore_reconcile.py"):
        shutil.copy(REPO_ROOT / "dags" / dag, dags / dag)
    (dags / f"{HELD_DAG}.py").write_text(held_pipeline(pauses))
    (dags / f"{STRAND_DAG}.py").write_text(strand_dag(strand))
    for name, source in event_dags(stream).items():
        (dags / name).write_text(source)
    shutil.copytree(REPO_ROOT / "dags" / "data", dags / "data")
    transport = {"type": "file", "log_file_path": str(lineage_events), "append": True}
    service = LocalAirflow(
        env.settings,
        dags,
        port=free_port_pair(),
        home=tmp_path_factory.mktemp("airflow"),
        extra_env={"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)},
    )
    try:
        STARTED["airflow"] = datetime.now(UTC)
        service.up(timeout=240)
        yield service
    finally:
        service.down()


@dataclass(frozen=True)
class StreamSetup:
    table: str
    pauses: Path
    outputs: Path


def _replace_once(source: str, replacements: Sequence[tuple[str, str]], where: str) -> str:
    for old, new in replacements:
        assert source.count(old) == 1, f"{where} no longer has {old!r} once"
        source = source.replace(old, new)
    return source


def event_dags(stream: StreamSetup) -> dict[str, str]:
    """The event-driven example DAGs on the test's table: logstore_publish and logstore_downstream (its
    reads also written to ``outputs``), and logstore_streaming, whose Spark tasks stop at
    ``produce:flushed`` (records in the log, not committed) until the test releases them, retried
    after 2 s, with a heartbeat every second."""
    tables = 'TABLES = ["demo.orders", "demo.orders_stream"]'
    held = {
        "spark.executorEnv.LOGSTORE_PAUSE_AT": "produce:flushed",
        "spark.executorEnv.LOGSTORE_PAUSE_DIR": str(stream.pauses),
    }
    found = {}
    for name, replacements in {
        "logstore_publish.py": [(tables, f"TABLES = [{stream.table!r}]")],
        "logstore_downstream.py": [
            (tables, f"TABLES = [{stream.table!r}]"),
            (
                "table=table)",
                f"table=table, output_path={str(stream.outputs)!r} + '/{{{{ run_id }}}}.jsonl')",
            ),
        ],
        "logstore_streaming.py": [
            ('TABLE = "demo.orders_stream"', f"TABLE = {stream.table!r}"),
            (
                "retry_delay=timedelta(seconds=30),",
                f"retry_delay=timedelta(seconds=2), spark_conf={held!r}, heartbeat_interval=1.0, "
                "poll_interval=1.0,",
            ),
        ],
    }.items():
        found[name] = _replace_once((REPO_ROOT / "dags" / name).read_text(), replacements, f"dags/{name}")
    return found


#: the task states of a run whose dual write failed for good: the sensor fails at once, the rest never runs
FAILED_WRITE_RUN = {
    "create_table": "success",
    "dual_write": "failed",
    "wait_for_snapshot": "failed",
    "publish_visible_offsets": "upstream_failed",
    "read": "upstream_failed",
}


@dataclass(frozen=True)
class PipelineRun:
    table: str
    input_path: Path
    run_id: str
    state: str


@pytest.fixture(scope="module")
def pipeline_run(env, airflow: LocalAirflow) -> PipelineRun:
    """One run of logstore_pipeline, triggered through the REST API (batch 1 of a new table, read from
    the log), waited for; the tests below inspect it."""
    airflow.wait_for_dag("logstore_pipeline")
    table = f"e2e.{env.unique('orders')}"
    input_path = Path(airflow.dags_folder) / "data" / "orders_batch_1.jsonl"
    run_id = airflow.trigger(
        "logstore_pipeline",
        {
            "table": table,
            "input_path": str(input_path),
            "batch_id": 1,
            "read_mode": "log",
            "consistency": "consistent",
        },
    )
    return PipelineRun(table, input_path, run_id, airflow.wait_for_run("logstore_pipeline", run_id))


def test_pipeline_triggered_through_the_rest_api(airflow: LocalAirflow, pipeline_run: PipelineRun) -> None:
    table, run_id, state = pipeline_run.table, pipeline_run.run_id, pipeline_run.state
    tis = airflow.task_instances("logstore_pipeline", run_id)
    assert state == "success", {k: v["state"] for k, v in tis.items()}
    assert {k: v["state"] for k, v in tis.items()} == {
        "create_table": "success",
        "dual_write": "success",
        "wait_for_snapshot": "success",
        "publish_visible_offsets": "success",
        "read": "success",
    }

    # The sensor handed its wait to the triggerer: execute_complete ran after a trigger event.
    sensor_log = airflow.task_log("logstore_pipeline", run_id, "wait_for_snapshot")
    assert "polls in the triggerer" in sensor_log, sensor_log[-2000:]
    # The documented set-up (no connection): each task names the embedded default once, at INFO,
    # although the sensor polled in its worker and then every second in the triggerer.
    for task in ("create_table", "dual_write", "wait_for_snapshot"):
        said = [
            line
            for line in airflow.task_log("logstore_pipeline", run_id, task).splitlines()
            if "connection configured (" in line
        ]
        assert len(said) == 2 and all('"level": "info"' in line for line in said), (task, said)
        assert "'logstore_default' not defined" in said[0] and "'kafka_default' not defined" in said[1]

    handle = LogStoreTable.open(table)
    commits = snapshot_commits(handle.load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]
    rows = handle.load().scan().to_arrow().to_pylist()
    assert len(rows) == 20 and sorted(r["id"] for r in rows) == list(range(1, 21))
    assert is_visible(handle, "logstore_pipeline", 1)
    consistent = read_log(handle, consistency="consistent")
    assert len(consistent.records) == 20 and all(r.meta.batch_id == 1 for r in consistent.records)


def test_the_pipeline_run_reports_its_datasets_to_openlineage(
    env, airflow: LocalAirflow, pipeline_run: PipelineRun, lineage_events: Path
) -> None:
    """The provider's listener asks each task of the run for its lineage: START and COMPLETE name
    the input file, the table (by its location, with its catalog name and, on complete, the snapshot
    the write committed) and its log topic, as OpenLineage names them."""
    assert pipeline_run.state == "success"
    tasks = ("create_table", "dual_write", "publish_visible_offsets", "read")

    def events() -> dict[str, dict[str, Any]]:
        """task_id -> eventType -> the event of this run's task"""
        found: dict[str, dict[str, Any]] = {}
        for line in lineage_events.read_text().splitlines() if lineage_events.exists() else []:
            event = json.loads(line)
            dag_run = event["run"]["facets"].get("airflow", {}).get("dagRun", {})
            dag_id, _, task = event["job"]["name"].partition(".")
            if dag_id == "logstore_pipeline" and dag_run.get("run_id") == pipeline_run.run_id:
                found.setdefault(task, {})[event["eventType"]] = event
        return found

    # the last task's COMPLETE may be written just after its run ended
    _until(lambda: all(len(events().get(t, {})) == 2 for t in tasks), f"START and COMPLETE of {tasks}", 30)
    found = events()

    def names(datasets: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(d["namespace"], d["name"]) for d in datasets]

    handle = LogStoreTable.open(pipeline_run.table)
    iceberg = handle.load()
    [commit] = snapshot_commits(iceberg)
    table = ("file", urlsplit(iceberg.location()).path.rstrip("/"))
    topic = (
        f"kafka://{env.settings.kafka_bootstrap.split(',')[0]}",
        pipeline_run.table.replace(".", "_") + "_log",
    )
    catalog = [
        {
            "namespace": "file:" + urlsplit(handle.catalog.warehouse).path.rstrip("/"),
            "name": pipeline_run.table,
            "type": "TABLE",
        }
    ]
    version = str(commit.snapshot_id)

    create = found["create_table"]
    assert names(create["START"]["outputs"]) == [topic]  # the table has no location before it exists
    assert names(create["COMPLETE"]["outputs"]) == [table, topic]
    write = found["dual_write"]
    for event in write.values():
        assert names(event["inputs"]) == [("file", str(pipeline_run.input_path))], event
        assert names(event["outputs"]) == [table, topic], event
        assert event["outputs"][0]["facets"]["symlinks"]["identifiers"] == catalog, event
    assert "version" not in write["START"]["outputs"][0]["facets"]  # not committed yet
    assert (
        write["COMPLETE"]["outputs"][0]["facets"]["version"]["datasetVersion"] == version
    )  # the batch's snapshot
    publish = found["publish_visible_offsets"]["COMPLETE"]
    assert names(publish["inputs"]) == [table, topic] and publish["outputs"] == []
    assert publish["inputs"][0]["facets"]["version"]["datasetVersion"] == version  # the snapshot it published
    read = found["read"]["COMPLETE"]
    assert names(read["inputs"]) == [topic] and read["outputs"] == []  # read_mode=log, no output file


def test_a_bad_param_is_refused_before_any_task_runs(airflow: LocalAirflow) -> None:
    from airflow_logstore.exceptions import ServiceError

    with pytest.raises(ServiceError, match=r"batch_id|minimum"):
        airflow.trigger("logstore_pipeline", {"batch_id": 0})
    with pytest.raises(ServiceError, match=r"table|pattern"):
        airflow.trigger("logstore_pipeline", {"table": "orders; DROP TABLE x"})


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_bad_input_file_fails_its_run_at_once_and_the_next_run_goes_ahead(
    env, airflow: LocalAirflow, tmp_path: Path
) -> None:
    airflow.wait_for_dag("logstore_pipeline")
    bad = write_jsonl(
        tmp_path / "a3_bad.jsonl", [{"id": 1, "customer": "c1", "amount": "lots", "status": "new"}]
    )
    good = Path(airflow.dags_folder) / "data" / "orders_batch_1.jsonl"
    conf = {"table": f"e2e.{env.unique('bad')}", "batch_id": 1, "read_mode": "log"}
    bad_run = airflow.trigger("logstore_pipeline", {**conf, "input_path": str(bad)})
    # the same batch, fixed: queued behind the bad run (max_active_runs=1); the old failure is not its own
    next_run = airflow.trigger("logstore_pipeline", {**conf, "input_path": str(good)})

    assert airflow.wait_for_run("logstore_pipeline", bad_run) == "failed"
    tis = airflow.task_instances("logstore_pipeline", bad_run)
    assert {k: v["state"] for k, v in tis.items()} == FAILED_WRITE_RUN
    assert tis["dual_write"]["try_number"] == 1  # bad input is not retried (the task has retries=2)
    write_log = airflow.task_log("logstore_pipeline", bad_run, "dual_write")
    cause = "BadInputError: row 1, column 'amount': value does not fit type bigint (file a3_bad.jsonl)"
    assert cause in write_log and "AirflowFailException" in write_log, write_log[-3000:]
    sensor_log = airflow.task_log("logstore_pipeline", bad_run, "wait_for_snapshot")
    assert "failed for good" in sensor_log and cause in sensor_log, sensor_log[-3000:]
    write_failed = _time(tis["dual_write"]["end_date"])
    assert _time(tis["wait_for_snapshot"]["end_date"]) - write_failed < timedelta(minutes=1)

    assert airflow.wait_for_run("logstore_pipeline", next_run) == "success"
    started = _time(airflow.get(f"/api/v2/dags/logstore_pipeline/dagRuns/{next_run}")["start_date"])
    assert started - write_failed < timedelta(minutes=1)
    commits = snapshot_commits(LogStoreTable.open(str(conf["table"])).load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]


def _until(condition: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    """Poll Airflow (or the Spark job it runs) until ``condition`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.5)


def test_a_killed_write_fails_its_run_at_once_and_the_next_run_goes_ahead(
    env, airflow: LocalAirflow, pauses: Path
) -> None:
    """The write's last try dies by SIGKILL (as by the OOM killer) while the sensor waits deferred:
    no failure report, yet the sensor fails at once naming the killed write, and the next run starts."""
    airflow.wait_for_dag(HELD_DAG)
    data = Path(airflow.dags_folder) / "data" / "orders_batch_1.jsonl"
    conf = {"table": f"e2e.{env.unique('killed')}", "input_path": str(data), "batch_id": 1}
    killed_run = airflow.trigger(HELD_DAG, conf)
    next_run = airflow.trigger(HELD_DAG, conf)  # queued behind it (max_active_runs=1)
    reached, release = pauses / "produce_started.reached", pauses / "produce_started.release"
    try:

        def held_and_waiting() -> bool:
            tis = airflow.task_instances(HELD_DAG, killed_run)
            return reached.exists() and tis.get("wait_for_snapshot", {}).get("state") == "deferred"

        _until(held_and_waiting, "the write held before its first record, the sensor deferred")
        write = airflow.task_instances(HELD_DAG, killed_run)["dual_write"]
        task_pid, held = int(write["pid"]), int(reached.read_text())
        assert write["state"] == "running" and write["try_number"] == 1, write
        # Airflow's supervisor runs the task in its own process group, with spark-submit and the Spark
        # driver, whose JVM (in local mode also the executor) holds the Spark task. All of them die;
        # the supervisor survives to see it.
        assert os.getpgid(task_pid) == task_pid != os.getpgrp()
        assert os.getpgid(held) == task_pid, "the held Spark task is not in the write task's process group"
        killed_at = datetime.now(UTC)
        os.killpg(task_pid, signal.SIGKILL)
    finally:
        release.touch()  # the next run's write goes through

    # not the sensor's timeout (30 min): a run ends within a minute or two of the kill
    assert airflow.wait_for_run(HELD_DAG, killed_run, timeout=120) == "failed"
    tis = airflow.task_instances(HELD_DAG, killed_run)
    assert {k: v["state"] for k, v in tis.items()} == FAILED_WRITE_RUN
    assert _time(tis["wait_for_snapshot"]["end_date"]) - killed_at < timedelta(minutes=1)
    sensor_log = airflow.task_log(HELD_DAG, killed_run, "wait_for_snapshot")
    named = (
        f"the dual write of batch 1 of {conf['table']} by writer 'logstore_pipeline' failed for good: "
        f"its task 'dual_write' is failed in run {killed_run}; it left no failure report"
    )
    assert named in sensor_log and "AirflowFailException" in sensor_log, sensor_log[-3000:]

    assert airflow.wait_for_run(HELD_DAG, next_run) == "success"
    started = _time(airflow.get(f"/api/v2/dags/{HELD_DAG}/dagRuns/{next_run}")["start_date"])
    assert started - killed_at < timedelta(minutes=1)
    commits = snapshot_commits(LogStoreTable.open(str(conf["table"])).load())
    assert [(c.writer_id, c.batch_id) for c in commits] == [("logstore_pipeline", 1)]


def test_the_maintenance_dag_starts_paused_and_not_due_before_its_next_time(airflow: LocalAirflow) -> None:
    """``./dev airflow up`` runs no maintenance on the demo's table: logstore_reconcile is paused,
    and its first run is due at a scheduled time after Airflow started, not at one that had passed."""
    airflow.wait_for_dag("logstore_reconcile")
    dag = airflow.get("/api/v2/dags/logstore_reconcile")
    assert dag["is_paused"] is True, dag
    assert _time(dag["next_dagrun_run_after"]) > STARTED["airflow"], dag
    assert airflow.get("/api/v2/dags/logstore_reconcile/dagRuns")["total_entries"] == 0


# -- event-driven visibility and the supervised streaming writer (issue 38) ----------------------------


def _produce_source(env, topic: str, ids: range) -> None:
    from airflow_logstore.log import kafka_client

    config = kafka_client.client_config(env.bootstrap)
    kafka_client.ensure_topic(config, topic, partitions=1, replication_factor=1, topic_configs={})
    producer = kafka_client.producer(config)
    for i in ids:
        row = {"id": i, "customer": f"c{i}", "amount": i * 10, "status": "new"}
        producer.produce(topic, value=json.dumps(row).encode())
    assert producer.flush(30) == 0


def _runs(airflow: LocalAirflow, dag_id: str) -> list[dict[str, Any]]:
    found = airflow.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
    return sorted(found["dag_runs"], key=lambda run: str(run["run_after"]))


def _watermark_moves(handle: LogStoreTable) -> list[tuple[int, dict[int, int]]]:
    """(broker time, watermark) of every watermark move in the table's control topic, in order."""
    from airflow_logstore.core import control
    from airflow_logstore.log import kafka_client

    ctl = handle.control()
    cons = kafka_client.consumer(ctl.config)
    try:
        end = kafka_client.partition_offsets(cons, ctl.topic, 1)[0][1]
        moves = []
        for batch in kafka_client.scan(cons, ctl.topic, {0: 0}, {0: end}):
            for m in batch:
                record = control.decode(m.key(), m.value(), m.offset(), kafka_client.message_timestamp_ms(m))
                if record and record.key.startswith(control.K_WATERMARK_PREFIX) and record.value:
                    moves.append(
                        (record.timestamp_ms or 0, {int(p): o for p, o in record.value["offsets"].items()})
                    )
    finally:
        cons.close()
    return moves


def _visible_before_start(airflow: LocalAirflow, handle: LogStoreTable, run: dict[str, Any]) -> int:
    """A logstore_downstream run's start (ms), checked to come after the watermark move that made
    everything its read covers visible (the move's time: the broker's, on the control record)."""
    task = "read_" + str(handle.name).replace(".", "_")
    found = airflow.get(
        f"/api/v2/dags/logstore_downstream/dagRuns/{run['dag_run_id']}/taskInstances/{task}"
        "/xcomEntries/return_value?deserialize=true"
    )
    value = found["value"]
    value = json.loads(value) if isinstance(value, str) else value
    end = {int(p): o for p, o in value["window"]["to"].items()}
    started_ms = int(_time(run["start_date"]).timestamp() * 1000)
    moves = _watermark_moves(handle)
    covering = [at for at, mark in moves if all(mark.get(p, -1) >= o - 1 for p, o in end.items())]
    assert covering and covering[0] <= started_ms, (run["dag_run_id"], end, moves)
    return started_ms


def _downstream_reads(
    airflow: LocalAirflow, stream: StreamSetup, table: str
) -> dict[str, list[dict[str, Any]]]:
    """Per successful logstore_downstream run, the changes its read wrote (in order)."""
    reads = {}
    for run in _runs(airflow, "logstore_downstream"):
        if run["state"] != "success":
            continue
        out = stream.outputs / f"{run['dag_run_id']}.jsonl"
        lines = out.read_text().splitlines() if out.exists() else []
        reads[run["dag_run_id"]] = [json.loads(line) for line in lines]
    return reads


def test_a_killed_streaming_writer_is_retried_reconciled_and_read_downstream_once_across_a_triggerer_restart(
    env, airflow: LocalAirflow, stream: StreamSetup, record_property: Callable[[str, Any], None]
) -> None:
    """The event-driven path end to end, with the streaming writer:

    1. logstore_streaming's application is SIGKILLed with its first micro-batch's records in the log
       (not committed); the trigger reports it lost, the task is retried, the new epoch replays the
       micro-batch from the checkpoint and commits it;
    2. its commit event runs logstore_publish, whose publish fires the visible event: a
       logstore_downstream run starts after that publish and reads exactly the batch's changes;
    3. the triggerer is SIGKILLed; a second batch is committed and published while it is down (the
       watermark moves with no trigger watching); a new triggerer: the visible trigger goes on from the
       watermark its asset's state store kept, and one downstream run reads exactly that batch;
    4. the stream is stopped (its task succeeds), logstore_reconcile reverses the dead epoch's records.
    Every change is read by one downstream run, once; nothing of the dead epoch is.
    """
    import signal as signals
    import sys

    from airflow_logstore.core.changelog import apply_retract
    from airflow_logstore.table import streams
    from logstore_dev.services.airflow_local import COMPONENTS
    from logstore_dev.testing.tables import table_state

    for dag_id in ("logstore_streaming", "logstore_publish", "logstore_downstream", "logstore_reconcile"):
        airflow.wait_for_dag(dag_id)
    handle = LogStoreTable.open(stream.table)
    source = env.unique("orders_source")
    _produce_source(env, source, range(1, 11))
    run_id = airflow.trigger("logstore_streaming", {"source_topic": source, "run_for": None})

    # 1. the first application holds its micro-batch after the flush; kill it (its whole session)
    reached = stream.pauses / "produce_flushed.reached"
    _until(reached.exists, "the first micro-batch's records flushed", timeout=300)
    session = os.getpgid(int(reached.read_text()))
    assert session != os.getpgrp()
    os.killpg(session, signals.SIGKILL)
    (stream.pauses / "produce_flushed.release").touch()  # the retry's micro-batches go through

    def stream_task() -> dict[str, Any]:
        return airflow.task_instances("logstore_streaming", run_id)["stream"]

    _until(
        lambda: stream_task()["try_number"] >= 2 and stream_task()["state"] == "deferred", "the retry", 300
    )
    first_try = airflow.task_log("logstore_streaming", run_id, "stream", 1)
    assert "was lost: its process" in first_try and "ended without a result or a failure report" in first_try

    def committed(ids: range) -> bool:
        return {k[0] for k in table_state(handle)} >= set(ids)

    _until(lambda: committed(range(1, 11)), "batch A committed by the retry", 300)
    commits = snapshot_commits(handle.load())
    _until(lambda: len(_downstream_reads(airflow, stream, stream.table)) >= 1, "a downstream run", 300)

    # 2. the downstream run started after the publish that made its records visible
    first_run = _runs(airflow, "logstore_downstream")[0]
    started_ms = _visible_before_start(airflow, handle, first_run)
    latency_ms = started_ms - min(c.timestamp_ms or 0 for c in commits)

    # 3. the triggerer dies; batch B is committed meanwhile; a new triggerer
    triggerer = airflow.component("triggerer")
    assert triggerer.kill()
    _produce_source(env, source, range(11, 21))
    _until(lambda: committed(range(11, 21)), "batch B committed while the triggerer is down", 300)
    published = publish_visible_offsets(handle)  # the watermark moves past B with no trigger running
    assert published.newly_visible, "B was not made visible while the triggerer was down"
    triggerer.launch(
        [sys.executable, "-m", "airflow", *COMPONENTS["triggerer"]], env=airflow.env(), cwd=Path.cwd()
    )
    _until(
        lambda: sum(map(len, _downstream_reads(airflow, stream, stream.table).values())) >= 20, "B read", 400
    )
    # one run for the move made while the triggerer was down: all of B and nothing else
    reads_of_b = [
        sorted(r["id"] for r in rows)
        for rows in _downstream_reads(airflow, stream, stream.table).values()
        if any(r["id"] > 10 for r in rows)
    ]
    assert reads_of_b == [list(range(11, 21))], reads_of_b

    # 4. stop the stream (a stop request, as an operator would): its task succeeds
    location = handle.load().location()
    statuses = Path(location.removeprefix("file://")) / "logstore" / "streams"
    for status in statuses.glob("*.json"):
        streams.request_stop(handle.load(), status.stem)
    _until(lambda: stream_task()["state"] == "success", "the stream stopped", 180)
    reconcile = airflow.trigger("logstore_reconcile", {"table": stream.table})
    assert airflow.wait_for_run("logstore_reconcile", reconcile) == "success"

    # each committed change read downstream once, nothing of the dead epoch; every run after its publish
    reads = _downstream_reads(airflow, stream, stream.table)
    for run in _runs(airflow, "logstore_downstream"):
        if run["dag_run_id"] in reads:
            _visible_before_start(airflow, handle, run)
    read = [(r["_partition"], r["_offset"]) for rows in reads.values() for r in rows]
    consistent = read_log(handle, consistency="consistent")
    assert sorted(read) == sorted((r.partition, r.offset) for r in consistent.records)  # once, none lost
    assert sorted(r["id"] for rows in reads.values() for r in rows) == list(range(1, 21))
    committed_epochs = {c.epoch for c in snapshot_commits(handle.load())}
    assert {r["_epoch"] for rows in reads.values() for r in rows} <= committed_epochs
    # reconciliation reversed the dead epoch's records: the eventual log folds to the table
    eventual = read_log(handle, consistency="eventual")
    data = [r for r in eventual.records if r.meta.record_type.value == "data"]
    dead = [r for r in data if r.meta.epoch not in committed_epochs]
    reversals = [r for r in eventual.records if r.meta.record_type.value == "reversal"]
    assert dead and len(reversals) == len(dead)
    folded = apply_retract([((r.row["id"],), r.kind, r.row) for r in eventual.records])
    assert not folded.anomalies and folded.state == table_state(handle)
    record_property("report", f"commit -> downstream run start: {latency_ms} ms (the retried first batch)")


def _synthetic_batch(handle: LogStoreTable, epoch: int, batch: int, ids: range) -> None:
    """One committed batch of inserts of ``ids`` without Spark (its records, its commit in the ledger),
    then a publish: the watermark moves past it, and the visible trigger fires."""
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.log import kafka_client

    config, topic = handle.kafka_config(), str(handle.config().topic)
    producer, cons = kafka_client.producer(config), kafka_client.consumer(config)
    try:
        before = kafka_client.partition_offsets(cons, topic, 1)[0][1]
        headers = encode_headers(RecordMeta("strand", epoch, batch, "0.0"))
        for i in ids:
            row = {"id": i, "customer": f"c{i}", "amount": i, "status": "new"}
            value = json.dumps({"kind": "+I", "row": row}).encode()
            producer.produce(topic, partition=0, key=b"[%d]" % i, value=value, headers=headers)
        assert producer.flush(30) == 0
        after = kafka_client.partition_offsets(cons, topic, 1)[0][1]
    finally:
        cons.close()
    commit = CommitInfo("strand", batch, epoch, offsets={0: (before, after - 1)}, tasks=frozenset({"0.0"}))
    handle.control().record_commit(commit.to_json(), "strand", batch)
    assert publish_visible_offsets(handle).newly_visible == [f"strand/{batch}/{epoch}"]


def _strand_reads(airflow: LocalAirflow, strand: StreamSetup) -> dict[str, list[int]]:
    """Per successful run of the catch-up test's downstream DAG, the ids its read wrote."""
    reads = {}
    for run in _runs(airflow, STRAND_DAG):
        out = strand.outputs / f"{run['dag_run_id']}.jsonl"
        if run["state"] == "success":
            lines = out.read_text().splitlines() if out.exists() else []
            reads[run["dag_run_id"]] = [json.loads(line)["id"] for line in lines]
    return reads


def test_visible_events_that_airflow_leaves_behind_get_a_run_without_a_further_change(
    airflow: LocalAirflow, strand: StreamSetup
) -> None:
    """Batch 1's event starts a downstream run, held; batches 2 and 3 become visible while it is held
    (max_active_runs=1). Airflow gives the next run only batch 2's event (apache/airflow#56050): batch
    3's waits for the table's next visible change, which never comes here. The catch-up tasks bring the
    run that reads it: every batch is read, by one run, once, with nothing published after batch 3."""
    airflow.wait_for_dag(STRAND_DAG)
    assert airflow.home is not None
    triggerer_log = airflow.home / "triggerer.log"
    # the watcher starts from the watermark it finds: a batch published before it would fire nothing
    _until(lambda: f"{strand.table}: watching the watermark" in triggerer_log.read_text(), "the watcher", 180)
    handle = LogStoreTable.open(strand.table)
    epoch = handle.control().claim_epoch("strand")
    _synthetic_batch(handle, epoch, 1, range(1, 4))
    _until((strand.pauses / "reached").exists, "the first downstream run, held", 180)
    visible_events = f"/api/v2/assets/events?name_pattern=logstore.{strand.table}.visible"
    for batch, ids in ((2, range(4, 7)), (3, range(7, 10))):
        _synthetic_batch(handle, epoch, batch, ids)

        def fired(events: int = batch) -> bool:  # one event per batch: each waited for before the next
            return int(airflow.get(visible_events)["total_entries"]) >= events

        _until(fired, f"batch {batch}'s event", 120)
    (strand.pauses / "release").touch()
    _until(lambda: sum(map(len, _strand_reads(airflow, strand).values())) >= 9, "batches 1 to 3 read", 300)
    reads = _strand_reads(airflow, strand)
    assert sorted(i for ids in reads.values() for i in ids) == list(range(1, 10)), reads  # each once
    assert sorted(sorted(ids) for ids in reads.values() if ids) == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
