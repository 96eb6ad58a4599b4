"""The data layout of key tables, and what a table created before ``log-store.key-buckets`` is told.

A batch's lookup of its keys' current rows and its MERGE read only the rows of the batch's keys whatever
the layout (the keys are pushed into both scans; :mod:`airflow_logstore.write.planning`): a table
created before keeps working and gets that at once. A key table may also be created bucketed by its key,
``bucket(N, <first key column>)`` with ``log-store.key-buckets=N`` (0, unpartitioned, by default): a
batch with fewer distinct keys than buckets then skips the other buckets' files; a batch of thousands of
keys touches every bucket. Every table created since the setting exists records it
(:func:`creation_properties`); ``logstore table show`` gives a table without it a note (:func:`layout_note`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_logstore.table.schema import primary_key_of

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

KEY_BUCKETS_PROPERTY = "log-store.key-buckets"
#: Iceberg's codec of a table's Parquet data files (new LogStore tables: zstd).
CODEC_PROPERTY = "write.parquet.compression-codec"
#: Key types Iceberg's bucket transform takes (of the key types, all but boolean).
BUCKETABLE_TYPES = ("int", "long", "string", "date")


def bucket_column(schema: Schema) -> str | None:
    """The key column a key table is bucketed by: the first that can be (None: no such column)."""
    for name in primary_key_of(schema):
        if str(schema.find_field(name).field_type) in BUCKETABLE_TYPES:
            return name
    return None


def key_bucket_spec(schema: Schema, buckets: int) -> PartitionSpec:
    """``bucket(buckets, <key column>)`` for a key table; unpartitioned without a key or buckets."""
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import BucketTransform

    column = bucket_column(schema)
    if column is None or buckets <= 0:
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(
        PartitionField(
            source_id=schema.find_field(column).field_id,
            field_id=1000,
            transform=BucketTransform(num_buckets=buckets),
            name=f"{column}_bucket",
        )
    )


def is_key_bucketed(table: Table) -> bool:
    """True when the table's current spec buckets its key column."""
    column = bucket_column(table.schema())
    if column is None:
        return False
    source_id = table.schema().find_field(column).field_id
    return any(
        field.source_id == source_id and str(field.transform).startswith("bucket[")
        for field in table.spec().fields
    )


def creation_properties(properties: Mapping[str, str], buckets: int) -> dict[str, str]:
    """The properties a new table is created with: ``properties`` plus its ``log-store.key-buckets``."""
    return {KEY_BUCKETS_PROPERTY: str(buckets), **properties}


def layout_note(table: Table, name: str, buckets: int = 16) -> str | None:
    """What a key table created before ``log-store.key-buckets`` can do (None for any other table).

    :param buckets: the bucket count the note suggests.
    """
    column = bucket_column(table.schema())
    if column is None or KEY_BUCKETS_PROPERTY in table.properties or is_key_bucketed(table):
        return None
    return (
        f"This key table was created before log-store.key-buckets. It keeps working, and a batch already "
        f"reads only the rows of its own keys (they are pushed into the lookup and the MERGE). To adopt "
        f"the layout of new tables, record it (Spark SQL with the Iceberg extensions): ALTER TABLE {name} "
        f"SET TBLPROPERTIES ('{KEY_BUCKETS_PROPERTY}'='0'). To bucket the table by its key instead (worth it "
        f"for batches with fewer distinct keys than buckets; pyiceberg appends then need pyiceberg-core): "
        f"ALTER TABLE {name} ADD PARTITION FIELD bucket({buckets}, `{column}`) and SET TBLPROPERTIES "
        f"('{KEY_BUCKETS_PROPERTY}'='{buckets}'); new batches are written in buckets at once, and a "
        f"compaction that rewrites every file (logstore compact {name} --force --rewrite-option "
        f"rewrite-all=true) moves the existing rows into them."
    )


def codec_note(table: Table, name: str) -> str | None:
    """What a table without a Parquet codec can do (None when it names one). Spark writes such a
    table's data files with gzip, Iceberg's default for tables that predate 1.4; new LogStore tables
    name zstd, as Iceberg's Java API does for the tables it creates."""
    if CODEC_PROPERTY in table.properties:
        return None
    return (
        f"This table names no Parquet codec, so Spark writes its data files with gzip (several times the "
        f"CPU of zstd, which new tables get). To write zstd from the next batch on (Spark SQL with the "
        f"Iceberg extensions): ALTER TABLE {name} SET TBLPROPERTIES ('{CODEC_PROPERTY}'='zstd'). Files "
        f"already written stay as they are until compaction rewrites them."
    )
