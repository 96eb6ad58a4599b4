"""The key tables' layout: bucket(N, key) at creation, and the note for tables created before."""

from __future__ import annotations

from typing import Any

from airflow_logstore.table.layout import bucket_column, is_key_bucketed, key_bucket_spec, layout_note
from airflow_logstore.table.schema import parse_schema


class _Table:
    """What the layout reads of a table: its schema and its current spec."""

    def __init__(self, schema: Any, spec: Any) -> None:
        self._schema, self._spec = schema, spec

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


def test_an_unpartitioned_key_table_gets_a_note_on_how_to_adopt_the_layout() -> None:
    schema = parse_schema("id long, name string", ["id"])
    old = _Table(schema, key_bucket_spec(schema, 0))
    note = layout_note(old, "db.orders", 16)
    assert note is not None and not is_key_bucketed(old)
    assert "ALTER TABLE db.orders ADD PARTITION FIELD bucket(16, `id`)" in note
    assert "logstore compact db.orders --force --rewrite-option rewrite-all=true" in note


def test_bucketed_tables_tables_without_a_key_and_tables_that_chose_no_buckets_get_no_note() -> None:
    schema = parse_schema("id long, name string", ["id"])
    assert layout_note(_Table(schema, key_bucket_spec(schema, 8)), "db.t", 16) is None
    keyless = parse_schema("a long")
    assert layout_note(_Table(keyless, key_bucket_spec(keyless, 16)), "db.t", 16) is None
    assert layout_note(_Table(schema, key_bucket_spec(schema, 0)), "db.t", 0) is None
