"""One cluster profile for the whole session: PostgreSQL, S3 (moto), Iceberg's REST catalog, three Kafka
brokers, Spark standalone with two workers, Airflow on PostgreSQL; every port free-chosen on 127.0.0.1.
The Spark workers run the ``executors`` environment of ``tests/environments.py`` (pyspark and the executors'
list only: no Airflow, no LogStore), so every job proves that list and the ``--py-files`` zip enough.

Every secret of the cluster is a canary (:data:`CANARIES`): the tests search the places a secret could
leak to (Spark UI and event log, process arguments, task logs) for these exact values.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_logstore.settings import local_settings
from logstore_dev.services.cluster import ClusterSecrets, LocalCluster
from logstore_dev.services.local import free_ports
from logstore_dev.services.topology import CLUSTER, for_tests, port_count
from logstore_dev.testing.environment import REPO_ROOT, remove_home, spark_scratch_env
from tests.environments import executor_python

logging.getLogger("py4j").setLevel(logging.WARNING)

CANARIES = ClusterSecrets(
    s3_access_key="AKIACANARYc4n4ry01",
    s3_secret_key="canary-s3-secret-7d1e0b5a",
    postgres_password="canary-pg-password-93b1",
    catalog_credential="logstore:canary-catalog-credential-2f6c",
    sasl_password="canary-kafka-sasl-password-5e0d",
)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # not under pytest's own temporary root: every pytest run resets that to 0700, and PostgreSQL runs
    # as its own OS user, which must be able to reach its folder
    home = Path(tempfile.mkdtemp(prefix="logstore-cluster-"))
    dags = tmp_path_factory.mktemp("dags")
    for dag in ("logstore_pipeline.py", "logstore_reconcile.py", "logstore_compaction.py"):
        shutil.copy(REPO_ROOT / "dags" / dag, dags / dag)
    env = {
        "LOGSTORE_HOME": str(home),
        "LOGSTORE_CACHE": os.environ.get("LOGSTORE_CACHE") or str(REPO_ROOT / ".cache"),
        # the drivers' scratch folders, removed with the rest
        **spark_scratch_env(home),
    }
    # Kafka's failure detection shortened for a test cluster (TEST_KAFKA_SETTINGS): kills are fenced in 3 s
    topology = for_tests(CLUSTER.with_ports(free_ports(port_count(CLUSTER), consecutive=2)))
    service = LocalCluster(
        settings=local_settings(env),
        topology=topology,
        state_dir=home / "cluster",
        dags_folder=dags,
        cluster_secrets=CANARIES,
        # the workers run an interpreter with only pyspark and the executors' list, as a Spark image has
        python=str(executor_python()),
    )
    saved = {
        key: os.environ.get(key)
        for key in (*env, "LOGSTORE_CATALOG", "LOGSTORE_SPARK_JARS", "SPARK_LOCAL_IP", "PYSPARK_PYTHON")
    }
    os.environ.update(env)
    try:
        # this process runs operators, as an Airflow worker of the cluster does
        os.environ.update(service.driver_env())
        os.environ["LOGSTORE_CATALOG"] = service.catalog_spec().to_json()
        service.up(progress=_stamped)
        yield service
    finally:
        from airflow_logstore.log import kafka_client

        kafka_client.close_shared_producers()  # before the brokers go: no client left knocking
        service.down()
        remove_home(home)  # (LOGSTORE_KEEP_TEST_HOME keeps it)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _stamped(message: str) -> None:
    """Cluster progress with the time of day, to line up with the jobs' logs."""
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


@pytest.fixture
def cluster_connections(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's Airflow connections and variables point at the cluster, as its workers' do."""
    env = cluster.airflow_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def s3_upload(cluster: LocalCluster):
    """Put a local file into the warehouse bucket; returns its ``s3://`` URI."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=cluster.topology.s3_endpoint(),
        aws_access_key_id=cluster.secrets.s3_access_key,
        aws_secret_access_key=cluster.secrets.s3_secret_key,
        region_name=cluster.topology.region,
    )

    def upload(path: Path, key: str) -> str:
        client.upload_file(str(path), cluster.topology.bucket, key)
        return f"s3://{cluster.topology.bucket}/{key}"

    return upload
