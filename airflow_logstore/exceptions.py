"""Every error airflow-logstore raises on purpose. Messages name the thing that is wrong.

Each class says here, and only here, whether running the same work again can succeed: ``retryable``
(a broker that was down, a locked catalog, a lost commit race) or not (bad input, a bad property, a
fenced epoch). Operators fail at once, without Airflow retries, on errors that are not retryable;
:func:`classify` gives foreign errors (pyiceberg, Spark, Kafka, SQLite) the same verdict.
"""

from __future__ import annotations


class LogStoreError(Exception):
    """Base class of all airflow-logstore errors.

    :cvar retryable: whether a retry of the same work can succeed (False: fail without retrying)
    """

    retryable: bool = False


class TablePropertyError(LogStoreError, ValueError):
    """A LogStore table property is unknown, mistyped, missing or contradicts another one."""

    retryable = False

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"table property '{key}': {message}")
        self.key = key


class OptionError(LogStoreError, ValueError):
    """A job, operator or CLI option (e.g. the emit mode, a read mode) has a bad value."""

    retryable = False

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"option '{name}': {message}")
        self.name = name


class IdentifierError(LogStoreError, ValueError):
    """A table or namespace name that cannot be used safely."""

    retryable = False


class TopicError(LogStoreError):
    """The LogStore topic is missing or does not match the table's settings."""

    retryable = False


class ControlTopicChangedError(LogStoreError):
    """The control topic a writer claimed its epoch in was deleted and re-created (another topic id),
    or no longer holds the claim: the attempt stops before committing. Running the batch again claims
    an epoch in the topic as it is now."""

    retryable = True


class FollowerLagError(LogStoreError):
    """A consistent follower held records retention has deleted since, and lagged so far behind the
    control topic that compaction removed their batch's ledger entry: it cannot tell whether they are
    committed. Following again from the same position cannot help; follow from a snapshot."""

    retryable = False


class StreamReadError(LogStoreError):
    """A read of the ``logstore`` Spark source (or a follower) cannot go on exactly once: retention
    deleted records it had not returned yet, the log or control topic was recreated, its control state
    finds a record below the watermark undecided, or its checkpoint holds an offset this package cannot
    read. Running it again from the same checkpoint cannot help; read again from a snapshot with a new
    checkpoint."""

    retryable = False


class SchemaMismatchError(LogStoreError, ValueError):
    """Input rows or an existing table do not fit the declared schema."""

    retryable = False


class BadInputError(LogStoreError, ValueError):
    """A batch contains a row that cannot be written; names the row and the column."""

    retryable = False

    def __init__(self, message: str, *, row: int | None = None, column: str | None = None) -> None:
        where = []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.row = row
        self.column = column


class RecordDecodeError(LogStoreError, ValueError):
    """A log record is not in the LogStore format (foreign, truncated or of an unknown version)."""

    retryable = False


class ServiceError(LogStoreError):
    """A local service (the Kafka broker, a Maven download) could not be started or reached."""

    retryable = True


class InstallationError(LogStoreError):
    """The installed packages do not work together (pyspark and pyspark-client of two releases)."""

    retryable = False


class CommitConflictError(LogStoreError):
    """An Iceberg commit lost a race that cannot be retried safely."""

    retryable = True


class FencedError(LogStoreError):
    """A writer or reconciler was fenced by a newer attempt and must stop."""

    retryable = False


class KafkaUnavailableError(LogStoreError):
    """The Kafka cluster did not answer, or refused the credentials."""

    retryable = True


class TableNotFoundError(LogStoreError):
    """The table (or its namespace) does not exist in the catalog."""

    retryable = False


class CatalogUnavailableError(LogStoreError):
    """The Iceberg catalog could not be reached, or its database was locked."""

    retryable = True


class JobFailedError(LogStoreError):
    """A Spark job failed and reported why (see :class:`airflow_logstore.core.failures.JobFailure`).

    :param error_class: the error the job raised, e.g. ``BadInputError``
    :param message: that error's message
    :param retryable: whether a retry of the job can succeed
    """

    def __init__(self, error_class: str, message: str, *, retryable: bool) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class
        self.message = message
        self.retryable = retryable


#: Foreign errors, recognised by class name or message text (no pyiceberg/pyspark import here).
_FOREIGN: tuple[tuple[tuple[str, ...], type[LogStoreError]], ...] = (
    (("NoSuchTableError", "NoSuchNamespaceError", "TABLE_OR_VIEW_NOT_FOUND"), TableNotFoundError),
    (("PATH_NOT_FOUND",), BadInputError),
    (("database is locked", "unable to open database file", "OperationalError"), CatalogUnavailableError),
    (("CommitFailedException", "ValidationException: Cannot commit"), CommitConflictError),
    (("KafkaException", "KafkaError"), KafkaUnavailableError),
)


def classify(exc: BaseException) -> tuple[str, bool]:
    """(error class name, retryable) of any error; unknown errors are retryable (Airflow's default).

    LogStore errors answer for themselves; pyiceberg, Spark, SQLite and Kafka errors are mapped to
    the LogStore error they stand for (a missing table, a missing input path, a locked catalog ...).
    """
    if isinstance(exc, LogStoreError):
        return type(exc).__name__, exc.retryable
    text = f"{type(exc).__name__}: {str(exc)[:2000]}"
    for needles, error in _FOREIGN:
        if any(needle in text for needle in needles):
            return error.__name__, error.retryable
    return type(exc).__name__, True


def first_line(exc: BaseException, limit: int = 500) -> str:
    """The first line of an error's message (Spark's errors carry a JVM stack trace after it)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ConnectionUnavailableError(LogStoreError):
    """A configured Airflow connection could not be loaded (not defined, or its secrets backend failed).

    Retryable: a secrets backend that failed for a moment can answer on the next try.
    """

    retryable = True
