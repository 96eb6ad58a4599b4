"""docker-compose.yml describes the multi-node deployment; `docker compose config` validates it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from airflow_logstore.testing.environment import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
REQUIRED = {
    "postgres",
    "kafka",
    "minio",
    "iceberg-rest",
    "spark-master",
    "spark-worker",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}


def _compose_command() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither 'docker compose' (the Compose plugin) nor 'docker-compose' is installed")
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert set(resolved["services"]) >= REQUIRED


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_every_node_of_the_deployment_is_there() -> None:
    services = _services()
    assert set(services) >= REQUIRED
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        build = service.get("build")
        if build:
            assert (REPO_ROOT / build["context"] / build["dockerfile"]).exists()


def test_connections_are_valid_json_with_the_settings_the_code_reads() -> None:
    env = _services()["airflow-scheduler"]["environment"]
    logstore = json.loads(env["AIRFLOW_CONN_LOGSTORE_DEFAULT"])
    assert logstore["conn_type"] == "logstore" and logstore["extra"]["type"] == "rest"
    assert logstore["extra"]["properties"]["s3.endpoint"] == "http://minio:9000"
    kafka = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert kafka["extra"]["bootstrap.servers"] == env["AIRFLOW_VAR_LOGSTORE_KAFKA_ADDRESS"] == "kafka:9092"
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["host"] == "spark://spark-master" and spark["port"] == 7077


def test_published_ports_bind_to_loopback_only() -> None:
    for name, service in _services().items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
