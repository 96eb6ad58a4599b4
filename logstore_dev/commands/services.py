"""./dev services up|down|status [--profile local|cluster].

``local`` (the embedded default): one Kafka broker and the Spark jars. ``cluster``: the multi-node
deployment of docker-compose.yml as local processes (logstore_dev/services/cluster.py).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from airflow_logstore.cli.commands import using


def run(args: argparse.Namespace) -> int:
    if getattr(args, "profile", "local") == "cluster":
        return _run_cluster(args.action)
    from airflow_logstore.jars import spark_jars
    from logstore_dev.services.local import LocalBroker

    broker = LocalBroker()
    where = using(broker=broker.bootstrap)
    print(f"state folder: {where['state_folder']}\ncatalog: {where['catalog']}\nbroker: {where['broker']}")
    if args.action == "up":
        status = broker.up()
        jars = spark_jars()
        print(status.describe())
        print(f"spark jars ({len(jars)}): {', '.join(j.name for j in jars)}")
    elif args.action == "down":
        print("kafka broker stopped" if broker.down() else "kafka broker was not running")
    else:
        status = broker.status()
        print(status.describe())
        if not status.running:
            print(_someone_else(broker, where["state_folder"]))
        return 0 if status.running else 3
    return 0


def _someone_else(broker: Any, state_folder: str) -> str:
    """What listens on the broker's port when this state folder's broker does not run."""
    from logstore_dev.services._process import port_open

    port = broker.bootstrap.rsplit(":", 1)[1]
    if not port_open(int(port)):
        return f"nothing listens on {broker.bootstrap}; './dev services up' starts this state folder's broker"
    if broker.answers():
        return (
            f"another Kafka broker answers on {broker.bootstrap}: not this state folder's ({state_folder}); "
            "run in the folder that started it, or set LOGSTORE_HOME to its state folder"
        )
    return f"another process listens on {broker.bootstrap} (not a Kafka broker of this state folder)"


def _run_cluster(action: str) -> int:
    from logstore_dev.services.cluster import LocalCluster

    cluster = LocalCluster()
    print(f"state folder: {cluster.state_dir}")
    if action == "up":
        started = time.monotonic()
        cluster.up()
        print(f"cluster up in {time.monotonic() - started:.0f}s, {cluster.memory_mib():.0f} MiB resident")
        for name, value in cluster.airflow_env().items():
            if name.startswith("AIRFLOW_VAR_"):
                print(f"{name}={value}")
        print(f"Airflow: http://127.0.0.1:{cluster.topology.airflow_port}")
    elif action == "down":
        cluster.down()
    else:
        for name, status in cluster.status().items():
            print(f"{name}: {status.describe() if hasattr(status, 'describe') else status}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "services", help="the local Kafka broker (and Spark jars); also prints the state folder and catalog"
    )
    parser.add_argument("action", choices=("up", "down", "status"), help="start, stop or show it")
    parser.add_argument(
        "--profile",
        choices=("local", "cluster"),
        default="local",
        help="local: one broker (default); cluster: PostgreSQL, S3 (moto), Iceberg REST catalog, "
        "3 Kafka brokers, Spark standalone with 2 workers, Airflow on PostgreSQL",
    )
    parser.set_defaults(handler=run)
