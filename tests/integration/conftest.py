"""Session fixtures: one real Kafka broker, one real SparkSession, one real SQLite Iceberg catalog."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logstore_dev.testing.environment import LogStoreTestEnv, logstore_environment

# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after the test run's
# log streams are closed ("--- Logging error ---" in the output); its INFO lines say nothing a test needs.
logging.getLogger("py4j").setLevel(logging.WARNING)

HERE = Path(__file__).parent


#: About how long each file takes, in seconds: each file run alone on the (busy) development machine,
#: where measured, else estimated from what it runs (marked ~); only their order matters. ``./dev test``
#: runs the files on two workers, a file each at a time, in the order collected (``--no-loadscope-reorder``;
#: xdist's default orders them by their number of tests, which put 5-minute files of one test last):
#: longest first, the two workers end together instead of one running a long file alone at the end.
#: A file not listed (a new one) goes first.
FILE_SECONDS: dict[str, float] = {
    "test_reconcile.py": 920,  # 980 before two failover tests restarted in the session (timing5)
    "test_spark_source.py": 760,  # 18 tests alone (00:01 UTC, one failed); one of them 255 s on CI
    "test_airflow_e2e.py": 720,  # ~ Airflow starts (60 s); 3 of its 4 tests took 399, 119, 117 s on CI
    "test_compaction.py": 585,
    "test_visibility_and_reads.py": 420,  # 480 before table_with_crash started 1 driver, not 3
    "test_dual_write.py": 360,  # 451 before the crash tests' restarts ran in the session (timing4)
    "test_retries.py": 325,
    "test_write_through.py": 270,  # 301 before the crashed write's restart ran in the session
    "test_races.py": 250,  # ~
    "test_faults.py": 250,  # ~ its own broker, five Spark drivers
    "test_security.py": 200,  # ~ a SASL broker
    "test_exact_values.py": 150,  # ~
    "test_dual_write_layout.py": 150,  # ~
    "test_cluster_storage.py": 150,  # ~ object store and REST catalog
    "test_job_failures.py": 150,  # ~
    "test_flink.py": 150,  # ~ a Flink job: its test took 74 s with the Flink environment built
    "test_streaming_write.py": 150,  # ~ two streaming applications
    "test_read_streaming.py": 127,
    "test_committed_feed.py": 120,  # ~ one of its 3 tests took 52 s
    "test_ui_view.py": 120,  # ~ Airflow's API server and a headless Chromium
    "test_durability.py": 120,  # ~
    "test_table_events.py": 90,  # ~ no Spark driver of its own
    "test_jvm_scan.py": 80,  # ~
    "test_services.py": 80,  # ~ a broker of its own
    "test_follow.py": 66,
    "test_cli.py": 48,
    "test_durable_results.py": 40,  # ~
    "test_checkpoints.py": 39,
    "test_log_producer.py": 34,
    "test_demo_start_over.py": 15,  # ~
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Orders this folder's files longest first (by :data:`FILE_SECONDS`) in the places its tests had;
    the tests of a file keep their order, other folders' tests their places."""
    places = [index for index, item in enumerate(items) if item.path.parent == HERE]
    first_seen: dict[str, int] = {}
    for index in places:
        first_seen.setdefault(items[index].path.name, index)

    def rank(item: pytest.Item) -> tuple[float, int]:
        name = item.path.name
        return (-FILE_SECONDS.get(name, float("inf")), first_seen[name])

    for index, item in zip(places, sorted((items[i] for i in places), key=rank), strict=True):
        items[index] = item


@pytest.fixture(scope="session")
def env() -> Iterator[LogStoreTestEnv]:
    with logstore_environment() as environment:
        yield environment


@pytest.fixture(scope="session")
def spark(env: LogStoreTestEnv) -> Iterator[Any]:
    from airflow_logstore.read.spark_source import register
    from airflow_logstore.spark.session import build_spark_session

    session = build_spark_session("logstore-tests")
    register(session)  # spark.read.format("logstore")
    yield session
    session.stop()
