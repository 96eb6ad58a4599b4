"""The key tables' layout: bucket(N, key) when asked for, and the note for tables created before."""

from __future__ import annotations

from typing import Any

from airflow_logstore.table.layout import (
    bucket_column,
    codec_note,
    creation_properties,
    is_key_bucketed,
    key_bucket_spec,
    layout_note,
)
from airflow_logstore.table.schema import parse_schema


class _Table:
    """What the layout reads of a table: its schema, its current spec and its properties."""

    def __init__(self, schema: Any, spec: Any, properties: dict[str, str] | None = None) -> None:
        self._schema, self._spec, self.properties = schema, spec, properties or {}

    def schema(self) -> Any:
        return self._schema

    def spec(self) -> Any:
        return self._spec


def test_a_key_table_is_bucketed_by_its_first_key_column() -> None:
    schema = parse_schema("region string, id long, name string", ["region", "id"])
    (field,) = key_bucket_spec(schema, 16).fields
    assert (str(field.transform), field.name, field.source_id) == ("bucket[16]", "region_bucket", 1)


def test_a_boolean_key_column_is_skipped_and_a_table_without_a_key_is_not_bucketed() -> None:
    assert bucket_column(parse_schema("flag boolean, id int", ["flag", "id"])) == "id"
    assert bucket_column(parse_schema("flag boolean, x int", ["flag"])) is None
    assert key_bucket_spec(parse_schema("a long, b string"), 16).is_unpartitioned()
    assert key_bucket_spec(parse_schema("id long", ["id"]), 0).is_unpartitioned()


def test_new_tables_record_their_bucket_count_and_an_explicit_one_wins() -> None:
    assert creation_properties({"a": "b"}, 0) == {"log-store.key-buckets": "0", "a": "b"}
    assert creation_properties({"log-store.key-buckets": "8"}, 8) == {"log-store.key-buckets": "8"}


def test_a_key_table_created_before_the_setting_gets_a_note_on_how_to_adopt_the_layout() -> None:
    schema = parse_schema("id long, name string", ["id"])
    old = _Table(schema, key_bucket_spec(schema, 0))
    note = layout_note(old, "db.orders")
    assert note is not None and not is_key_bucketed(old)
    assert "ALTER TABLE db.orders SET TBLPROPERTIES ('log-store.key-buckets'='0')" in note
    assert "ALTER TABLE db.orders ADD PARTITION FIELD bucket(16, `id`)" in note
    assert "logstore compact db.orders --force --rewrite-option rewrite-all=true" in note


def test_tables_created_since_bucketed_tables_and_tables_without_a_key_get_no_note() -> None:
    schema = parse_schema("id long, name string", ["id"])
    recorded = {"log-store.key-buckets": "0"}
    assert layout_note(_Table(schema, key_bucket_spec(schema, 0), recorded), "db.t") is None
    assert layout_note(_Table(schema, key_bucket_spec(schema, 8)), "db.t") is None
    keyless = parse_schema("a long")
    assert layout_note(_Table(keyless, key_bucket_spec(keyless, 16)), "db.t") is None


def test_a_table_without_a_parquet_codec_gets_a_note_on_how_to_write_zstd() -> None:
    schema = parse_schema("id long, name string", ["id"])
    note = codec_note(_Table(schema, key_bucket_spec(schema, 0)), "db.orders")
    assert note is not None and "gzip" in note
    assert "ALTER TABLE db.orders SET TBLPROPERTIES ('write.parquet.compression-codec'='zstd')" in note
    for codec in ("zstd", "snappy"):
        named = _Table(schema, key_bucket_spec(schema, 0), {"write.parquet.compression-codec": codec})
        assert codec_note(named, "db.orders") is None
