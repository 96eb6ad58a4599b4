"""Every error airflow-logstore raises on purpose. Messages name the thing that is wrong."""

from __future__ import annotations


class LogStoreError(Exception):
    """Base class of all airflow-logstore errors."""


class TablePropertyError(LogStoreError, ValueError):
    """A LogStore table property is unknown, mistyped, missing or contradicts another one."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"table property '{key}': {message}")
        self.key = key


class OptionError(LogStoreError, ValueError):
    """A job, operator or CLI option (e.g. the emit mode, a read mode) has a bad value."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"option '{name}': {message}")
        self.name = name


class IdentifierError(LogStoreError, ValueError):
    """A table or namespace name that cannot be used safely."""


class TopicError(LogStoreError):
    """The LogStore topic is missing or does not match the table's settings."""


class SchemaMismatchError(LogStoreError, ValueError):
    """Input rows or an existing table do not fit the declared schema."""


class BadInputError(LogStoreError, ValueError):
    """A batch contains a row that cannot be written; names the row and the column."""

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


class ServiceError(LogStoreError):
    """A local service (the Kafka broker, a Maven download) could not be started or reached."""


class CommitConflictError(LogStoreError):
    """An Iceberg commit lost a race that cannot be retried safely."""


class FencedError(LogStoreError):
    """A writer or reconciler was fenced by a newer attempt and must stop."""


class KafkaUnavailableError(LogStoreError):
    """The Kafka cluster did not answer, or refused the credentials."""


class ConnectionUnavailableError(LogStoreError):
    """A configured Airflow connection could not be loaded (not defined, or its secrets backend failed).

    Retryable: a secrets backend that failed for a moment can answer on the next try.
    """

    retryable = True
