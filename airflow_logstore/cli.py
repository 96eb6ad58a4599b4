"""``logstore``: a thin command line over the library (the same code the operators run).

Each command lives in ``airflow_logstore/commands/<name>.py`` and registers itself with ``register``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from airflow_logstore.exceptions import LogStoreError


def build_parser() -> argparse.ArgumentParser:
    from airflow_logstore import commands

    parser = argparse.ArgumentParser(prog="logstore", description="LogStore tables: Iceberg + Kafka log")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not module.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{module.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except (LogStoreError, argparse.ArgumentTypeError) as exc:
        print(f"logstore: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
