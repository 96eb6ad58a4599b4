"""The embedded default's real service: a single-node Apache Kafka broker (KRaft).

Its jars come from Maven Central once (:func:`airflow_logstore.jars.kafka_jars`). The broker runs with
the machine's Java on 127.0.0.1 only, keeps its data under ``LOGSTORE_HOME``, and is stopped by its own
pid.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.jars import kafka_jars
from airflow_logstore.settings import LocalSettings, local_settings
from logstore_dev.services._process import (
    ManagedProcess,
    cmdline,
    ensure_port_free,
    java,
    java_tmpdir,
    port_open,
)

# -- the broker --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerOptions:
    """How the local broker listens. ``sasl_users`` adds a SASL_PLAINTEXT (PLAIN) listener.

    A node of a multi-node cluster gives its ``node_id``, the cluster's ``quorum_voters``
    (``id@host:port,...``), the ``cluster_id`` every node is formatted with, and ``settings``
    that replace or extend the single broker's server.properties (e.g. replication factors)."""

    port: int
    sasl_port: int | None = None
    sasl_users: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    node_id: int = 1
    quorum_voters: str | None = None
    cluster_id: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port the broker listens on."""
        return (self.port, self.controller_port, *([self.sasl_port] if self.sasl_port else []))

    @property
    def name(self) -> str:
        """How messages name the broker: a node of a cluster by its id and ports."""
        if self.quorum_voters is None:
            return "the Kafka broker"
        return f"Kafka node {self.node_id} (127.0.0.1:{self.port}, controller {self.controller_port})"


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    log_file: Path

    def describe(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        return f"kafka broker {state} at {self.bootstrap}; data in {self.data_dir}; log {self.log_file}"


def _server_properties(options: BrokerOptions, data_dir: Path) -> str:
    listeners = [f"PLAINTEXT://127.0.0.1:{options.port}", f"CONTROLLER://127.0.0.1:{options.controller_port}"]
    advertised = [f"PLAINTEXT://127.0.0.1:{options.port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    extra: list[str] = []
    if options.sasl_port:
        listeners.append(f"SASL://127.0.0.1:{options.sasl_port}")
        advertised.append(f"SASL://127.0.0.1:{options.sasl_port}")
        protocols.append("SASL:SASL_PLAINTEXT")
        users = " ".join(f'user_{user}="{password}"' for user, password in options.sasl_users.items())
        first_user, first_password = next(iter(options.sasl_users.items()))
        extra += [
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl.sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{first_user}" password="{first_password}" {users};',
        ]
    lines = [
        "process.roles=broker,controller",
        f"node.id={options.node_id}",
        "controller.quorum.voters="
        + (options.quorum_voters or f"{options.node_id}@127.0.0.1:{options.controller_port}"),
        "listeners=" + ",".join(listeners),
        "advertised.listeners=" + ",".join(advertised),
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=" + ",".join(protocols),
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=4",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=4",
        "share.coordinator.state.topic.replication.factor=1",
        "group.initial.rebalance.delay.ms=0",
        "log.retention.check.interval.ms=1000",
        "log.cleaner.backoff.ms=1000",
        *extra,
    ]
    return "\n".join(_with_settings(lines, options.settings)) + "\n"


def _with_settings(lines: list[str], settings: Mapping[str, str]) -> list[str]:
    """``key=value`` lines where each of ``settings`` replaces the line of its key, or is appended."""
    keys = [line.split("=", 1)[0] for line in lines]
    replaced = [
        f"{key}={settings[key]}" if key in settings else line for key, line in zip(keys, lines, strict=True)
    ]
    return replaced + [f"{key}={value}" for key, value in settings.items() if key not in keys]


_LOG4J2 = """status = warn
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.kafkaorg.name = org.apache.kafka
logger.kafkaorg.level = WARN
"""


class LocalBroker:
    """A real single-node Kafka broker under ``<home>/kafka`` (or ``state_dir``)."""

    def __init__(
        self,
        settings: LocalSettings | None = None,
        *,
        options: BrokerOptions | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.settings = settings or local_settings()
        self.options = options or BrokerOptions(port=self.settings.kafka_port)
        self.state_dir = state_dir or self.settings.broker_dir
        self.data_dir = self.state_dir / "data"
        self.pid_file = self.state_dir / "broker.pid"
        self.log_file = self.state_dir / "broker.log"
        self.stdout_file = self.state_dir / "broker.out"
        self.process = ManagedProcess(
            self.options.name,
            state_dir=self.state_dir,
            pid_file=self.pid_file,
            log_file=self.stdout_file,
            more_logs=[self.log_file],
            is_ours=lambda pid: f"-Dlogstore.state={self.state_dir}" in cmdline(pid),
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.options.port}"

    @property
    def sasl_bootstrap(self) -> str | None:
        return f"127.0.0.1:{self.options.sasl_port}" if self.options.sasl_port else None

    # -- lifecycle -----------------------------------------------------------------------------------

    def pid(self) -> int | None:
        return self.process.pid()

    def status(self) -> BrokerStatus:
        pid = self.pid()
        running = pid is not None and port_open(self.options.port)
        return BrokerStatus(running, pid, self.bootstrap, self.data_dir, self.log_file)

    def up(self, timeout: float = 90.0) -> BrokerStatus:
        """Start the broker unless it runs already; wait until it answers Kafka requests."""
        self.process.up(self.launch, self.answers, timeout=timeout, where=self.bootstrap)
        return self.status()

    def launch(self) -> subprocess.Popen[bytes] | None:
        """Start the broker process unless it runs already, without waiting for it to answer.

        Returns the new process, or None when this broker was running already."""
        if self.pid() is not None:
            return None
        for port in self.options.ports:
            ensure_port_free(port, self.process.name, "set LOGSTORE_KAFKA_PORT to a free port")
        jars = kafka_jars(self.settings)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        properties = self.state_dir / "server.properties"
        properties.write_text(_server_properties(self.options, self.data_dir))
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_file))
        classpath = f"{jars}/*"
        if not (self.data_dir / "meta.properties").exists():
            self._format_storage(classpath, log4j, properties)
        command = [
            java(),
            f"-Xmx{self.options.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            java_tmpdir(self.state_dir / "tmp"),
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dlogstore.state={self.state_dir}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(properties),
        ]
        return self.process.launch(command, env=os.environ)

    def _format_storage(self, classpath: str, log4j: Path, properties: Path) -> None:
        """Format the KRaft storage of a new data folder with the cluster's id."""
        cluster_id = self.options.cluster_id or uuid.uuid4().hex[:22]
        result = subprocess.run(
            [
                java(),
                "-cp",
                classpath,
                f"-Dlog4j2.configurationFile={log4j}",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(properties),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServiceError(f"formatting the Kafka storage failed: {result.stdout}{result.stderr}")

    def answers(self) -> bool:
        """Whether a Kafka broker answers on this broker's port (this one, or another on the same port)."""
        from confluent_kafka.admin import AdminClient

        if not port_open(self.options.port):
            return False
        try:
            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
        except Exception:
            return False
        return True

    def down(self, timeout: float = 30.0) -> bool:
        """Stop the broker by its pid (SIGTERM, then SIGKILL); True when one was running."""
        return self.process.stop(timeout=timeout)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, *, consecutive: int = 1) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, each followed by ``consecutive - 1`` free neighbours.

    Every port stays bound until all are chosen, so no two of them coincide (a broker's
    SASL port can never be its own controller port)."""
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(count * 50):
            if len(chosen) == count:
                break
            group = _bind_group(consecutive)
            if group:
                held.extend(group)
                chosen.append(int(group[0].getsockname()[1]))
        if len(chosen) < count:
            raise ServiceError(f"no {count} free port groups of {consecutive} found on 127.0.0.1")
        return chosen
    finally:
        for sock in held:
            sock.close()


# Below the kernel's ephemeral range (32768-60999 by default): no outgoing connection of
# Spark, py4j or a Kafka client takes such a port between choosing it and a server binding it.
_SERVER_PORTS = range(20000, 32000)
_PORT_CHOICE = random.SystemRandom()  # never the seeded global generator that two test workers share


def _bind_group(size: int) -> list[socket.socket]:
    base = _PORT_CHOICE.randrange(_SERVER_PORTS.start, _SERVER_PORTS.stop - size)
    group: list[socket.socket] = []
    for port in range(base, base + size):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            for held in group:
                held.close()
            return []
        group.append(sock)
    return group
