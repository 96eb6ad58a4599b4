"""The pure functions of topology.py that both the local cluster profile and docker-compose.yml use."""

from __future__ import annotations

import json

from logstore_dev.services import topology
from logstore_dev.services.topology import CLUSTER, LOOPBACK, Secrets, port_count

SECRETS = Secrets(s3_access_key="ak", s3_secret_key="sk", catalog_credential="cred")


def test_the_local_profile_gets_loopback_and_the_ports_it_picked() -> None:
    moved = CLUSTER.with_ports([20000 + 2 * i for i in range(port_count(CLUSTER))])
    env = topology.airflow_connections(moved, None, SECRETS)
    logstore = json.loads(env["AIRFLOW_CONN_LOGSTORE_DEFAULT"])
    assert logstore["host"] == f"http://{LOOPBACK}:{moved.rest_catalog_port}"
    assert logstore["password"] == "cred"
    assert logstore["extra"]["properties"]["s3.endpoint"] == f"http://{LOOPBACK}:{moved.s3_port}"
    bootstrap = ",".join(f"{LOOPBACK}:{port}" for port in moved.kafka.sasl_ports)
    assert env["AIRFLOW_VAR_LOGSTORE_KAFKA_ADDRESS"] == bootstrap
    assert json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["bootstrap.servers"] == bootstrap
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["host"], spark["port"]) == (f"spark://{LOOPBACK}", moved.spark.master_port)


def test_kafka_nodes_listen_on_their_own_ports_with_one_quorum() -> None:
    secrets = Secrets("ak", "sk", sasl_password="kafka-pw")
    nodes = [topology.kafka_node_properties(CLUSTER, node, secrets) for node in CLUSTER.kafka.node_ids]
    assert len({props["controller.quorum.voters"] for props in nodes}) == 1
    assert nodes[1]["listeners"] == (
        f"PLAINTEXT://{LOOPBACK}:9094,CONTROLLER://{LOOPBACK}:9095,SASL://{LOOPBACK}:9194"
    )
    assert 'user_logstore="kafka-pw"' in nodes[0]["listener.name.sasl.plain.sasl.jaas.config"]
    assert all(props["min.insync.replicas"] == "2" for props in nodes)


def test_the_kafka_image_environment_names() -> None:
    env = topology.kafka_docker_env({"log.dirs": "x", "a_b-c.d": "y"})
    assert env == {"KAFKA_LOG_DIRS": "x", "KAFKA_A__B___C_D": "y"}


def test_the_test_clusters_detect_a_dead_broker_sooner_and_the_deployment_keeps_kafkas_default() -> None:
    moved = CLUSTER.with_ports([20000 + 2 * i for i in range(port_count(CLUSTER))])
    fast = topology.for_tests(moved)
    assert fast.kafka.ports == moved.kafka.ports and fast.spark == moved.spark
    node = topology.kafka_node_properties(fast, 1, Secrets("ak", "sk", sasl_password="pw"))
    assert (node["broker.session.timeout.ms"], node["broker.heartbeat.interval.ms"]) == ("3000", "500")
    assert node["min.insync.replicas"] == "2"  # the cluster's own settings stay
    assert "broker.session.timeout.ms" not in CLUSTER.kafka.settings
    assert "broker.session.timeout.ms" not in topology.kafka_node_properties(CLUSTER, 1, SECRETS)
