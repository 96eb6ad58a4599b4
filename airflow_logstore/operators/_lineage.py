"""OpenLineage of the LogStore operators: which datasets a task reads and writes, named as OpenLineage
names them, and the OpenLineage provider's ``OperatorLineage`` built from them.

Names (OpenLineage's dataset naming, as its Spark integration reports the same datasets):

- a Kafka topic: namespace ``kafka://host:port`` (the first bootstrap server), name the topic;
- an Iceberg table: its physical location (namespace ``scheme://authority``, name the path; a local
  table: namespace ``file``, name its absolute path), a ``symlinks`` facet with its catalog name
  ``namespace.table`` (type ``TABLE``) in the catalog's namespace (a REST catalog's URI, else the
  warehouse location), and, when known, its snapshot id as the dataset version (``version`` facet);
- an input file or folder, or a read's output file: as a table's location.

An operator states its lineage as plain data (:class:`Lineage`, from :meth:`LineageMixin.lineage`): the
datasets it will touch (on start: ``result`` is None) or touched (on complete: ``result`` is what
``execute`` returned, with the snapshot ids a write committed). The provider
(``apache-airflow-providers-openlineage``, the package's ``openlineage`` extra) is imported only in
:func:`operator_lineage`, which returns None without it: the package works without the provider, and
without it no listener asks an operator for lineage.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_logstore.core.properties import LogStoreConfig
    from airflow_logstore.table.catalog import CatalogSpec
    from airflow_logstore.table.tables import LogStoreTable

#: Kafka's default port, for a bootstrap server given without one
KAFKA_PORT = 9092
#: object stores: a dataset's name is the key, without the leading '/' (``s3://bucket`` + ``a/b``)
OBJECT_STORES = ("s3", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "obs")
#: Hadoop's names of S3 that OpenLineage names ``s3``
S3_ALIASES = ("s3a", "s3n")
#: the symlink type of a catalog table
SYMLINK_TABLE = "TABLE"


@dataclass(frozen=True)
class LineageDataset:
    """One dataset as OpenLineage names it.

    :param symlink: (namespace, name) of the same dataset in its catalog, for a table
    :param version: the dataset's version (an Iceberg snapshot id)
    """

    namespace: str
    name: str
    symlink: tuple[str, str] | None = None
    version: str | None = None


@dataclass(frozen=True)
class Lineage:
    """The datasets one task reads (``inputs``) and writes (``outputs``)."""

    inputs: tuple[LineageDataset, ...] = ()
    outputs: tuple[LineageDataset, ...] = ()

    @classmethod
    def of(
        cls, inputs: Iterable[LineageDataset | None] = (), outputs: Iterable[LineageDataset | None] = ()
    ) -> Lineage:
        """A lineage of the datasets given, those that are None (not known, not touched) left out."""
        return cls(tuple(d for d in inputs if d is not None), tuple(d for d in outputs if d is not None))


def kafka_dataset(bootstrap_servers: str, topic: str) -> LineageDataset:
    """A topic: namespace ``kafka://host:port`` of the first of ``bootstrap_servers``, name ``topic``."""
    first = next((s.strip() for s in bootstrap_servers.split(",") if s.strip()), "")
    if not first:
        raise ValueError(f"no bootstrap server in '{bootstrap_servers}' to name topic '{topic}' by")
    if "://" in first:  # a listener name (PLAINTEXT://host:port) is not part of the address
        first = first.split("://", 1)[1]
    if ":" not in first.rsplit("]", 1)[-1]:
        first = f"{first}:{KAFKA_PORT}"
    return LineageDataset(f"kafka://{first}", topic)


def location_dataset(location: str) -> LineageDataset:
    """A file, folder or table location: namespace ``scheme://authority`` (without credentials), name the
    path (a local path: namespace ``file``, name the absolute path; an object store's key has no leading
    '/')."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if not scheme or len(scheme) == 1:  # a bare path (or a Windows drive letter)
        return LineageDataset("file", _strip_slash(os.path.abspath(location)))
    if scheme in S3_ALIASES:
        scheme = "s3"
    path = _strip_slash(parts.path) or "/"
    authority = parts.netloc.rsplit("@", 1)[-1]  # never a user or key
    if scheme == "file":
        return LineageDataset(f"file://{authority}" if authority else "file", path)
    if scheme in OBJECT_STORES:
        path = path.lstrip("/") or "/"
    return LineageDataset(f"{scheme}://{authority}", path)


def catalog_namespace(catalog: CatalogSpec) -> str:
    """The namespace of a table's catalog name: a REST catalog's URI; else (a SQL catalog, whose database
    URI may hold a password) the warehouse location, ``file:/path`` for a local one, as OpenLineage's
    Spark integration names a catalog without a service; else the catalog's name."""
    if catalog.type == "rest" and catalog.uri:
        parts = urlsplit(catalog.uri)
        host = parts.netloc.rsplit("@", 1)[-1]  # never a user or password
        return f"{parts.scheme}://{host}{_strip_slash(parts.path)}"
    if catalog.warehouse:
        parts = urlsplit(catalog.warehouse)
        scheme = parts.scheme.lower()
        if not scheme or scheme == "file":
            return f"file:{_strip_slash(parts.path if scheme else os.path.abspath(catalog.warehouse))}"
        scheme = "s3" if scheme in S3_ALIASES else scheme
        return f"{scheme}://{parts.netloc}{_strip_slash(parts.path)}"
    return catalog.name


def _strip_slash(path: str) -> str:
    return path.rstrip("/") if path != "/" else path


@dataclass(frozen=True)
class TableLineage:
    """One LogStore table as lineage names it, from one read of the catalog.

    :param location: the table's location (None: the table does not exist yet)
    :param config: its LogStore settings (None: not known)
    :param snapshot_id: its current snapshot when it was read
    """

    name: str
    catalog_namespace: str
    location: str | None
    config: LogStoreConfig | None
    snapshot_id: int | None = None

    @classmethod
    def load(cls, handle: LogStoreTable) -> TableLineage:
        """The table behind ``handle``, as it is now."""
        table = handle.load()
        snapshot = table.current_snapshot()
        return cls(
            str(handle.name),
            catalog_namespace(handle.catalog),
            table.location(),
            handle.config(table),
            snapshot.snapshot_id if snapshot is not None else None,
        )

    @classmethod
    def planned(cls, handle: LogStoreTable, properties: Mapping[str, str]) -> TableLineage:
        """A table not created yet, from the properties it will have: its topics, no location."""
        from airflow_logstore.core.properties import parse_table_properties

        return cls(
            str(handle.name), catalog_namespace(handle.catalog), None, parse_table_properties(properties)
        )

    def table(self, version: Any = None) -> LineageDataset | None:
        """The table at snapshot ``version`` (None: no version), None when it has no location yet."""
        if self.location is None:
            return None
        found = location_dataset(self.location)
        symlink = (self.catalog_namespace, self.name)
        return LineageDataset(found.namespace, found.name, symlink, None if version is None else str(version))

    def log(self) -> LineageDataset | None:
        """The log topic; None when the table has no log."""
        if self.config is None or not self.config.enabled or not self.config.topic:
            return None
        return kafka_dataset(self.config.bootstrap_servers or "", self.config.topic)

    def written(self, emit_mode: str | None, version: Any = None) -> list[LineageDataset | None]:
        """What a dual write with ``emit_mode`` writes: the table (at ``version``) and its log topic."""
        from airflow_logstore.core.properties import EMIT_FILE, EMIT_LOG, parse_emit_mode

        if self.config is None:
            return [self.table(version)]
        modes = parse_emit_mode(emit_mode, self.config)
        return [
            self.table(version) if EMIT_FILE in modes else None,
            self.log() if EMIT_LOG in modes else None,
        ]

    def feed(self) -> LineageDataset | None:
        """The committed feed topic (``<topic>.committed``); None unless the table has it enabled."""
        if self.config is None or not self.config.committed_feed or self.log() is None:
            return None
        committed, _ = self.config.feed_topics()
        return kafka_dataset(self.config.bootstrap_servers or "", committed)


def operator_lineage(lineage: Lineage) -> OperatorLineage | None:
    """``lineage`` as the OpenLineage provider's ``OperatorLineage``; None without the provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.generated.base import Dataset
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
        from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet
    except ImportError:
        return None

    def dataset(found: LineageDataset) -> Dataset:
        facets: dict[str, Any] = {}
        if found.symlink is not None:
            namespace, name = found.symlink
            facets["symlinks"] = SymlinksDatasetFacet(
                identifiers=[Identifier(namespace=namespace, name=name, type=SYMLINK_TABLE)]
            )
        if found.version is not None:
            facets["version"] = DatasetVersionDatasetFacet(datasetVersion=found.version)
        return Dataset(namespace=found.namespace, name=found.name, facets=facets)

    return OperatorLineage(
        inputs=[dataset(d) for d in lineage.inputs], outputs=[dataset(d) for d in lineage.outputs]
    )


class LineageMixin:
    """The OpenLineage methods of an operator that states its datasets in :meth:`lineage`.

    ``execute`` keeps its XCom value in ``lineage_result``: on complete, the versions it committed.
    The operator has ``logstore_conn_id`` and ``kafka_config_id`` (the connections a table is reached by).
    """

    #: what ``execute`` returned (None: it has not returned)
    lineage_result: Mapping[str, Any] | None = None
    logstore_conn_id: str
    kafka_config_id: str | None

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """The datasets of this task: on start (``result`` None), or of ``execute``'s ``result``."""
        raise NotImplementedError

    def lineage_table(self, name: str) -> LogStoreTable:
        """Table ``name`` through this operator's connections, for lineage: its hook does not say again
        which embedded default applies (the task says it once, ``execute``'s hook)."""
        from airflow_logstore.hooks.logstore import LogStoreHook

        return LogStoreHook(self.logstore_conn_id, self.kafka_config_id, log_defaults=False).table(name)

    def table_lineage(self, name: str) -> TableLineage:
        """Table ``name`` through this operator's connections, read now."""
        return TableLineage.load(self.lineage_table(name))

    def get_openlineage_facets_on_start(self) -> OperatorLineage | None:
        return operator_lineage(self.lineage(None))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        return operator_lineage(self.lineage(self.lineage_result))
