"""The data layout of key tables: bucketed by the primary key, so a batch reads only its keys' buckets.

A key table is created with ``bucket(N, <first key column>)`` in its partition spec (N is the table
property ``log-store.key-buckets``, 16 unless set; 0 keeps the table unpartitioned). The dual write's
lookup of its keys' current rows and its MERGE push the batch's keys into the scan: Iceberg keeps only
the buckets (and files) that can hold them. Tables created before this layout keep working; ``logstore
table show`` says how to adopt it (:func:`layout_note`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_logstore.table.schema import primary_key_of

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

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


def layout_note(table: Table, name: str, buckets: int) -> str | None:
    """How a key table created before the bucketed layout adopts it (None when nothing to do)."""
    column = bucket_column(table.schema())
    if column is None or buckets <= 0 or is_key_bucketed(table):
        return None
    return (
        f"This key table is not bucketed by its key (it was created before log-store.key-buckets): each "
        f"batch's lookup of its keys and its MERGE read every file of the table, so a batch costs more as "
        f"the table grows. It keeps working as it is. To adopt the new layout, add the partition field "
        f"(Spark SQL with the Iceberg extensions): ALTER TABLE {name} ADD PARTITION FIELD "
        f"bucket({buckets}, `{column}`). New batches are then written in buckets at once; a compaction that "
        f"rewrites every file (logstore compact {name} --force --rewrite-option rewrite-all=true) moves "
        f"the existing rows into them."
    )
