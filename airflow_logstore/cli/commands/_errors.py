"""What the ``logstore`` CLI prints when a command fails: the problem, then the next step.

:func:`explain` turns any exception into a :class:`Failure`: the project's own errors and the known
third-party ones (pyiceberg, Spark, confluent-kafka, SQLAlchemy, requests, the file system).
Third-party classes are recognised only when their module is already loaded (it is, when it raised
them), so explaining an error never imports pyspark or pyiceberg.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_logstore.exceptions import LogStoreError, TablePropertyError

DEBUG_HINT = "run it again with --debug for the traceback"


@dataclass(frozen=True)
class Failure:
    """One or two lines for the user and the exit code.

    :param problem: what went wrong, naming the thing (table, path, broker, catalog, option)
    :param next_step: what to do about it ("" when the problem says it all)
    :param exit_code: 2 for bad input or usage, 1 for an unavailable or missing resource
    """

    problem: str
    next_step: str = ""
    exit_code: int = 1

    def lines(self) -> list[str]:
        lines = [f"logstore: error: {self.problem}"]
        if self.next_step:
            lines.append(f"logstore: {self.next_step}")
        return lines


@dataclass(frozen=True)
class Context:
    """What the failed command was about, to name it in the message."""

    command: str = "logstore"
    table: str | None = None

    @classmethod
    def of(cls, args: argparse.Namespace | None) -> Context:
        if args is None:
            return cls()
        words = [getattr(args, "command", None), getattr(args, "table_command", None)]
        command = " ".join([getattr(args, "program", "logstore"), *(w for w in words if w)])
        table = getattr(args, "table", None) or getattr(args, "name", None)
        return cls(command, _resolved(str(table)) if table else None)


def _resolved(name: str) -> str:
    """``name`` as the catalog resolves it (``orders`` is ``default.orders``); as given if it is invalid."""
    from airflow_logstore.table.catalog import TableName

    try:
        return TableName.parse(name).identifier
    except LogStoreError:
        return name


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a Py4J error asks its JVM for its text, and the JVM may be gone
        return ""


def first_line(exc: BaseException, limit: int = 400) -> str:
    """The first non-empty line of an error's message (Spark's carry a JVM stack trace after it)."""
    lines = [line.strip() for line in _text(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _loaded(exc: BaseException, module: str, *names: str) -> bool:
    """Whether ``exc`` is one of ``module.names`` (False when that module was never imported)."""
    loaded = sys.modules.get(module)
    classes = tuple(c for c in (getattr(loaded, n, None) for n in names) if isinstance(c, type))
    return bool(classes) and isinstance(exc, classes)


def _catalog() -> str:
    from airflow_logstore.table.catalog import default_catalog

    try:
        return default_catalog().describe()
    except Exception:  # LOGSTORE_CATALOG itself is broken: the error says so
        return "(LOGSTORE_CATALOG cannot be read)"


def _state_folder() -> str:
    from airflow_logstore.settings import local_settings

    try:
        return local_settings().describe_home()
    except Exception:
        return "(cannot be resolved)"


# -- the project's own errors --------------------------------------------------------------------------

_BROKER_STEP = (
    "is the broker running? check the table's log-store.address and LOGSTORE_KAFKA_CONFIG; in a checkout "
    "of the repository, './dev services status' shows the local broker ('./dev services up' starts it)"
)
_NO_LOG_STEP = (
    "this command needs the table's Kafka log: read the table with '--mode file', or use a table created "
    "with log-store.enabled=true, log-store.topic and log-store.address"
)
#: Next steps by the name of the error class (names, so that errors added later need no import here).
_STEPS: dict[str, str] = {
    "KafkaUnavailableError": _BROKER_STEP,
    "BadInputError": "fix the input (the path, row or column named above) and run the command again",
    "SchemaMismatchError": "make the input's columns match the table's ('logstore table show' lists them)",
    "FencedError": "a newer attempt of the same writer took over; this one must not continue",
    "CommitConflictError": "another commit won the race; run the command again",
    "RecordDecodeError": "the record is not in the LogStore format; see the topic <log topic>.logstore-dlq",
    "TableNotFoundError": "create it with 'logstore table create', or point LOGSTORE_HOME / LOGSTORE_CATALOG "
    "at the catalog that has it",
    "CatalogUnavailableError": "check LOGSTORE_HOME / LOGSTORE_CATALOG and that the catalog can be reached",
    "KillPointError": "unset LOGSTORE_KILL_AT (tests set it to kill a writer or reconciler), or name a "
    "kill point listed above",
}
#: Errors in what the user gave (exit code 2, like a usage error); the others are about resources (1).
_USAGE_ERRORS = {
    "TablePropertyError",
    "OptionError",
    "IdentifierError",
    "BadInputError",
    "SchemaMismatchError",
}


def _logstore_error(exc: LogStoreError, context: Context) -> Failure:
    names = [c.__name__ for c in type(exc).__mro__]
    code = 2 if any(name in _USAGE_ERRORS for name in names) else 1
    if isinstance(exc, TablePropertyError) and exc.key == "log-store.enabled" and "disabled" in str(exc):
        table = f"table '{context.table}': " if context.table else ""
        return Failure(f"{table}the log is disabled (log-store.enabled is not true)", _NO_LOG_STEP, 2)
    options = ("OptionError", "IdentifierError", "TablePropertyError")
    if any(name in options for name in names) or (code == 2 and context.command == "logstore table create"):
        return Failure(str(exc), f"'{context.command} --help' lists the options", code)
    step = next((_STEPS[name] for name in names if name in _STEPS), "")
    if "and missing-as-null is off" in str(exc):
        step = "add the column to the input, or pass --missing-as-null to write null into it"
    return Failure(str(exc), step, code)


# -- third-party errors --------------------------------------------------------------------------------

_MISSING_TABLE_STEP = (
    "state folder {}; create the table with 'logstore table create', or use the state folder that has "
    "it (run inside its project checkout, or set LOGSTORE_HOME / LOGSTORE_CATALOG)"
)


def _missing_table(exc: BaseException, context: Context) -> Failure | None:
    if not _loaded(exc, "pyiceberg.exceptions", "NoSuchTableError", "NoSuchNamespaceError"):
        return None
    what = f"table '{context.table}'" if context.table else first_line(exc)
    if type(exc).__name__ == "NoSuchNamespaceError":
        what = f"the namespace of {what}" if context.table else what
    return Failure(
        f"{what} does not exist in catalog {_catalog()}", _MISSING_TABLE_STEP.format(_state_folder())
    )


def _catalog_service(exc: BaseException, context: Context) -> Failure | None:
    reached = _loaded(exc, "requests.exceptions", "ConnectionError", "Timeout")
    refused = _loaded(
        exc, "pyiceberg.exceptions", "RESTError", "ServerError", "ServiceUnavailableError", "OAuthError"
    )
    if not (reached or refused):
        return None
    problem = "cannot be reached" if reached else f"failed: {first_line(exc)}"
    return Failure(
        f"the catalog {_catalog()} {problem}",
        "is the catalog service running? check LOGSTORE_CATALOG (or the Airflow connection) and its "
        "credentials",
    )


def _catalog_database(exc: BaseException, context: Context) -> Failure | None:
    if not _loaded(exc, "sqlalchemy.exc", "OperationalError", "DatabaseError", "ArgumentError"):
        return None
    cause = first_line(getattr(exc, "orig", None) or exc)
    if "locked" in cause:
        return Failure(f"the catalog database is locked: {cause}", "another process is writing; run it again")
    return Failure(
        f"the catalog {_catalog()} cannot be opened: {cause}",
        f"state folder {_state_folder()}; check that the database path or server exists and is reachable "
        "(LOGSTORE_HOME, LOGSTORE_CATALOG)",
    )


_CONDITION = re.compile(r"^\[(?P<condition>[A-Z0-9_.]+)\]\s*")


def _spark_analysis(exc: BaseException, context: Context) -> Failure | None:
    if not _loaded(exc, "pyspark.errors", "AnalysisException"):
        return None
    text = first_line(exc)
    match = _CONDITION.match(text)
    condition = _condition(exc) or (match.group("condition") if match else "")
    message = re.sub(r"\s*SQLSTATE: \w+\.?$", "", _CONDITION.sub("", text)).rstrip(".")
    if condition.startswith("PATH_NOT_FOUND"):
        return Failure(
            f"input path not found: {message.removeprefix('Path does not exist: ')}",
            "check --input: a JSON-lines, CSV or Parquet file or folder, or a URI Spark can read",
            2,
        )
    if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        return _missing_table_by_spark(message, context)
    return Failure(f"Spark: {message}", DEBUG_HINT, 1)


def _condition(exc: BaseException) -> str:
    getter: Callable[[], Any] | None = getattr(exc, "getCondition", None)
    try:
        value = getter() if getter else None
    except Exception:  # the JVM that raised it may be gone
        value = None
    return str(value or "")


def _missing_table_by_spark(message: str, context: Context) -> Failure:
    what = f"table '{context.table}'" if context.table else message
    return Failure(
        f"{what} does not exist in catalog {_catalog()}", _MISSING_TABLE_STEP.format(_state_folder())
    )


def _spark_other(exc: BaseException, context: Context) -> Failure | None:
    if not (_loaded(exc, "pyspark.errors", "PySparkException") or _loaded(exc, "py4j.protocol", "Py4JError")):
        return None
    return Failure(f"Spark failed: {_java_cause(exc)}", DEBUG_HINT)


def _java_cause(exc: BaseException) -> str:
    """The Java exception line of a Py4J error (``java.io...: message``), else the first line."""
    for line in _text(exc).splitlines():
        line = line.strip().lstrip(": ")
        if re.match(r"^[a-z][\w.]*\.[A-Z]\w*(Exception|Error)\b", line):
            return line[:400]
    return first_line(exc)


def _kafka(exc: BaseException, context: Context) -> Failure | None:
    if not _loaded(exc, "confluent_kafka", "KafkaException"):
        return None
    describe = getattr(exc.args[0], "str", None) if exc.args else None
    text = describe() if callable(describe) else first_line(exc)
    return Failure(f"Kafka: {text}", _BROKER_STEP)


def _file_system(exc: BaseException, context: Context) -> Failure | None:
    if not isinstance(exc, OSError) or exc.filename is None:
        return None
    problem = f"cannot use '{exc.filename}': {exc.strerror or first_line(exc)}"
    catalog = _catalog()
    if str(exc.filename) in catalog:  # the folder of the embedded catalog's database
        problem = f"the catalog {catalog} cannot be opened: {problem}"
    step = f"check the path (state folder {_state_folder()}; LOGSTORE_HOME, LOGSTORE_CATALOG)"
    return Failure(problem, step)


def _environment(exc: BaseException, context: Context) -> Failure | None:
    """Settings read from the environment name their variable when they are wrong (settings.py)."""
    if not isinstance(exc, ValueError) or not re.search(r"\bLOGSTORE_[A-Z_]+", first_line(exc)):
        return None
    return Failure(first_line(exc), "fix that environment variable (see the README's settings)", 2)


_FOREIGN: tuple[Callable[[BaseException, Context], Failure | None], ...] = (
    _missing_table,
    _catalog_service,
    _catalog_database,
    _spark_analysis,
    _spark_other,
    _kafka,
    _file_system,
    _environment,
)


def explain(exc: BaseException, context: Context | None = None) -> Failure:
    """The message for ``exc``; an error nobody foresaw still gets one line, and a way to see more."""
    context = context or Context()
    if isinstance(exc, KeyboardInterrupt):
        return Failure("interrupted", exit_code=130)
    if isinstance(exc, LogStoreError):
        return _logstore_error(exc, context)
    if isinstance(exc, argparse.ArgumentTypeError):
        return Failure(str(exc), f"'{context.command} --help' lists the options", 2)
    for mapping in _FOREIGN:
        failure = mapping(exc, context)
        if failure is not None:
            return failure
    return Failure(f"{type(exc).__name__}: {first_line(exc)}", f"this is unexpected; {DEBUG_HINT}")
