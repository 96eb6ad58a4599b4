"""The cluster profile: the multi-node deployment of docker-compose.yml, as local processes.

``./dev services up --profile cluster`` starts, on 127.0.0.1 only and in this order: PostgreSQL
(Airflow's metadata DB), an S3-compatible object store (moto) with the warehouse bucket, Iceberg's
REST catalog server on that store, three Kafka brokers (KRaft, replication 3, min ISR 2), a Spark
standalone master with two workers, and Airflow (api-server, scheduler, dag-processor, triggerer)
on PostgreSQL. The topology and its settings are :data:`logstore_dev.services.topology.CLUSTER`,
the same description docker-compose.yml is checked against. Every service keeps its state and PID
under ``<LOGSTORE_HOME>/cluster/<service>`` and is stopped by PID.

The DAGs are the embedded default's; only connections and variables differ
(:meth:`LocalCluster.airflow_env`).

The Spark workers' Python (their executors') is :envvar:`LOGSTORE_EXECUTOR_PYTHON` when set: an
interpreter with only what a Spark image has (pyspark and ``airflow_logstore.spark.executors``'s list), as
on a real worker; Airflow's tasks then name it as their jobs' ``PYSPARK_PYTHON``. Unset, workers run this
interpreter (which has everything).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.jars import cluster_spark_jars
from airflow_logstore.settings import EXAMPLE_DAGS, LocalSettings, local_settings
from airflow_logstore.table.catalog import CatalogSpec
from logstore_dev.services.topology import CLUSTER, ClusterTopology

#: The Spark workers' Python, for ``./dev services up --profile cluster`` (see the module's docstring).
EXECUTOR_PYTHON_ENV = "LOGSTORE_EXECUTOR_PYTHON"


class _Service(Protocol):
    def up(self, timeout: float = ...) -> Any: ...

    def down(self) -> Any: ...

    def status(self) -> Any: ...


@dataclass(frozen=True)
class ClusterSecrets:
    """The cluster's credentials: generated once per state folder, kept in a 0600 file."""

    s3_access_key: str
    s3_secret_key: str
    postgres_password: str
    catalog_credential: str = ""
    sasl_password: str = ""

    @classmethod
    def generate(cls) -> ClusterSecrets:
        return cls(
            s3_access_key="logstore-" + secrets.token_hex(6),
            s3_secret_key=secrets.token_urlsafe(24),
            postgres_password=secrets.token_urlsafe(18),
            sasl_password=secrets.token_urlsafe(18),
        )

    @classmethod
    def load_or_create(cls, path: Path) -> ClusterSecrets:
        stored = json.loads(path.read_text()) if path.exists() else {}
        fresh = cls.generate().__dict__
        if stored and all(stored.get(key) for key, value in fresh.items() if value):
            return cls(**stored)
        # first start, or a state folder from a version with fewer secrets: keep the old, add the new
        created = cls(**{**fresh, **{key: value for key, value in stored.items() if value}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(created.__dict__, out)
        return created

    def values(self) -> list[str]:
        return [value for value in self.__dict__.values() if value]


@dataclass
class LocalCluster:
    """The cluster profile's services, started in dependency order and stopped in reverse."""

    settings: LocalSettings = field(default_factory=local_settings)
    topology: ClusterTopology = CLUSTER
    state_dir: Path | None = None
    dags_folder: Path | None = None
    cluster_secrets: ClusterSecrets | None = None
    #: the Spark workers' (executors') Python; default :data:`EXECUTOR_PYTHON_ENV`, else this interpreter
    python: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state_dir = self.state_dir or self.settings.home / "cluster"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.python = self.python or os.environ.get(EXECUTOR_PYTHON_ENV) or None
        if self.python and not os.access(self.python, os.X_OK):
            raise ServiceError(
                f"the Spark workers' Python {self.python!r} ({EXECUTOR_PYTHON_ENV} or python=) "
                "is not an executable file"
            )
        self.cluster_secrets = self.cluster_secrets or ClusterSecrets.load_or_create(
            self.state_dir / "secrets.json"
        )
        self._services: dict[str, _Service] = {}

    # -- the services --------------------------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        assert self.state_dir is not None
        return self.state_dir / name

    @property
    def secrets(self) -> ClusterSecrets:
        assert self.cluster_secrets is not None
        return self.cluster_secrets

    def service(self, name: str) -> Any:
        """The service object of one component (``postgres``, ``s3``, ``catalog``, ``kafka``, ``spark``,
        ``airflow``), built on first use."""
        if name not in self._services:
            self._services[name] = self._builders()[name]()
        return self._services[name]

    def _builders(self) -> dict[str, Callable[[], _Service]]:
        return {
            "postgres": self._postgres,
            "s3": self._object_store,
            "catalog": self._rest_catalog,
            "kafka": self._kafka,
            "spark": self._spark,
            "airflow": self._airflow,
        }

    def _postgres(self) -> _Service:
        from logstore_dev.services.postgres import LocalPostgres

        t = self.topology
        return LocalPostgres(
            self.settings,
            port=t.postgres_port,
            state_dir=self._dir("postgres"),
            database=t.postgres_database,
            user=t.postgres_user,
            password=self.secrets.postgres_password,
        )

    def _object_store(self) -> _Service:
        from logstore_dev.services.objectstore import LocalObjectStore

        return LocalObjectStore(
            self.settings,
            port=self.topology.s3_port,
            state_dir=self._dir("s3"),
            bucket=self.topology.bucket,
            access_key=self.secrets.s3_access_key,
            secret_key=self.secrets.s3_secret_key,
            region=self.topology.region,
        )

    def _rest_catalog(self) -> _Service:
        from logstore_dev.services.rest_catalog import LocalRestCatalog

        t = self.topology
        return LocalRestCatalog(
            self.settings,
            port=t.rest_catalog_port,
            state_dir=self._dir("catalog"),
            warehouse=t.warehouse,
            s3_endpoint=t.s3_endpoint(),
            access_key=self.secrets.s3_access_key,
            secret_key=self.secrets.s3_secret_key,
            region=t.region,
        )

    def _kafka(self) -> _Service:
        from logstore_dev.services.kafka_cluster import LocalKafkaCluster

        return LocalKafkaCluster(
            self.settings, self.topology.kafka, self._dir("kafka"), sasl_password=self.secrets.sasl_password
        )

    def _spark(self) -> _Service:
        from logstore_dev.services.spark_standalone import LocalSparkCluster

        return LocalSparkCluster(self.settings, self.topology.spark, self._dir("spark"), python=self.python)

    def _airflow(self) -> _Service:
        from logstore_dev.services.airflow_local import LocalAirflow

        return LocalAirflow(
            self.settings,
            self.dags_folder or EXAMPLE_DAGS,
            port=self.topology.airflow_port,
            home=self._dir("airflow"),
            database_url=self.service("postgres").url,
            extra_env={**self.airflow_env(), **self.driver_env()},
        )

    # -- lifecycle -----------------------------------------------------------------------------------

    ORDER = ("postgres", "s3", "catalog", "kafka", "spark", "airflow")
    #: start stages: the storage side one after the other (the catalog needs the store), then the rest
    #: at once (Kafka, Spark and Airflow need nothing of each other; Airflow's DB is up by then)
    STAGES = (("postgres", "s3", "catalog"), ("kafka", "spark", "airflow"))

    def up(self, *, services: tuple[str, ...] | None = None, progress: Callable[[str], None] = print) -> None:
        """Start the services (all, or ``services``) stage by stage; record each start time."""
        self.jars_dir()  # every jar on this machine before any task needs one
        for stage in self.STAGES:
            chosen = [name for name in stage if services is None or name in services]
            if len(chosen) == 1 or stage is self.STAGES[0]:
                for name in chosen:
                    self._start(name, progress)
            else:
                self._start_together(chosen, progress)

    def _start(self, name: str, progress: Callable[[str], None]) -> None:
        started = time.monotonic()
        progress(f"[cluster] starting {name}")
        self.service(name).up()
        self.timings[name] = time.monotonic() - started
        progress(f"[cluster] {name} ready in {self.timings[name]:.1f}s")

    def _start_together(self, names: list[str], progress: Callable[[str], None]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        for name in names:
            self.service(name)  # built here, not in two threads at once
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for future in [pool.submit(self._start, name, progress) for name in names]:
                future.result()  # the first failure is raised, after the others finished starting

    def down(self, progress: Callable[[str], None] = print) -> None:
        """Stop every service, in reverse order; one that fails to stop does not keep the others up."""
        errors: list[str] = []
        for name in reversed(self.ORDER):
            try:
                self.service(name).down()
                progress(f"[cluster] {name} stopped")
            except Exception as exc:  # keep stopping the rest, then report
                errors.append(f"{name}: {exc}")
        if errors:
            raise ServiceError("some cluster services did not stop: " + "; ".join(errors))

    def status(self) -> dict[str, Any]:
        return {name: self.service(name).status() for name in self.ORDER}

    def pids(self) -> Iterator[int]:
        """The PIDs of every running process of the cluster (for memory and secret checks)."""
        import psutil

        for process in psutil.process_iter(["pid", "cmdline", "environ"]):
            try:
                if self._owns(process):
                    yield process.pid
            except (psutil.Error, OSError):
                continue

    def _owns(self, process: Any) -> bool:
        cmdline = " ".join(process.info.get("cmdline") or [])
        environ = process.info.get("environ") or {}
        return str(self.state_dir) in cmdline or str(self.state_dir) in json.dumps(environ)

    def memory_mib(self) -> float:
        """The resident memory of all the cluster's processes together."""
        import psutil

        total = 0
        for pid in self.pids():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
        return total / 2**20

    # -- how clients reach it ------------------------------------------------------------------------

    def jars_dir(self) -> Path:
        """One folder with every jar a job needs on this cluster (``LOGSTORE_SPARK_JARS``), as the Spark
        image's ``/opt/logstore/jars`` in docker-compose.yml: downloaded here, never inside a task."""
        folder = self._dir("jars")
        folder.mkdir(parents=True, exist_ok=True)
        for jar in cluster_spark_jars(self.settings):
            link = folder / jar.name
            if not link.exists():
                link.symlink_to(jar)
        return folder

    def catalog_spec(self, extra: Mapping[str, str] | None = None) -> CatalogSpec:
        """The REST catalog on the object store, as pyiceberg and Spark see it."""
        t = self.topology
        properties = {
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": t.s3_endpoint(),
            "s3.path-style-access": "true",
            "s3.access-key-id": self.secrets.s3_access_key,
            "s3.secret-access-key": self.secrets.s3_secret_key,
            "s3.region": t.region,
            "client.region": t.region,
        }
        if self.secrets.catalog_credential:
            properties["credential"] = self.secrets.catalog_credential
        properties.update(extra or {})
        return CatalogSpec(
            name=t.catalog_name,
            type="rest",
            uri=t.rest_catalog_uri(),
            warehouse=t.warehouse,
            properties=properties,
        )

    def kafka_extra(self) -> dict[str, str]:
        """The security settings a client of the cluster's brokers needs (SASL/PLAIN)."""
        from logstore_dev.services.topology import kafka_client_settings

        return kafka_client_settings(self.topology, self.secrets)

    def driver_env(self) -> dict[str, str]:
        """Where a Spark driver (in an Airflow task) finds its jars and which address it offers the
        executors, and the executors' Python when the workers have their own (:attr:`python`; the
        compose file's Airflow services name the Spark image's, ``topology.COMPOSE_EXECUTOR_PYTHON``):
        settings of the machine that runs the tasks."""
        env = {"LOGSTORE_SPARK_JARS": str(self.jars_dir()), "SPARK_LOCAL_IP": "127.0.0.1"}
        if self.python:
            env["PYSPARK_PYTHON"] = self.python
        return env

    def airflow_env(self) -> dict[str, str]:
        """Connections and variables of the cluster: the only difference from the embedded default."""
        from logstore_dev.services.topology import airflow_connections

        return airflow_connections(self.topology, hosts=None, secrets=self.secrets)
