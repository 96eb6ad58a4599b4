"""Three Kafka brokers in KRaft combined mode (broker + controller) on 127.0.0.1, for the cluster profile.

Every node is a :class:`~logstore_dev.services.local.LocalBroker` with its own state folder
``<state_dir>/broker-<id>``, its own PID file and log, the static controller quorum of
:meth:`KafkaCluster.quorum_voters`, one cluster id (kept in ``<state_dir>/cluster.id``) and the
settings of :attr:`KafkaCluster.settings` (replication factor 3, min ISR 2, ...). Nodes can be killed
and restarted one by one, as failure tests need.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings
from logstore_dev.services._process import port_open, stop_together, wait_for
from logstore_dev.services.local import BrokerOptions, BrokerStatus, LocalBroker
from logstore_dev.services.topology import KafkaCluster

#: A topic the readiness check creates: it exists only when three brokers can host a replica each.
READY_TOPIC = "logstore-cluster-ready"
BROKER_HEAP = "256m"
#: Settings that let a broker live in :data:`BROKER_HEAP`: the log cleaner's default 128 MiB dedupe
#: buffer made a node fail with OutOfMemoryError at startup.
SMALL_HEAP_SETTINGS = {"log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024)}


@dataclass(frozen=True)
class KafkaClusterStatus:
    brokers: tuple[BrokerStatus, ...]

    @property
    def running(self) -> bool:
        return all(broker.running for broker in self.brokers)

    def describe(self) -> str:
        return "\n".join(f"node {i}: {b.describe()}" for i, b in enumerate(self.brokers, start=1))


class LocalKafkaCluster:
    """The brokers of ``kafka`` (node ids 1..n), with state under ``state_dir``."""

    def __init__(
        self,
        settings: LocalSettings,
        kafka: KafkaCluster,
        state_dir: Path,
        *,
        heap: str = BROKER_HEAP,
        sasl_password: str | None = None,
    ) -> None:
        """``sasl_password`` opens every node's client listener (``kafka.sasl_ports``, SASL/PLAIN) for
        ``kafka.sasl_user``; without it the nodes have their internal listeners only."""
        self.settings = settings
        self.kafka = kafka
        self.state_dir = state_dir
        self.heap = heap
        self.sasl_password = sasl_password
        self._brokers: dict[int, LocalBroker] = {}

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap()

    def broker(self, node_id: int) -> LocalBroker:
        """The broker of node ``node_id`` (1-based), configured with the cluster's id and quorum."""
        if node_id not in self.kafka.node_ids:
            raise ValueError(f"no Kafka node {node_id}; the nodes are {self.kafka.node_ids}")
        if node_id not in self._brokers:
            options = BrokerOptions(
                port=self.kafka.ports[node_id - 1],
                sasl_port=self.kafka.sasl_ports[node_id - 1] if self.sasl_password else None,
                sasl_users={self.kafka.sasl_user: self.sasl_password} if self.sasl_password else {},
                heap=self.heap,
                node_id=node_id,
                quorum_voters=self.kafka.quorum_voters(),
                cluster_id=self._cluster_id(),
                settings={**SMALL_HEAP_SETTINGS, **self.kafka.settings},
            )
            state = self.state_dir / f"broker-{node_id}"
            self._brokers[node_id] = LocalBroker(self.settings, options=options, state_dir=state)
        return self._brokers[node_id]

    def _cluster_id(self) -> str:
        """The id every node is formatted with: created once, then read from ``cluster.id``."""
        path = self.state_dir / "cluster.id"
        if not path.exists():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(uuid.uuid4().hex[:22])
        return path.read_text().strip()

    # -- lifecycle -----------------------------------------------------------------------------------

    def status(self) -> KafkaClusterStatus:
        return KafkaClusterStatus(tuple(self.broker(node).status() for node in self.kafka.node_ids))

    def up(self, timeout: float = 120.0) -> KafkaClusterStatus:
        """Start every node not running yet; return once all are registered and a topic with one
        replica on each node can be created. Idempotent: running nodes are left alone."""
        started = [node for node in self.kafka.node_ids if self.broker(node).launch() is not None]
        try:
            self._wait_ready(timeout)
        except ServiceError:
            for node in started:
                self.broker(node).down(timeout=5)
            raise
        return self.status()

    def down(self, timeout: float = 30.0) -> bool:
        """Stop every node by its pid (SIGTERM to all at once, then SIGKILL); True when one ran."""
        # together: a node waiting for a quorum that is shutting down would hang
        brokers = [self.broker(node).process for node in self.kafka.node_ids]
        return any(stop_together(brokers, timeout=timeout))

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (a crash: no controlled shutdown) and wait until it is gone."""
        broker = self.broker(node_id)
        if not broker.process.kill():
            raise ServiceError(f"Kafka node {node_id} is not running; log {broker.log_file}")

    def start(self, node_id: int, timeout: float = 120.0) -> BrokerStatus:
        """(Re)start node ``node_id``; return once it is registered and back in the ISR of every
        partition it holds a replica of."""
        broker = self.broker(node_id)
        broker.launch()

        def timed_out(problem: str) -> str:
            return broker.process.failure(f"did not rejoin within {timeout:.0f}s: {problem}")

        wait_for(
            lambda: self._rejoin_problem(node_id),
            timeout=timeout,
            processes=[broker.process],
            timed_out=timed_out,
            interval=0.3,
        )
        return broker.status()

    # -- questions -----------------------------------------------------------------------------------

    def leader(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The node id leading ``topic``'s ``partition`` (-1 while it has no leader)."""
        metadata = self._admin().list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            raise ServiceError(f"Kafka cluster at {self.bootstrap}: no partition {topic}[{partition}]")
        return int(found.partitions[partition].leader)

    def registered(self, timeout: float = 5.0) -> set[int]:
        """The node ids the cluster reports as brokers right now."""
        return set(self._admin().list_topics(timeout=timeout).brokers)

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        # log_level 0: a node that is down or starting is expected here; failures raise instead
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, "log_level": 0})

    # -- readiness -----------------------------------------------------------------------------------

    def _wait_ready(self, timeout: float) -> None:
        def timed_out(problem: str) -> str:
            nodes = ", ".join(f"node {n} log {self.broker(n).log_file}" for n in self.kafka.node_ids)
            return (
                f"the Kafka cluster at {self.bootstrap} was not ready within {timeout:.0f}s ({problem}); "
                f"{nodes}"
            )

        wait_for(
            self._ready_problem,
            timeout=timeout,
            processes=[self.broker(node).process for node in self.kafka.node_ids],
            timed_out=timed_out,
            interval=0.5,
        )

    def _ready_problem(self) -> str | None:
        """None when every node is registered and a replication-factor-n topic exists."""
        try:
            return self._cluster_problem()
        except Exception as exc:  # not answering yet: retry until the deadline
            return f"{type(exc).__name__}: {exc}"

    def _cluster_problem(self) -> str | None:
        from confluent_kafka.admin import NewTopic

        missing = set(self.kafka.node_ids) - self.registered()
        if missing:
            return f"nodes {sorted(missing)} not registered"
        admin = self._admin()
        if READY_TOPIC in admin.list_topics(timeout=5).topics:
            return None
        topic = NewTopic(READY_TOPIC, num_partitions=1, replication_factor=len(self.kafka.node_ids))
        try:
            admin.create_topics([topic], request_timeout=10)[READY_TOPIC].result(timeout=15)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                return f"creating {READY_TOPIC}: {exc}"
        return None

    def _rejoin_problem(self, node_id: int) -> str | None:
        """None when ``node_id`` answers on its port (it opens once the node caught up with the
        metadata), is registered and is in the ISR of every partition it is a replica of."""
        if not port_open(self.kafka.ports[node_id - 1]):
            return "its port is not open yet"
        try:
            metadata = self._admin().list_topics(timeout=5)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        if node_id not in metadata.brokers:
            return "not registered"
        behind = [
            f"{name}[{number}]"
            for name, topic in metadata.topics.items()
            for number, partition in topic.partitions.items()
            if node_id in partition.replicas and node_id not in partition.isrs
        ]
        return f"not in the ISR of {', '.join(sorted(behind)[:5])}" if behind else None
