"""Short schema DDL to Iceberg schemas: types, keys, and errors."""

from __future__ import annotations

import pytest
from pyiceberg import types as t

from airflow_logstore.exceptions import IdentifierError, SchemaMismatchError
from airflow_logstore.table.schema import (
    KEY_TYPES,
    check_identifier,
    describe_schema,
    field_types,
    parse_schema,
    primary_key_of,
    same_columns,
)


@pytest.mark.parametrize(
    ("type_text", "expected"),
    [
        ("int", t.IntegerType()),
        ("INTEGER", t.IntegerType()),
        ("long", t.LongType()),
        ("bigint", t.LongType()),
        ("float", t.FloatType()),
        ("double", t.DoubleType()),
        ("string", t.StringType()),
        ("boolean", t.BooleanType()),
        ("bool", t.BooleanType()),
        ("date", t.DateType()),
        ("timestamp", t.TimestamptzType()),
        ("timestamptz", t.TimestamptzType()),
        ("timestamp_ntz", t.TimestampType()),
        ("binary", t.BinaryType()),
        ("decimal(10,2)", t.DecimalType(10, 2)),
        ("decimal( 38 , 0 )", t.DecimalType(38, 0)),
        ("DECIMAL(5, 5)", t.DecimalType(5, 5)),
    ],
)
def test_column_types(type_text: str, expected: t.IcebergType) -> None:
    schema = parse_schema(f"c {type_text}")
    assert schema.find_field("c").field_type == expected


def test_fields_ids_order_and_nullability() -> None:
    schema = parse_schema("id int not null, name string, amount decimal(10, 2), ts timestamp NOT NULL")
    assert [(f.field_id, f.name, f.required) for f in schema.fields] == [
        (1, "id", True),
        (2, "name", False),
        (3, "amount", False),
        (4, "ts", True),
    ]
    assert schema.identifier_field_ids == []
    assert primary_key_of(schema) == []


def test_primary_key_columns_are_required_identifier_fields() -> None:
    schema = parse_schema("region string, id long, v double", ["id", "region"])
    assert schema.identifier_field_ids == [2, 1]
    assert primary_key_of(schema) == ["id", "region"]
    assert all(schema.find_field(name).required for name in ("id", "region"))
    assert not schema.find_field("v").required


@pytest.mark.parametrize("key_type", ["int", "long", "string", "date", "boolean"])
def test_key_types_allowed(key_type: str) -> None:
    assert key_type in KEY_TYPES
    assert primary_key_of(parse_schema(f"k {key_type}, v string", ["k"])) == ["k"]


@pytest.mark.parametrize(
    ("type_text", "shown"),
    [
        ("double", "double"),
        ("float", "float"),
        ("timestamp", "timestamptz"),
        ("timestamp_ntz", "timestamp"),
        ("decimal(10,2)", "decimal(10, 2)"),
        ("binary", "binary"),
    ],
)
def test_key_types_refused(type_text: str, shown: str) -> None:
    with pytest.raises(SchemaMismatchError) as info:
        parse_schema(f"k {type_text}, v string", ["k"])
    assert str(info.value) == (
        f"primary key column 'k' has type {shown}; keys must be one of int, long, string, date, boolean"
    )


def test_whitespace_and_trailing_commas() -> None:
    schema = parse_schema("  id   int ,\n name string,  ")
    assert [f.name for f in schema.fields] == ["id", "name"]


@pytest.mark.parametrize(
    ("ddl", "key", "message"),
    [
        ("", (), "the schema has no columns"),
        (" , ,", (), "the schema has no columns"),
        ("id", (), "cannot read column definition 'id' (expected '<name> <type> [not null]')"),
        ("id int, name", (), "cannot read column definition 'name' (expected '<name> <type> [not null]')"),
        ("1id int", (), "cannot read column definition '1id int'"),
        ("id int null", (), "cannot read column definition 'id int null'"),
        ("id int primary key", (), "cannot read column definition 'id int primary key'"),
        ("`id` int", (), "cannot read column definition '`id` int'"),
        ("id decimal(10)", (), "cannot read column definition 'id decimal(10)'"),
        ("id int, ID string", (), "column 'ID' is declared twice"),
        ("id int, id int", (), "column 'id' is declared twice"),
        ("id int", ("missing",), "primary key column 'missing' is not in the schema"),
        ("id int", ("ID",), "primary key column 'ID' is not in the schema"),
    ],
)
def test_schema_errors(ddl: str, key: tuple[str, ...], message: str) -> None:
    with pytest.raises(SchemaMismatchError) as info:
        parse_schema(ddl, key)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("type_text", ["varchar", "struct", "map", "decimal", "uuid", "time"])
def test_unsupported_type(type_text: str) -> None:
    with pytest.raises(SchemaMismatchError) as info:
        parse_schema(f"c {type_text}")
    assert str(info.value).startswith(f"column type '{type_text}' is not supported (int, long, float, double")


def test_field_types_match_the_codec_names() -> None:
    schema = parse_schema("id int, ts timestamp, t timestamp_ntz, d decimal(10, 2), b binary, ok bool")
    assert field_types(schema) == {
        "id": "int",
        "ts": "timestamptz",
        "t": "timestamp",
        "d": "decimal(10, 2)",
        "b": "binary",
        "ok": "boolean",
    }


def test_describe_schema() -> None:
    schema = parse_schema("id int, name string not null, v double", ["id"])
    assert describe_schema(schema) == "id int not null (key), name string not null, v double"


def test_same_columns() -> None:
    base = parse_schema("id int, v string", ["id"])
    assert same_columns(base, parse_schema("id int, v string", ["id"])) is None
    # nullability alone is not a difference
    assert same_columns(base, parse_schema("id int, v string not null", ["id"])) is None


def test_same_columns_reports_column_differences() -> None:
    base = parse_schema("id int, v string", ["id"])
    other = parse_schema("id int, v long", ["id"])
    assert same_columns(base, other) == (
        "the table has columns (id int not null (key), v string), not (id int not null (key), v long)"
    )
    assert same_columns(base, parse_schema("v string, id int", ["id"])) is not None
    assert same_columns(base, parse_schema("id int", ["id"])) is not None


def test_same_columns_reports_key_differences() -> None:
    keyed = parse_schema("id int, v string", ["id"])
    keyless = parse_schema("id int not null, v string")
    assert same_columns(keyed, keyless) == "the table's primary key is ['id'], not none"
    assert same_columns(keyless, keyed) == "the table's primary key is none, not ['id']"


@pytest.mark.parametrize("text", ["a", "_x", "Abc_123", "a" * 128])
def test_check_identifier_accepts(text: str) -> None:
    assert check_identifier(text) == text


@pytest.mark.parametrize("text", ["", "1a", "a-b", "a b", "a.b", "a;", "`a`", "a\n", "\na", "a" * 129, "é"])
def test_check_identifier_refuses(text: str) -> None:
    with pytest.raises(IdentifierError) as info:
        check_identifier(text, "namespace")
    assert str(info.value) == f"namespace '{text}' is not a plain identifier (letters, digits, '_')"
