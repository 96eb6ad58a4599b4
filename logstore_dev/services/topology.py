"""The multi-node deployment as data: which services, how many, on which ports, with which settings.

One description, two users: the local cluster profile (``./dev services up --profile cluster``)
starts exactly this on 127.0.0.1, and ``docker-compose.yml`` must describe the same (a test compares
the two). Ports are the defaults; a test run picks free ones with :meth:`ClusterTopology.with_ports`.
Nothing here does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

WAREHOUSE_BUCKET = "warehouse"
S3_REGION = "us-east-1"


@dataclass(frozen=True)
class KafkaCluster:
    """Three KRaft nodes in combined mode (broker + controller) with a static controller quorum.

    Node ``i`` (1-based) listens on ``ports[i-1]`` inside the cluster (replication, administration),
    ``ports[i-1] + 1`` as a controller, and ``sasl_ports[i-1]`` for clients: every client (Airflow tasks,
    Spark drivers and executors, readers) authenticates as ``sasl_user`` with SASL/PLAIN."""

    ports: tuple[int, ...] = (9092, 9094, 9096)
    sasl_ports: tuple[int, ...] = (9192, 9194, 9196)
    sasl_user: str = "logstore"
    settings: dict[str, str] = field(
        default_factory=lambda: {
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "unclean.leader.election.enable": "false",
            "auto.create.topics.enable": "false",
        }
    )

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.ports) + 1))

    def controller_port(self, node_id: int) -> int:
        return self.ports[node_id - 1] + 1

    def quorum_voters(self, host: str = "127.0.0.1") -> str:
        return ",".join(f"{node}@{host}:{self.controller_port(node)}" for node in self.node_ids)

    def bootstrap(self, host: str = "127.0.0.1") -> str:
        """The cluster-internal listeners (no authentication; not for clients)."""
        return ",".join(f"{host}:{port}" for port in self.ports)

    def sasl_bootstrap(self, host: str = "127.0.0.1") -> str:
        """The clients' listeners (SASL/PLAIN)."""
        return ",".join(f"{host}:{port}" for port in self.sasl_ports)


@dataclass(frozen=True)
class SparkCluster:
    """A standalone master and its workers; the master's web UI stays off Airflow's port 8080."""

    master_port: int = 7077
    master_ui_port: int = 8090
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    worker_ui_ports: tuple[int, ...] = (8091, 8092)

    def master_url(self, host: str = "127.0.0.1") -> str:
        return f"spark://{host}:{self.master_port}"


@dataclass(frozen=True)
class ClusterTopology:
    postgres_port: int = 5432
    postgres_database: str = "airflow"
    postgres_user: str = "airflow"
    s3_port: int = 9000
    rest_catalog_port: int = 8181
    airflow_port: int = 8080
    kafka: KafkaCluster = field(default_factory=KafkaCluster)
    spark: SparkCluster = field(default_factory=SparkCluster)
    bucket: str = WAREHOUSE_BUCKET
    region: str = S3_REGION
    catalog_name: str = "logstore"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/"

    def s3_endpoint(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.s3_port}"

    def rest_catalog_uri(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.rest_catalog_port}"

    def with_ports(self, ports: list[int]) -> ClusterTopology:
        """The same topology on other ports: ``ports`` are the first ports of free pairs
        (p and p+1 free), as many as :func:`port_count` says."""
        if len(ports) != port_count(self):
            raise ValueError(f"{port_count(self)} ports are needed, got {len(ports)}")
        it = iter(ports)
        postgres, s3, rest, airflow = next(it), next(it), next(it), next(it)
        kafka = tuple(next(it) for _ in self.kafka.ports)
        sasl = tuple(next(it) for _ in self.kafka.ports)
        master, master_ui = next(it), next(it)
        worker_uis = tuple(next(it) for _ in range(self.spark.workers))
        return replace(
            self,
            postgres_port=postgres,
            s3_port=s3,
            rest_catalog_port=rest,
            airflow_port=airflow,
            kafka=replace(self.kafka, ports=kafka, sasl_ports=sasl),
            spark=replace(
                self.spark, master_port=master, master_ui_port=master_ui, worker_ui_ports=worker_uis
            ),
        )


def port_count(topology: ClusterTopology) -> int:
    return 4 + 2 * len(topology.kafka.ports) + 2 + topology.spark.workers


CLUSTER = ClusterTopology()

#: Faster failure detection for the clusters the tests start (tests/cluster), not for a deployment
#: (:data:`CLUSTER` and docker-compose.yml keep Kafka's defaults): a SIGKILLed node is fenced, and its
#: partitions get a new leader, once the controller has missed its heartbeats for
#: ``broker.session.timeout.ms`` (default 9 s, heartbeats every 2 s). Every broker-kill test waited those
#: 9 s with its producers blocked; on one host, with no network between the nodes, 3 s (6 heartbeats
#: missed) is still far from fencing a live node.
TEST_KAFKA_SETTINGS = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000"}


def for_tests(topology: ClusterTopology) -> ClusterTopology:
    """``topology`` with :data:`TEST_KAFKA_SETTINGS` added to its brokers' settings."""
    settings = {**topology.kafka.settings, **TEST_KAFKA_SETTINGS}
    return replace(topology, kafka=replace(topology.kafka, settings=settings))


# -- how clients reach the topology: one set of functions for the local profile and docker-compose.yml ---

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServiceHosts:
    """The host name of every service, as its clients reach it. Ports always come from the topology.

    The local cluster profile runs everything on 127.0.0.1 (:data:`LOCAL_HOSTS`); docker-compose.yml gives
    every node its own service name (:data:`COMPOSE_HOSTS`). Empty ``kafka`` / ``spark_workers`` mean
    ``default`` for every node."""

    default: str = LOOPBACK
    postgres: str = ""
    s3: str = ""
    rest_catalog: str = ""
    kafka: tuple[str, ...] = ()
    spark_master: str = ""
    spark_workers: tuple[str, ...] = ()
    airflow: str = ""

    def of(self, role: str) -> str:
        """The host of a single-node role: ``postgres``, ``s3``, ``rest_catalog``, ``spark_master`` or
        ``airflow``."""
        host = getattr(self, role)
        return str(host or self.default)

    def kafka_node(self, kafka: KafkaCluster, node_id: int) -> str:
        if not self.kafka:
            return self.default
        if len(self.kafka) != len(kafka.ports):
            raise ValueError(f"{len(kafka.ports)} Kafka hosts are needed, got {len(self.kafka)}")
        return self.kafka[node_id - 1]

    def spark_worker(self, spark: SparkCluster, index: int) -> str:
        """The host of worker ``index`` (0-based)."""
        if not self.spark_workers:
            return self.default
        if len(self.spark_workers) != spark.workers:
            raise ValueError(f"{spark.workers} Spark worker hosts are needed, got {len(self.spark_workers)}")
        return self.spark_workers[index]


LOCAL_HOSTS = ServiceHosts()
COMPOSE_HOSTS = ServiceHosts(
    default="",
    postgres="postgres",
    s3="minio",
    rest_catalog="iceberg-rest",
    kafka=("kafka-1", "kafka-2", "kafka-3"),
    spark_master="spark-master",
    spark_workers=("spark-worker-1", "spark-worker-2"),
    airflow="airflow-apiserver",
)


class ConnectionSecrets(Protocol):
    """The credentials the connections carry (the cluster profile's ``ClusterSecrets`` has them)."""

    @property
    def s3_access_key(self) -> str: ...

    @property
    def s3_secret_key(self) -> str: ...

    @property
    def catalog_credential(self) -> str: ...

    @property
    def sasl_password(self) -> str: ...


@dataclass(frozen=True)
class Secrets:
    s3_access_key: str
    s3_secret_key: str
    catalog_credential: str = ""
    postgres_password: str = ""
    sasl_password: str = ""


#: docker-compose.yml names its secrets, never their values: Compose fills them in from ``.env``
#: (``docker/.env.example`` lists them) and refuses to start when one is missing.
COMPOSE_SECRETS = Secrets(
    s3_access_key="${MINIO_ROOT_USER:?set it in .env, see docker/.env.example}",
    s3_secret_key="${MINIO_ROOT_PASSWORD:?set it in .env, see docker/.env.example}",
    postgres_password="${POSTGRES_PASSWORD:?set it in .env, see docker/.env.example}",
    sasl_password="${KAFKA_SASL_PASSWORD:?set it in .env, see docker/.env.example}",
)


def kafka_bootstrap(topology: ClusterTopology, hosts: ServiceHosts | None = None) -> str:
    """Every broker's client (SASL) listener, ``host:port,...``."""
    hosts = hosts or LOCAL_HOSTS
    kafka = topology.kafka
    return ",".join(
        f"{hosts.kafka_node(kafka, node)}:{kafka.sasl_ports[node - 1]}" for node in kafka.node_ids
    )


def kafka_client_settings(topology: ClusterTopology, secrets: ConnectionSecrets) -> dict[str, str]:
    """The librdkafka security settings of every client of the cluster (the ``kafka_default`` extra)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": topology.kafka.sasl_user,
        "sasl.password": secrets.sasl_password,
    }


def kafka_quorum_voters(topology: ClusterTopology, hosts: ServiceHosts | None = None) -> str:
    """The static controller quorum, ``id@host:controller_port,...``."""
    hosts = hosts or LOCAL_HOSTS
    kafka = topology.kafka
    return ",".join(
        f"{node}@{hosts.kafka_node(kafka, node)}:{kafka.controller_port(node)}" for node in kafka.node_ids
    )


def kafka_node_properties(
    topology: ClusterTopology,
    node_id: int,
    secrets: ConnectionSecrets,
    hosts: ServiceHosts | None = None,
    *,
    bind_all: bool = False,
) -> dict[str, str]:
    """``server.properties`` of one combined-mode KRaft node (without ``log.dirs``): its listeners (the
    internal one, the controller, the clients' SASL/PLAIN one with its single user), the static quorum
    and every setting of :attr:`KafkaCluster.settings`. ``bind_all`` listens on every interface (a
    container); otherwise on the node's own host."""
    hosts = hosts or LOCAL_HOSTS
    kafka = topology.kafka
    host = hosts.kafka_node(kafka, node_id)
    bind = "" if bind_all else host
    port, controller = kafka.ports[node_id - 1], kafka.controller_port(node_id)
    sasl = kafka.sasl_ports[node_id - 1]
    user, password = kafka.sasl_user, secrets.sasl_password
    return {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://{bind}:{port},CONTROLLER://{bind}:{controller},SASL://{bind}:{sasl}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},SASL://{host}:{sasl}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}" user_{user}="{password}";'
        ),
        "controller.quorum.voters": kafka_quorum_voters(topology, hosts),
        **kafka.settings,
    }


def kafka_docker_env(properties: dict[str, str]) -> dict[str, str]:
    """The ``apache/kafka`` image's environment for ``properties``: ``KAFKA_`` + the name upper-cased,
    ``.`` as ``_``, ``_`` as ``__`` and ``-`` as ``___`` (the image's documented mapping)."""

    def name(key: str) -> str:
        return "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()

    return {name(key): value for key, value in properties.items()}


def rest_catalog_environment(
    topology: ClusterTopology, secrets: ConnectionSecrets, *, jdbc_uri: str, hosts: ServiceHosts | None = None
) -> dict[str, str]:
    """The environment of Iceberg's REST catalog server (``RESTCatalogServer``, also the
    ``apache/iceberg-rest-fixture`` image): a JDBC catalog at ``jdbc_uri`` (``jdbc:sqlite:file:...`` for a
    file-backed one) whose tables live on the object store through S3FileIO. The server turns
    ``CATALOG_A_B__C`` into the catalog property ``a.b-c``, and listens on ``rest.port`` (on every
    interface: it has no setting for the address)."""
    hosts = hosts or LOCAL_HOSTS
    return {
        "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
        "CATALOG_URI": jdbc_uri,
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": topology.warehouse,
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": topology.s3_endpoint(hosts.of("s3")),
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_S3_ACCESS__KEY__ID": secrets.s3_access_key,
        "CATALOG_S3_SECRET__ACCESS__KEY": secrets.s3_secret_key,
        "CATALOG_CLIENT_REGION": topology.region,
        "CATALOG_REST_PORT": str(topology.rest_catalog_port),
        "AWS_REGION": topology.region,
    }


def airflow_database_url(topology: ClusterTopology, password: str, hosts: ServiceHosts | None = None) -> str:
    """Airflow's metadata database (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``) on the topology's PostgreSQL."""
    hosts = hosts or LOCAL_HOSTS
    return (
        f"postgresql+psycopg2://{topology.postgres_user}:{password}@{hosts.of('postgres')}:"
        f"{topology.postgres_port}/{topology.postgres_database}"
    )


def spark_master_args(topology: ClusterTopology, hosts: ServiceHosts | None = None) -> list[str]:
    """``spark-class org.apache.spark.deploy.master.Master`` arguments."""
    hosts = hosts or LOCAL_HOSTS
    spark = topology.spark
    return [
        "--host", hosts.of("spark_master"),
        "--port", str(spark.master_port),
        "--webui-port", str(spark.master_ui_port),
    ]  # fmt: skip


def spark_worker_args(topology: ClusterTopology, index: int, hosts: ServiceHosts | None = None) -> list[str]:
    """``spark-class org.apache.spark.deploy.worker.Worker`` arguments of worker ``index`` (0-based)."""
    hosts = hosts or LOCAL_HOSTS
    spark = topology.spark
    return [
        "--host", hosts.spark_worker(spark, index),
        "--webui-port", str(spark.worker_ui_ports[index]),
        "--cores", str(spark.worker_cores),
        "--memory", spark.worker_memory,
        spark.master_url(hosts.of("spark_master")),
    ]  # fmt: skip


def airflow_connections(
    topology: ClusterTopology, hosts: ServiceHosts | None, secrets: ConnectionSecrets
) -> dict[str, str]:
    """The connections and variables of a deployment of ``topology`` (environment variable -> value): the
    only settings in which it differs from the embedded default; the DAGs stay the same.

    ``hosts`` None is the local cluster profile (127.0.0.1); docker-compose.yml uses :data:`COMPOSE_HOSTS`
    and :data:`COMPOSE_SECRETS` (a test checks that its environment is exactly this)."""
    hosts = hosts or LOCAL_HOSTS
    bootstrap = kafka_bootstrap(topology, hosts)
    logstore: dict[str, Any] = {
        "conn_type": "logstore",
        "host": topology.rest_catalog_uri(hosts.of("rest_catalog")),
        "extra": {
            "type": "rest",
            "warehouse": topology.warehouse,
            "catalog_name": topology.catalog_name,
            "properties": {
                "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "s3.endpoint": topology.s3_endpoint(hosts.of("s3")),
                "s3.path-style-access": "true",
                "s3.access-key-id": secrets.s3_access_key,
                "s3.secret-access-key": secrets.s3_secret_key,
                "s3.region": topology.region,
                "client.region": topology.region,
            },
        },
    }
    if secrets.catalog_credential:
        logstore["password"] = secrets.catalog_credential  # the REST catalog's ``credential``
    kafka = {
        "conn_type": "kafka",
        "extra": {"bootstrap.servers": bootstrap, **kafka_client_settings(topology, secrets)},
    }
    spark = {
        "conn_type": "spark",
        "host": f"spark://{hosts.of('spark_master')}",
        "port": topology.spark.master_port,
        "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
    }
    return {
        "AIRFLOW_CONN_LOGSTORE_DEFAULT": json.dumps(logstore),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(kafka),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark),
        "AIRFLOW_VAR_LOGSTORE_KAFKA_ADDRESS": bootstrap,
    }


#: The executors' Python of docker-compose.yml: the environment ``docker/spark.Dockerfile`` builds with the
#: Airflow image's Python version (PySpark refuses executors of another minor version than the driver's).
#: Airflow's tasks send it with every job (``PYSPARK_PYTHON``), as the local cluster profile's tasks send
#: ``LOGSTORE_EXECUTOR_PYTHON`` (``LocalCluster.driver_env``).
COMPOSE_EXECUTOR_PYTHON = "/opt/logstore-executors/bin/python"


def compose_airflow_settings(topology: ClusterTopology) -> dict[str, str]:
    """docker-compose.yml's Airflow settings: :func:`airflow_connections` and :func:`airflow_database_url`
    on :data:`COMPOSE_HOSTS`, with :data:`COMPOSE_SECRETS` (names of ``.env`` variables, never values), and
    the executors' Python of the Spark image (:data:`COMPOSE_EXECUTOR_PYTHON`)."""
    return {
        **airflow_connections(topology, COMPOSE_HOSTS, COMPOSE_SECRETS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_database_url(
            topology, COMPOSE_SECRETS.postgres_password, COMPOSE_HOSTS
        ),
        "PYSPARK_PYTHON": COMPOSE_EXECUTOR_PYTHON,
    }
