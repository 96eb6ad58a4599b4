"""logstore services up|down|status: the local Kafka broker (and the Spark jars)."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_logstore.commands import using


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.services.local import LocalBroker, spark_jars

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
        return 0 if status.running else 3
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "services", help="the local Kafka broker (and Spark jars); also prints the state folder and catalog"
    )
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.set_defaults(handler=run)
