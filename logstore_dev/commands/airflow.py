"""./dev airflow up|down|status: a real local Airflow (UI on http://127.0.0.1:8080) for the DAGs."""

from __future__ import annotations

import argparse
import json
from typing import Any


def run(args: argparse.Namespace) -> int:
    from logstore_dev.services.airflow_local import local_airflow
    from logstore_dev.services.local import LocalBroker

    airflow = local_airflow(port=args.port)
    if args.action == "up":
        LocalBroker().up()
        airflow.up()
        print(
            f"Airflow is up: open {airflow.url} (no login needed locally); trigger 'logstore_pipeline' "
            "with the Trigger button and its form. Logs: " + str(airflow.home)
        )
    elif args.action == "down":
        stopped = airflow.down()
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    else:
        print(json.dumps(airflow.status(), indent=2))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "airflow",
        help="run a local Airflow (api-server, scheduler, dag-processor, "
        "triggerer) on 127.0.0.1 for the example DAGs",
    )
    parser.add_argument("action", choices=("up", "down", "status"), help="start, stop or show it")
    parser.add_argument(
        "--port", type=int, default=None, help="API/UI port (default 8080 or LOGSTORE_AIRFLOW_PORT)"
    )
    parser.set_defaults(handler=run)
