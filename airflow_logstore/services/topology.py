"""The multi-node deployment as data: which services, how many, on which ports, with which settings.

One description, two users: the local cluster profile (``logstore services up --profile cluster``)
starts exactly this on 127.0.0.1, and ``docker-compose.yml`` must describe the same (a test compares
the two). Ports are the defaults; a test run picks free ones with :meth:`ClusterTopology.with_ports`.
Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

WAREHOUSE_BUCKET = "warehouse"
S3_REGION = "us-east-1"


@dataclass(frozen=True)
class KafkaCluster:
    """Three KRaft nodes in combined mode (broker + controller) with a static controller quorum.

    Node ``i`` (1-based) listens on ``ports[i-1]`` for clients and ``ports[i-1] + 1`` as a controller."""

    ports: tuple[int, ...] = (9092, 9094, 9096)
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
        return ",".join(f"{host}:{port}" for port in self.ports)


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
        master, master_ui = next(it), next(it)
        worker_uis = tuple(next(it) for _ in range(self.spark.workers))
        return replace(
            self,
            postgres_port=postgres,
            s3_port=s3,
            rest_catalog_port=rest,
            airflow_port=airflow,
            kafka=replace(self.kafka, ports=kafka),
            spark=replace(
                self.spark, master_port=master, master_ui_port=master_ui, worker_ui_ports=worker_uis
            ),
        )


def port_count(topology: ClusterTopology) -> int:
    return 4 + len(topology.kafka.ports) + 2 + topology.spark.workers


CLUSTER = ClusterTopology()
