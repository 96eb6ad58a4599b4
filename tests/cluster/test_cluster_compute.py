"""The cluster profile's compute services as real processes on 127.0.0.1.

Three KRaft brokers lose the leader of a partition and keep every acknowledged record exactly once;
a Spark standalone cluster runs tasks in executors on both workers and finishes a job whose worker
dies mid-stage. Both are the session cluster's (tests/cluster/conftest.py), not services of their own: each
test leaves them running, a killed broker or worker started again.

Here, not in tests/integration: its driver runs in the test process, and a process has one SparkContext;
the integration tests' workers already hold a local one (getOrCreate would return it).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from logstore_dev.services._process import alive, wait_for
from logstore_dev.services.cluster import LocalCluster
from logstore_dev.services.kafka_cluster import LocalKafkaCluster
from logstore_dev.services.spark_standalone import LocalSparkCluster
from tests.environments import executor_python

PARTITIONS = 3
PER_ROUND = 200  # records per partition before and after the leader dies
WAIT_S = 120.0  # how long a test waits for a file or a process before failing


def _rss_mb(pid: int | None) -> float:
    """Resident memory of ``pid`` in MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _wait_for(condition: Any, what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


# -- Kafka ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_cluster(cluster: LocalCluster) -> LocalKafkaCluster:
    """The session cluster's three brokers (tests/cluster/conftest.py): this file's tests use their internal
    listeners, and leave every node running (a killed one is restarted and back in every ISR)."""
    kafka: LocalKafkaCluster = cluster.service("kafka")
    return kafka


def _produce(producer: Any, topic: str, start: int, stop: int) -> list[str]:
    """Send sequence numbers ``start..stop-1`` to every partition; the delivery errors, if any."""
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for seq in range(start, stop):
        for partition in range(PARTITIONS):
            producer.produce(topic, value=f"{partition}:{seq}", partition=partition, on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(WAIT_S) == 0, "records still in flight"
    return errors


def _consume(bootstrap: str, topic: str, expected: int) -> dict[int, list[int]]:
    """Every record of ``topic`` from the beginning, as sequence numbers per partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + WAIT_S
    try:
        while sum(map(len, seen.values())) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            partition, seq = message.value().decode().split(":")
            assert int(partition) == message.partition()
            seen[message.partition()].append(int(seq))
    finally:
        consumer.close()
    return seen


def test_three_brokers_keep_every_record_exactly_once_when_a_leader_dies(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    assert kafka_cluster.registered() == {1, 2, 3}
    broker_config = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    config = next(iter(broker_config.values())).result(timeout=30)
    assert config["default.replication.factor"].value == "3"
    assert config["min.insync.replicas"].value == "2"
    topic = f"it_cluster_{uuid.uuid4().hex[:8]}"
    new = NewTopic(
        topic, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"}
    )
    admin.create_topics([new])[topic].result(timeout=30)
    rss = {n: _rss_mb(kafka_cluster.broker(n).pid()) for n in (1, 2, 3)}
    print(f"[kafka cluster] broker RSS MiB: {rss}")

    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "log_level": 3,
        }
    )
    assert _produce(producer, topic, 0, PER_ROUND) == []
    victim = kafka_cluster.leader(topic, 0)
    kafka_cluster.kill(victim)
    assert kafka_cluster.broker(victim).pid() is None
    assert _produce(producer, topic, PER_ROUND, 2 * PER_ROUND) == []  # fails over to the new leader
    new_leader = kafka_cluster.leader(topic, 0)
    assert new_leader not in (victim, -1)

    seen = _consume(kafka_cluster.bootstrap, topic, PARTITIONS * 2 * PER_ROUND)
    for partition in range(PARTITIONS):
        assert seen[partition] == list(range(2 * PER_ROUND)), f"partition {partition}"

    started = time.monotonic()
    kafka_cluster.start(victim)
    print(f"[kafka cluster] node {victim} rejoined the ISR in {time.monotonic() - started:.1f}s")
    # start() returned once one broker's metadata had the node back in every ISR; another broker's
    # metadata cache (the admin client asks any) may lag it by a moment, so this waits, within a bound
    wait_for(
        lambda: _isr_without(admin, topic, victim),
        timeout=30,
        processes=[],
        timed_out=lambda problem: f"node {victim} is not back in the ISR everywhere after 30 s: {problem}",
    )
    assert kafka_cluster.status().running


def _isr_without(admin: Any, topic: str, node: int) -> str | None:
    """The partitions of ``topic`` whose ISR lacks ``node`` in the metadata the admin client gets now
    (None: none)."""
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    behind = sorted(number for number, partition in partitions.items() if node not in partition.isrs)
    return f"partitions {behind}" if behind else None


# -- Spark ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_cluster(cluster: LocalCluster) -> LocalSparkCluster:
    """The session cluster's master and two workers, whose Python has only pyspark and the executors'
    list (tests/environments.py, "executors"); a killed worker is started again before its test ends."""
    spark: LocalSparkCluster = cluster.service("spark")
    assert spark.python == str(executor_python())
    return spark


@pytest.fixture(scope="module")
def session(spark_cluster: LocalSparkCluster) -> Iterator[Any]:
    """A driver on this process, on the standalone master; it leaves the Python choice to the workers."""
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import the tests
    saved = os.environ.pop("PYSPARK_PYTHON", None)
    # the driver's JVM (py4j's gateway) outlives the session and has this process's environment: not the
    # session cluster's catalog settings (secrets, which test_cluster_failures looks for in every Spark
    # process's environment)
    catalog = os.environ.pop("LOGSTORE_CATALOG", None)
    try:
        spark = (
            SparkSession.builder.appName("cluster-compute-test")
            .master(spark_cluster.master_url)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "512m")
            .config("spark.executor.memory", "512m")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
    finally:
        if catalog is not None:
            os.environ["LOGSTORE_CATALOG"] = catalog
    jsc = spark.sparkContext._jsc.sc()
    _wait_for(lambda: jsc.getExecutorMemoryStatus().size() == 3, "two executors besides the driver")
    try:
        yield spark
    finally:
        spark.stop()
        if saved is not None:
            os.environ["PYSPARK_PYTHON"] = saved


def _where() -> dict[str, Any]:
    """Where this task runs: its executor's id and JVM pid, that JVM's parent (the worker), Python."""
    pid, jvm, executor, tmpdir = os.getpid(), None, None, None
    while pid > 1 and jvm is None:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline:
            jvm, executor = pid, cmdline[cmdline.index(b"--executor-id") + 1].decode()
            options = [arg.decode() for arg in cmdline if arg.startswith(b"-Djava.io.tmpdir=")]
            tmpdir = options[-1].split("=", 1)[1] if options else None
        else:
            pid = _parent(pid)
    return {
        "pid": os.getpid(),
        "executor": executor,
        "jvm": jvm,
        "worker": _parent(jvm) if jvm else None,
        "prefix": sys.prefix,
        "home": os.environ.get("LOGSTORE_HOME"),
        "tmpdir": tmpdir,
    }


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _gated_task(folder: str, gate: str) -> Any:
    """A task that records where it runs in ``folder``, then waits until the file ``gate`` exists."""

    def run(index: int, _rows: Any) -> Iterator[dict[str, Any]]:
        where = {**_where(), "partition": index}
        (Path(folder) / f"started-{index}-{os.getpid()}.json").write_text(json.dumps(where))
        deadline = time.monotonic() + WAIT_S
        while not Path(gate).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate} did not appear")
            time.sleep(0.1)
        yield where

    return run


def _started(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("started-*.json"))]


def test_tasks_run_in_executors_on_both_workers(
    spark_cluster: LocalSparkCluster, session: Any, tmp_path: Path
) -> None:
    # two tasks that each wait for the other to start: they run at once, on the two one-core executors
    def run(index: int, _rows: Any) -> Iterator[dict[str, Any]]:
        (tmp_path / f"started-{index}.json").write_text("{}")
        deadline = time.monotonic() + WAIT_S
        while len(list(tmp_path.glob("started-*.json"))) < 2:
            if time.monotonic() > deadline:
                raise TimeoutError("the other task did not start")
            time.sleep(0.1)
        yield {**_where(), "partition": index}

    rows = session.sparkContext.parallelize(range(2), 2).mapPartitionsWithIndex(run).collect()
    workers = spark_cluster.worker_pids
    assert {row["worker"] for row in rows} == set(workers), rows
    assert all(row["executor"] not in (None, "driver") and row["pid"] != os.getpid() for row in rows)
    assert all(row["prefix"] == str(executor_python().parents[1]) for row in rows)  # the workers' Python
    for row in rows:
        own = spark_cluster.workers[workers.index(row["worker"])].folder
        assert Path(row["home"]) == own / "home"  # each worker's own LOGSTORE_HOME, not the driver's
        # and its own temp dir, not the host's /tmp: a killed executor's unpacked libraries stay there
        assert row["tmpdir"] is not None and Path(row["tmpdir"]) == own / "tmp", row
    jvms = {row["jvm"] for row in rows}
    memory = {
        "master": _rss_mb(spark_cluster.master.pid()),
        **{f"worker-{i}": _rss_mb(pid) for i, pid in enumerate(workers)},
        **{f"executor-jvm-{pid}": _rss_mb(pid) for pid in jvms},
        "driver-jvm": _rss_mb(session.sparkContext._gateway.proc.pid),
        "driver-python": _rss_mb(os.getpid()),
    }
    print(f"[spark cluster] RSS MiB: { {k: round(v) for k, v in memory.items()} }")


def _interpreter(_index: int, _rows: Any) -> Iterator[dict[str, Any]]:
    """The task's interpreter and what it can import (Airflow and LogStore must be missing: no zip here)."""
    import importlib

    importable = {}
    for name in ("airflow", "airflow_logstore", "numpy", "pyarrow", "pyiceberg", "confluent_kafka"):
        try:
            importlib.import_module(name)
            importable[name] = True
        except ImportError:
            importable[name] = False
    yield {"executable": sys.executable, "importable": importable}


def test_executors_run_the_workers_python_with_only_the_executors_list(session: Any) -> None:
    rows = session.sparkContext.parallelize(range(2), 2).mapPartitionsWithIndex(_interpreter).collect()
    assert {row["executable"] for row in rows} == {str(executor_python())}, rows
    assert all(
        row["importable"]
        == {
            "airflow": False,
            "airflow_logstore": False,
            "numpy": True,
            "pyarrow": True,
            "pyiceberg": True,
            "confluent_kafka": True,
        }
        for row in rows
    ), rows


def test_a_job_finishes_on_the_other_worker_when_a_worker_dies_mid_stage(
    spark_cluster: LocalSparkCluster, session: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    rdd = session.sparkContext.parallelize(range(4), 4)
    job = rdd.mapPartitionsWithIndex(_gated_task(str(tmp_path), str(gate)))
    pool = ThreadPoolExecutor(1)
    collected = pool.submit(job.collect)

    def on_both_workers() -> list[dict[str, Any]]:
        started = _started(tmp_path)
        return started if len({row["worker"] for row in started}) == 2 else []

    # both one-core executors hold a waiting task: the stage is mid-way on both workers
    running = _wait_for(on_both_workers, "tasks started on both workers")
    victim = 1
    lost = [row for row in running if row["worker"] == spark_cluster.worker_pids[victim]]
    spark_cluster.kill_worker(victim)
    assert spark_cluster.worker_pids[victim] is None
    for row in lost:  # the executor and its Python went with the worker
        assert not alive(row["jvm"]) and not alive(row["pid"])
    gate.touch()

    rows = collected.result(timeout=WAIT_S)  # raises the job's error if it failed
    pool.shutdown()
    survivor = spark_cluster.worker_pids[1 - victim]
    assert sorted(row["partition"] for row in rows) == [0, 1, 2, 3]
    assert {row["worker"] for row in rows} == {survivor}

    started = time.monotonic()
    spark_cluster.start_worker(victim)
    print(f"[spark cluster] worker {victim} back in {time.monotonic() - started:.1f}s")
    assert spark_cluster.status().running
