"""One Iceberg catalog description, shared by Spark (Iceberg runtime) and pyiceberg (no JVM).

The embedded default is a SQLite-backed SQL catalog (JDBC in Spark) plus a local warehouse folder,
both under ``LOGSTORE_HOME``. A REST catalog with object storage is the same :class:`CatalogSpec`
with ``type="rest"`` and the storage properties: configuration, not code.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_logstore.exceptions import IdentifierError
from airflow_logstore.settings import LocalSettings, local_settings, sqlite_busy_timeout_s

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

DEFAULT_CATALOG_NAME = "logstore"
DEFAULT_NAMESPACE = "default"

#: What makes a setting secret, by its name: the one definition. Written in the syntax Python's ``re``
#: and Java's ``java.util.regex`` share, because Spark uses it too (``spark.redaction.regex``, see
#: :func:`airflow_logstore.spark.session.base_conf`): a key it matches is redacted in Spark's UI, REST API,
#: event log and its own logs. It includes Spark's default (``secret|password|token|access[.]?key``) and
#: adds the catalog ``credential``, ``s3.access-key-id`` / ``AWS_ACCESS_KEY_ID`` (``access-key``,
#: ``access_key``), session and private keys, Java's ``sasl.jaas.config`` and librdkafka's PEM keys.
SECRET_KEY_REGEX = (
    r"(?i)secret|password|passwd|token|credential|access[-._]?key|session[-._]?key|private"
    r"|jaas|key[.]pem|oauthbearer[.]config"
)
_SECRET_WORDS = re.compile(SECRET_KEY_REGEX)
#: the catalog's S3 properties (pyiceberg/Iceberg names) and their Hadoop S3A counterparts
_S3A_KEYS = {
    "s3.endpoint": "endpoint",
    "s3.path-style-access": "path.style.access",
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.region": "endpoint.region",
}
_IDENTIFIER_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def is_secret_key(key: str) -> bool:
    """True when a setting named ``key`` holds a secret (matched anywhere in the name, any case)."""
    return bool(_SECRET_WORDS.search(key))


@dataclass(frozen=True)
class CatalogSpec:
    """Where the Iceberg catalog lives.

    :param name: catalog name in Spark SQL (``<name>.<namespace>.<table>``)
    :param type: ``sql`` (SQLite/PostgreSQL through JDBC in Spark) or ``rest``
    :param uri: pyiceberg-style URI (``sqlite:////abs/path.db``, ``postgresql+psycopg2://..``, ``http://..``)
    :param warehouse: warehouse location (``file:///..``, ``s3://..``)
    :param properties: extra catalog properties (``s3.endpoint``, ``credential``, ``token``, ...),
        passed to both Spark and pyiceberg; secret ones never reach a command line.
    """

    name: str = DEFAULT_CATALOG_NAME
    type: str = "sql"
    uri: str = ""
    warehouse: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "type": self.type,
                "uri": self.uri,
                "warehouse": self.warehouse,
                "properties": self.properties,
            }
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CatalogSpec:
        kind = str(data.get("type", "sql"))
        if kind not in ("sql", "rest"):
            raise ValueError(f"catalog type '{kind}' is not supported (sql or rest)")
        return cls(
            name=str(data.get("name", DEFAULT_CATALOG_NAME)),
            type=kind,
            uri=str(data.get("uri", "")),
            warehouse=str(data.get("warehouse", "")),
            properties={str(k): str(v) for k, v in (data.get("properties") or {}).items()},
        )

    def describe(self) -> str:
        """Which catalog this is, for messages: name, type, URI (password masked) and warehouse."""
        uri = re.sub(r"^([a-z][a-z0-9+.-]*://[^:/@]*):[^@/]*@", r"\1:***@", self.uri)
        text = f"'{self.name}' ({self.type} {uri}"
        return text + (f", warehouse {self.warehouse})" if self.warehouse else ")")

    # -- Spark ---------------------------------------------------------------------------------------

    def jdbc_uri(self) -> str:
        """The JDBC URL Spark's JdbcCatalog uses for a ``sql`` catalog."""
        uri = self.uri
        if uri.startswith("sqlite:///"):
            return "jdbc:sqlite:" + uri[len("sqlite:///") :].split("?", 1)[0]
        match = re.match(r"^postgresql(\+\w+)?://(?:(?P<auth>[^@]*)@)?(?P<rest>.*)$", uri)
        if match:
            return "jdbc:postgresql://" + match.group("rest")
        raise ValueError(f"cannot derive a JDBC URL from catalog uri '{uri}'")

    def sqlite_busy_timeout_s(self) -> float:
        """How long a SQLite catalog waits for a lock: the URI's ``timeout``, else the setting."""
        match = re.search(r"[?&]timeout=([0-9.]+)", self.uri)
        return float(match.group(1)) if match else sqlite_busy_timeout_s()

    def spark_conf(self) -> dict[str, str]:
        """All ``spark.sql.catalog.<name>.*`` settings, secrets included (see :meth:`split_secrets`)."""
        prefix = f"spark.sql.catalog.{self.name}"
        # Not cached: batches are published by a compare-and-set outside Spark (pyiceberg), and every
        # plan must see the table's current ``main``, not the one a cached table object remembers.
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.cache-enabled": "false"}
        if self.type == "sql":
            conf[f"{prefix}.type"] = "jdbc"
            conf[f"{prefix}.uri"] = self.jdbc_uri()
            conf[f"{prefix}.jdbc.schema-version"] = "V1"
            if self.uri.startswith("sqlite:"):
                conf[f"{prefix}.jdbc.busy_timeout"] = str(round(self.sqlite_busy_timeout_s() * 1000))
            match = re.match(r"^postgresql(\+\w+)?://(?P<user>[^:@]*)(:(?P<pw>[^@]*))?@", self.uri)
            if match:
                conf[f"{prefix}.jdbc.user"] = match.group("user")
                if match.group("pw"):
                    conf[f"{prefix}.jdbc.password"] = match.group("pw")
        else:
            conf[f"{prefix}.type"] = "rest"
            conf[f"{prefix}.uri"] = self.uri
        if self.warehouse:
            conf[f"{prefix}.warehouse"] = self.warehouse
        for key, value in self.properties.items():
            conf[f"{prefix}.{key}"] = value
        conf.update(self.hadoop_s3_conf())
        return conf

    def hadoop_s3_conf(self) -> dict[str, str]:
        """Spark's own file access (input files, checkpoints) to the catalog's object store: ``s3://`` and
        ``s3a://`` through Hadoop's S3A with the catalog's endpoint and keys. Empty off S3."""
        on_s3 = self.warehouse.startswith(("s3://", "s3a://")) or "s3.endpoint" in self.properties
        if not on_s3:
            return {}
        conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
        for ours, hadoop in _S3A_KEYS.items():
            if ours in self.properties:
                conf[f"spark.hadoop.fs.s3a.{hadoop}"] = self.properties[ours]
        return conf

    # -- pyiceberg -----------------------------------------------------------------------------------

    def pyiceberg_properties(self) -> dict[str, str]:
        props = {"type": self.type, "uri": self.uri, **self.properties}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.type == "sql":
            props["schema_version"] = "v1"
        return props

    def load(self) -> Catalog:
        """Load the catalog in pyiceberg (no JVM)."""
        from pyiceberg.catalog import load_catalog

        if self.type == "sql" and self.uri.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(self.uri[len("sqlite:///") :].split("?", 1)[0]) or ".", exist_ok=True)
        return load_catalog(self.name, **self.pyiceberg_properties())


def embedded_catalog(settings: LocalSettings | None = None) -> CatalogSpec:
    settings = settings or local_settings()
    return CatalogSpec(
        name=DEFAULT_CATALOG_NAME,
        type="sql",
        uri=f"sqlite:///{settings.catalog_db}?timeout={sqlite_busy_timeout_s():g}",
        warehouse=settings.warehouse.as_uri(),
    )


def default_catalog(env: Mapping[str, str] | None = None) -> CatalogSpec:
    """``LOGSTORE_CATALOG`` (JSON) when set, else the embedded SQLite catalog."""
    env = dict(os.environ if env is None else env)
    raw = env.get("LOGSTORE_CATALOG")
    if raw:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return CatalogSpec.from_mapping(data)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError too
            raise ValueError(f"LOGSTORE_CATALOG is not a catalog spec: {exc}") from None
    return embedded_catalog(local_settings(env))


@dataclass(frozen=True)
class TableName:
    """A validated ``namespace.table`` identifier; parts are plain SQL identifiers, never quoted input."""

    namespace: str
    table: str

    @classmethod
    def parse(cls, text: str, default_namespace: str = DEFAULT_NAMESPACE) -> TableName:
        parts = str(text).strip().split(".")
        if len(parts) == 1:
            parts = [default_namespace, parts[0]]
        if len(parts) != 2:
            raise IdentifierError(
                f"table name '{text}' must be 'namespace.table' (letters, digits and '_' only)"
            )
        for part in parts:
            if not _IDENTIFIER_PART.fullmatch(part):  # match() would let a trailing newline through
                raise IdentifierError(
                    f"table name '{text}': '{part}' is not a plain identifier "
                    "(start with a letter or '_', then letters, digits, '_'; at most 128)"
                )
        return cls(parts[0], parts[1])

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.table}"

    def spark(self, catalog: CatalogSpec) -> str:
        return f"{catalog.name}.`{self.namespace}`.`{self.table}`"

    def __str__(self) -> str:
        return self.identifier


def load_table(catalog: CatalogSpec, table_name: TableName) -> Table:
    return catalog.load().load_table(table_name.identifier)
