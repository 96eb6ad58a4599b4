"""./dev demo: run the example pipeline end to end on the embedded default and say what happened."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import OptionError


def run(args: argparse.Namespace) -> int:
    from logstore_dev.demo import run_demo

    if args.dags_folder and not Path(args.dags_folder).is_dir():
        raise OptionError("--dags-folder", f"'{args.dags_folder}' is not a folder")
    summary = run_demo(Path(args.dags_folder) if args.dags_folder else None)
    ok = summary["consistent_read_equals_table"] and summary["eventual_read_converges_to_table"]
    return 0 if ok else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the example DAG end to end on the embedded default")
    parser.add_argument(
        "--dags-folder",
        default=None,
        help="default: the example DAGs shipped in the package (see 'logstore dags path')",
    )
    parser.set_defaults(handler=run)
