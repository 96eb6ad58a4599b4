"""``logstore``: a thin command line over the library (the same code the operators run).

Each command lives in ``airflow_logstore/cli/commands/<name>.py`` and registers itself with ``register``.
The development setup's commands (local services, a local Airflow, the demo) are not here: they are the
repository's ``python -m logstore_dev`` (``./dev``), built with the same :func:`build_parser`.
Every failure ends as one or two lines (the problem, the next step) and a non-zero exit code; see
``commands/_errors.py``. ``--debug`` prints the traceback as well.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from airflow_logstore.cli.commands._errors import Context, explain


class _HelpFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with its default, when it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default in (None, False, [], "", argparse.SUPPRESS)
            or "default" in text
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are two lines (the problem, where the options are listed), whose
    help shows each option's default.

    Every (sub)command also accepts ``--debug``, ``-v`` and ``--json``, so they may follow the command as
    well as precede it.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print the traceback of a failure, log at INFO level and keep Spark's output on stderr",
        )
        self.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS,
            help="log at INFO level (Spark's output on stderr too)",
        )
        self.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print the command's report as JSON on stdout instead of a summary",
        )

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nlogstore: '{self.prog} --help' lists the options\n")


def build_parser(
    commands: ModuleType | None = None,
    prog: str = "logstore",
    description: str = "LogStore tables: Iceberg + Kafka log",
) -> argparse.ArgumentParser:
    """The parser of a command line whose subcommands are the modules of the package ``commands`` (default:
    ``airflow_logstore.cli.commands``, the ``logstore`` command), each with ``register(subparsers)``.

    The repository's development command line (``python -m logstore_dev``, which ``./dev`` runs) builds
    its own from its package, so that both parse, help and fail alike.
    """
    if commands is None:
        from airflow_logstore.cli import commands as product_commands

        commands = product_commands
    parser = _Parser(prog=prog, description=description)
    parser.set_defaults(debug=False, verbose=False, json=False, program=prog)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not module.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{module.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``logstore`` command."""
    return run_cli(build_parser(), argv)


def run_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with ``parser``, run the command's handler, and turn a failure into a message."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage error (or the help)
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except SystemExit as exc:  # a job's own argument parser gave up
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # every failure becomes a message, KeyboardInterrupt too
        return report(exc, args)


def report(exc: BaseException, args: argparse.Namespace | None) -> int:
    """Print ``exc`` as the problem and the next step (after its traceback with ``--debug``)."""
    if getattr(args, "debug", False):
        traceback.print_exception(exc, file=sys.stderr)
    failure = explain(exc, Context.of(args))
    print("\n".join(failure.lines()), file=sys.stderr)
    return failure.exit_code
