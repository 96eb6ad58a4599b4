"""docker-compose.yml is the cluster topology of ``services/topology.py``, as Compose's own loader reads it.

The file is loaded by ``tools/composecheck`` (compose-go, the loader ``docker compose config`` is built on;
built with Go on first use, see ``tests/composecheck.py``) with ``docker/.env.example``, and its normalized
form is compared with :data:`topology.CLUSTER`: the same roles and counts, ports, Kafka settings, Spark
master/workers, REST catalog settings, and the connections the local cluster profile gets, but for host
names and secrets. Never skipped: a machine without Go fails here with what to install.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_logstore import __version__
from logstore_dev.services import topology
from logstore_dev.services.topology import CLUSTER, COMPOSE_HOSTS, LOOPBACK, Secrets
from tests.composecheck import load
from tests.composecheck import main as composecheck_main

REPO_ROOT = Path(__file__).resolve().parents[4]
COMPOSE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / "docker" / ".env.example"
AIRFLOW_COMPONENTS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
SPARK_CLASS = "/opt/spark/bin/spark-class"


def _env_example() -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if re.match(r"^[A-Z_]+=", line)
    )
    return {key: value for key, value in pairs}


def _secrets() -> Secrets:
    """The secrets Compose fills in from docker/.env.example."""
    env = _env_example()
    return Secrets(
        s3_access_key=env["MINIO_ROOT_USER"],
        s3_secret_key=env["MINIO_ROOT_PASSWORD"],
        postgres_password=env["POSTGRES_PASSWORD"],
        sasl_password=env["KAFKA_SASL_PASSWORD"],
    )


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    done = load(COMPOSE, ENV_EXAMPLE)
    assert done.returncode == 0, f"Compose's loader rejected docker-compose.yml:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def services(project: dict[str, Any]) -> dict[str, Any]:
    return project["services"]


def _published(service: dict[str, Any]) -> set[tuple[str, int, int]]:
    return {(p.get("host_ip", ""), int(p["published"]), int(p["target"])) for p in service.get("ports") or []}


# -- roles and counts ----------------------------------------------------------------------------------


def test_the_same_roles_and_counts_as_the_topology(services: dict[str, Any]) -> None:
    kafka = {name for name in services if name.startswith("kafka-")}
    workers = {name for name in services if name.startswith("spark-worker")}
    assert sorted(kafka) == sorted(COMPOSE_HOSTS.kafka) and len(kafka) == len(CLUSTER.kafka.ports) == 3
    assert (
        sorted(workers) == sorted(COMPOSE_HOSTS.spark_workers) and len(workers) == CLUSTER.spark.workers == 2
    )
    for role in ("postgres", "s3", "rest_catalog", "spark_master", "airflow"):
        assert COMPOSE_HOSTS.of(role) in services, role
    for name in (*kafka, *workers):
        assert services[name].get("deploy", {}).get("replicas", 1) == 1, f"{name}: one node per service"
    expected = {
        *AIRFLOW_COMPONENTS, "airflow-init", "postgres", "minio", "minio-init", "iceberg-rest",
        "spark-master", *workers, *kafka,
    }  # fmt: skip
    assert set(services) == expected


def test_airflow_runs_its_four_components_on_postgresql(services: dict[str, Any]) -> None:
    for name, component in AIRFLOW_COMPONENTS.items():
        assert services[name]["command"][:2] == ["airflow", component], name
    api = services["airflow-apiserver"]
    assert api["command"][2:] == ["--port", str(CLUSTER.airflow_port)]
    assert _published(api) == {(LOOPBACK, CLUSTER.airflow_port, CLUSTER.airflow_port)}
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_USER"] == CLUSTER.postgres_user
    assert postgres["POSTGRES_DB"] == CLUSTER.postgres_database
    assert postgres["PGPORT"] == str(CLUSTER.postgres_port)


# -- Kafka ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("node", CLUSTER.kafka.node_ids)
def test_kafka_nodes_have_every_setting_of_the_topology(services: dict[str, Any], node: int) -> None:
    name = COMPOSE_HOSTS.kafka_node(CLUSTER.kafka, node)
    env = services[name]["environment"]
    expected = topology.kafka_docker_env(
        topology.kafka_node_properties(CLUSTER, node, _secrets(), COMPOSE_HOSTS, bind_all=True)
    )
    actual = {
        key: value for key, value in env.items() if key.startswith("KAFKA_") and key != "KAFKA_LOG_DIRS"
    }
    assert actual == expected, f"{name}: settings differ from topology.CLUSTER"
    for key, value in CLUSTER.kafka.settings.items():  # spelled out, for a readable failure
        variable = topology.kafka_docker_env({key: value}).popitem()[0]
        assert env.get(variable) == value, f"{name}: {key}={env.get(variable)}, the topology says {value}"
    port = CLUSTER.kafka.ports[node - 1]
    assert f"--bootstrap-server localhost:{port}" in " ".join(services[name]["healthcheck"]["test"])
    assert env["KAFKA_LOG_DIRS"] in {volume["target"] for volume in services[name]["volumes"]}


def test_kafka_nodes_share_one_cluster_id(services: dict[str, Any]) -> None:
    ids = {services[name]["environment"]["CLUSTER_ID"] for name in COMPOSE_HOSTS.kafka}
    assert len(ids) == 1 and ids != {""}


# -- Spark ----------------------------------------------------------------------------------------------


def test_spark_master_and_workers_as_the_topology_says(services: dict[str, Any]) -> None:
    master = services["spark-master"]
    expected_master = topology.spark_master_args(CLUSTER, COMPOSE_HOSTS)
    assert master["command"] == [SPARK_CLASS, "org.apache.spark.deploy.master.Master", *expected_master]
    assert CLUSTER.spark.master_ui_port != CLUSTER.airflow_port
    assert _published(master) == {(LOOPBACK, CLUSTER.spark.master_ui_port, CLUSTER.spark.master_ui_port)}
    for index, name in enumerate(COMPOSE_HOSTS.spark_workers):
        expected = topology.spark_worker_args(CLUSTER, index, COMPOSE_HOSTS)
        assert services[name]["command"] == [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", *expected]
        assert services[name]["image"] == master["image"]


# -- object store and REST catalog --------------------------------------------------------------------------


def test_object_store_serves_the_warehouse_bucket(services: dict[str, Any]) -> None:
    command = services["minio"]["command"]
    assert command[command.index("--address") + 1] == f":{CLUSTER.s3_port}"
    assert services["minio"]["environment"]["MINIO_REGION"] == CLUSTER.region
    init = " ".join(services["minio-init"]["entrypoint"])
    assert f"mc mb --ignore-existing --region {CLUSTER.region} local/{CLUSTER.bucket}" in init
    assert topology.COMPOSE_HOSTS.of("s3") == "minio"


def test_rest_catalog_is_a_file_backed_jdbc_catalog_on_the_object_store(services: dict[str, Any]) -> None:
    service = services["iceberg-rest"]
    assert service["image"] == "apache/iceberg-rest-fixture:1.11.0"
    env = service["environment"]
    jdbc_uri = env["CATALOG_URI"]
    assert jdbc_uri.startswith("jdbc:sqlite:file:/")
    folder = str(Path(jdbc_uri.removeprefix("jdbc:sqlite:file:")).parent)
    assert folder in {volume["target"] for volume in service["volumes"]}, (
        "the catalog file must be on a volume"
    )
    expected = topology.rest_catalog_environment(CLUSTER, _secrets(), jdbc_uri=jdbc_uri, hosts=COMPOSE_HOSTS)
    assert env == expected


# -- connections: the same function, compose hosts vs the local profile's 127.0.0.1 --------------------------


def test_every_airflow_component_gets_the_topologys_connections(services: dict[str, Any]) -> None:
    secrets = _secrets()
    expected = {
        **topology.airflow_connections(CLUSTER, COMPOSE_HOSTS, secrets),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": topology.airflow_database_url(
            CLUSTER, secrets.postgres_password, COMPOSE_HOSTS
        ),
    }
    for name in (*AIRFLOW_COMPONENTS, "airflow-init"):
        env = services[name]["environment"]
        assert {key: env.get(key) for key in expected} == expected, name
    kafka = json.loads(expected["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert kafka["extra"]["bootstrap.servers"].split(",") == [
        f"{host}:{port}" for host, port in zip(COMPOSE_HOSTS.kafka, CLUSTER.kafka.sasl_ports, strict=True)
    ]


def test_airflows_jobs_name_the_spark_images_executors_python(services: dict[str, Any]) -> None:
    """What every Airflow task sends with its jobs (``PYSPARK_PYTHON``, as the local cluster profile's tasks
    send ``LOGSTORE_EXECUTOR_PYTHON``): the Spark image's executors' environment, whose Python version is
    the Airflow image's (tests/unit/spark/test_executors.py checks both Dockerfiles), not a bare ``python3``
    (the Spark base image's is 3.10, which PySpark refuses for a 3.11 driver)."""
    for name in (*AIRFLOW_COMPONENTS, "airflow-init"):
        env = services[name]["environment"]
        python, wanted = env.get("PYSPARK_PYTHON"), topology.COMPOSE_EXECUTOR_PYTHON
        assert python == wanted, f"{name}: PYSPARK_PYTHON={python}, the Spark image's executors run {wanted}"
    for name in ("spark-master", *COMPOSE_HOSTS.spark_workers):
        assert "PYSPARK_PYTHON" not in services[name].get("environment", {}), f"{name}: the image's, only"


def test_connections_differ_from_the_local_profiles_only_in_host_names(services: dict[str, Any]) -> None:
    env = services["airflow-scheduler"]["environment"]
    local = topology.airflow_connections(CLUSTER, None, _secrets())
    hosts = sorted(
        {
            *COMPOSE_HOSTS.kafka,
            *(COMPOSE_HOSTS.of(r) for r in ("s3", "rest_catalog", "spark_master", "postgres")),
        },
        key=len,
        reverse=True,
    )
    names = "|".join(hosts)
    pattern = re.compile(rf"(?<=//)({names})\b|(?<![\w-])({names})(?=:\d)")
    for key, value in local.items():
        assert key in env, key
        assert pattern.sub(LOOPBACK, env[key]) == value, key
        if key.startswith("AIRFLOW_CONN_"):
            assert json.loads(env[key]).keys() == json.loads(value).keys()


def test_the_generated_settings_block_is_current() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "compose_settings", REPO_ROOT / "tools" / "compose_settings.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = COMPOSE.read_text()
    assert module.rewrite(text) == text, "run .venv/bin/python tools/compose_settings.py"
    raw = yaml.safe_load(text)["x-airflow-settings"]
    assert raw == topology.compose_airflow_settings(CLUSTER)


# -- secrets -------------------------------------------------------------------------------------


def test_secrets_stay_in_the_env_file() -> None:
    text = "\n".join(line for line in COMPOSE.read_text().splitlines() if not line.lstrip().startswith("#"))
    example = _env_example()
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", text))
    assert used == set(example), (
        f"docker/.env.example and docker-compose.yml name different variables: {used ^ set(example)}"
    )
    for key, value in example.items():
        if len(value) >= 8:  # a value, not a word the file uses anyway
            assert value not in text, f"docker-compose.yml holds the value of {key}"


def test_published_ports_bind_to_loopback_only(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for host_ip, published, _ in _published(service):
            assert host_ip == LOOPBACK, f"{name} publishes {published} on every interface"


def test_build_contexts_exist(services: dict[str, Any]) -> None:
    for name, service in services.items():
        build = service.get("build")
        if build:
            assert (REPO_ROOT / build["context"] / build["dockerfile"]).exists(), name


def test_the_images_built_here_are_tagged_with_the_package_version(services: dict[str, Any]) -> None:
    """``airflow-logstore/<image>:<tag>``: the tag is the version of the package the image holds."""
    built = {service["image"] for service in services.values() if service.get("build")}
    assert {image.split(":")[0] for image in built} == {"airflow-logstore/airflow", "airflow-logstore/spark"}
    ours = {name: s["image"] for name, s in services.items() if s["image"].startswith("airflow-logstore/")}
    wrong = {name: image for name, image in ours.items() if image.rpartition(":")[2] != __version__}
    assert not wrong, f"images not tagged with airflow_logstore.__version__ {__version__}: {wrong}"


# -- the loader can say no ----------------------------------------------------------------------


def test_the_loader_rejects_an_invalid_file_with_its_message(tmp_path: Path) -> None:
    invalid = tmp_path / "docker-compose.yml"
    invalid.write_text("services:\n  web:\n    image: nginx\n    restart: sometimes\n    portz: ['80:80']\n")
    done = load(invalid, cwd=tmp_path)
    assert done.returncode != 0
    assert "portz" in done.stderr, done.stderr


def test_the_loader_rejects_the_file_without_its_secrets(tmp_path: Path) -> None:
    copy = tmp_path / "docker-compose.yml"
    shutil.copy(COMPOSE, copy)
    (tmp_path / "empty.env").write_text("")
    done = load(copy, tmp_path / "empty.env", cwd=tmp_path)
    assert done.returncode != 0
    assert "set it in .env, see docker/.env.example" in done.stderr, done.stderr


def test_composecheck_as_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert composecheck_main([]) == 0
    assert set(json.loads(capsys.readouterr().out)["services"]) >= set(AIRFLOW_COMPONENTS)
