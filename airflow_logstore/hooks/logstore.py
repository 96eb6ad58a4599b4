"""LogStoreHook: the Iceberg catalog of LogStore tables (its own connection type) + Kafka client settings.

The catalog comes from a ``logstore`` connection:

- *Host*: the catalog URI (``sqlite:////abs/catalog.db``, ``postgresql+psycopg2://user@db/iceberg``,
  ``http://rest-catalog:8181``);
- *Password*: the catalog secret (REST ``credential`` or ``token``, or the JDBC password);
- *Extra*: ``{"type": "sql"|"rest", "warehouse": "s3://...", "catalog_name": "logstore",
  "properties": {"s3.endpoint": "...", ...}}``.

Kafka security settings (SASL, TLS) come from the Apache Kafka provider's connection
(``kafka_config_id``, a librdkafka config dict); the bootstrap servers always come from the table.

The embedded default (``LOGSTORE_*`` environment, a local SQLite catalog) is used only when no connection
is configured: the id is empty, or it is the default id (``logstore_default``, ``kafka_default``) and
Airflow reports it *not found*; the task log says so at INFO, once per hook (a sensor polls through one
hook), since it is the documented local set-up. Any other id that cannot be loaded, and any other
error while loading (a secrets backend that failed), is a :class:`ConnectionUnavailableError` naming the
id, never a silent switch to a different catalog. Airflow's secrets chain reports a backend that failed
and a connection found nowhere else alike (*not found*); a deployment that must never fall back gives its
connection an id of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_logstore.exceptions import ConnectionUnavailableError
from airflow_logstore.table.catalog import CatalogSpec, default_catalog, is_secret_key

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from airflow_logstore.table.tables import LogStoreTable


def mask_secrets(settings: Mapping[str, Any]) -> None:
    """Have Airflow's secrets masker hide the value of every secret setting in task logs.

    Airflow masks a connection's password and its extra as one JSON string, and masks an extra's values
    only under the names it deems sensitive (``credential`` is not one of them); a secret value logged on
    its own (by Spark, a Kafka client, this provider) would then show. Secret means
    :func:`airflow_logstore.table.catalog.is_secret_key`, the definition Spark's redaction uses too.
    """
    from airflow.sdk.log import mask_secret

    for key, value in settings.items():
        if isinstance(value, Mapping):
            mask_secrets(value)
        elif is_secret_key(str(key)) and isinstance(value, str) and value:
            mask_secret(value)


class LogStoreHook(BaseHook):
    """Interact with LogStore tables: their Iceberg catalog and the Kafka settings of their logs.

    :param logstore_conn_id: connection of type ``logstore`` describing the Iceberg catalog.
    :param kafka_config_id: Apache Kafka provider connection with client settings (SASL, TLS).
    :param log_defaults: log (once) which embedded default applies when no connection is configured;
        False where the task said so already (a trigger deferred to by a sensor that polled first)
    """

    conn_name_attr = "logstore_conn_id"
    default_conn_name = "logstore_default"
    conn_type = "logstore"
    hook_name = "LogStore (Iceberg catalog)"

    def __init__(
        self,
        logstore_conn_id: str = default_conn_name,
        kafka_config_id: str | None = "kafka_default",
        *,
        log_defaults: bool = True,
    ) -> None:
        super().__init__()
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.log_defaults = log_defaults
        #: the notices this hook has logged: each once (a sensor's every poll goes through one hook)
        self._said: set[str] = set()

    def _say_once(self, key: str, message: str, *args: Any) -> None:
        """Log ``message`` at INFO the first time this hook says ``key`` (not at all without
        ``log_defaults``)."""
        if self.log_defaults and key not in self._said:
            self._said.add(key)
            self.log.info(message, *args)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["port", "schema", "login"],
            "relabeling": {
                "host": "Catalog URI",
                "password": "Catalog secret (credential, token or password)",
            },
            "placeholders": {
                "host": "http://rest-catalog:8181 or sqlite:////opt/airflow/logstore/catalog.db",
                "extra": '{"type": "rest", "warehouse": "s3://warehouse/", "catalog_name": "logstore", '
                '"properties": {"s3.endpoint": "http://minio:9000", "s3.path-style-access": "true"}}',
            },
        }

    # -- connections ---------------------------------------------------------------------------------

    def _optional_connection(self, conn_id: str | None, default: str) -> Any | None:
        """The connection ``conn_id``; None when none is configured (the embedded default applies).

        :raises ConnectionUnavailableError: ``conn_id`` is configured but cannot be loaded.
        """
        from airflow.sdk.exceptions import AirflowNotFoundException

        if not conn_id:
            return None
        try:
            return self.get_connection(conn_id)
        except AirflowNotFoundException as exc:
            if conn_id == default:
                return None
            raise ConnectionUnavailableError(
                f"connection '{conn_id}' is not defined (the embedded default applies only to "
                f"'{default}'): {exc}"
            ) from exc
        except Exception as exc:
            raise ConnectionUnavailableError(
                f"connection '{conn_id}' could not be loaded: {type(exc).__name__}: {exc}"
            ) from exc

    def catalog_spec(self) -> CatalogSpec:
        """The catalog described by the connection (or the embedded default when none is configured)."""
        conn = self._optional_connection(self.logstore_conn_id, self.default_conn_name)
        if conn is None:
            spec = default_catalog()
            self._say_once(
                "catalog",
                "no LogStore connection configured ('%s' not defined): using the embedded default "
                "%s catalog '%s', warehouse %s",
                self.logstore_conn_id,
                spec.type,
                spec.name,
                spec.warehouse,
            )
            mask_secrets(spec.properties)
            return spec
        extra = conn.extra_dejson or {}
        kind = str(extra.get("type", "rest" if str(conn.host or "").startswith("http") else "sql"))
        properties = {str(k): str(v) for k, v in (extra.get("properties") or {}).items()}
        if conn.password:
            secret_key = "credential" if kind == "rest" else "jdbc.password"
            properties.setdefault(str(extra.get("secret_property", secret_key)), conn.password)
        mask_secrets(properties)
        return CatalogSpec.from_mapping(
            {
                "name": extra.get("catalog_name", "logstore"),
                "type": kind,
                "uri": conn.host or "",
                "warehouse": extra.get("warehouse", ""),
                "properties": properties,
            }
        )

    def kafka_extra(self) -> dict[str, Any]:
        """librdkafka settings of the Kafka connection (security); from the environment without one."""
        from airflow_logstore.settings import extra_kafka_config

        conn = self._optional_connection(self.kafka_config_id, "kafka_default")
        if conn is None:
            self._say_once(
                "kafka",
                "no Kafka connection configured ('%s' not defined): client settings from "
                "LOGSTORE_KAFKA_CONFIG",
                self.kafka_config_id,
            )
            settings = extra_kafka_config()
            mask_secrets(settings)
            return settings
        extra = dict(conn.extra_dejson or {})
        mask_secrets(extra)
        return extra

    def get_conn(self) -> Catalog:
        """A pyiceberg catalog, built on demand (never cached beyond this call)."""
        return self.catalog_spec().load()

    def table(self, name: str) -> LogStoreTable:
        from airflow_logstore.table.tables import LogStoreTable

        return LogStoreTable.open(name, self.catalog_spec(), self.kafka_extra())

    def test_connection(self) -> tuple[bool, str]:
        try:
            namespaces = self.get_conn().list_namespaces()
        except Exception as exc:
            return False, f"cannot reach the catalog: {exc}"
        return True, f"catalog reachable; {len(namespaces)} namespace(s)"
