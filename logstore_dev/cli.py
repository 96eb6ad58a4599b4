"""``python -m logstore_dev``: the development setup's command line, which ``./dev`` runs.

Its commands (``services``, ``airflow``, ``demo``, in :mod:`logstore_dev.commands`) start local
services, a local Airflow and the demo. They parse, help and fail as the ``logstore`` command does (one
parser builder, :func:`airflow_logstore.cli.app.build_parser`), but they are not in the wheel: a
deployment's ``logstore`` keeps only what a user of real services needs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from airflow_logstore.cli.app import build_parser as build_cli_parser
from airflow_logstore.cli.app import run_cli

#: The name its usage lines and messages give: the command a contributor types in the checkout.
PROG = "./dev"


def build_parser() -> argparse.ArgumentParser:
    from logstore_dev import commands

    return build_cli_parser(
        commands, prog=PROG, description="the development setup: local services, a local Airflow, the demo"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv)
