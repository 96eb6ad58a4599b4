"""Session fixtures: one real Kafka broker, one real SparkSession, one real SQLite Iceberg catalog."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_logstore.testing.environment import LogStoreTestEnv, logstore_environment

# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after the test run's
# log streams are closed ("--- Logging error ---" in the output); its INFO lines say nothing a test needs.
logging.getLogger("py4j").setLevel(logging.WARNING)


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
