"""Table schemas: a short DDL ("id int, name string, ts timestamp") to an Iceberg schema and back."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_logstore.exceptions import IdentifierError, SchemaMismatchError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

_COLUMN = re.compile(
    r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<type>[A-Za-z_]+(\s*\(\s*\d+\s*,\s*\d+\s*\))?)"
    r"(?P<notnull>\s+not\s+null)?\s*$",
    re.IGNORECASE,
)
#: Types a primary key may use: exact, comparable, and encoded identically by Spark and Python.
KEY_TYPES = ("int", "long", "string", "date", "boolean")


def _iceberg_type(text: str) -> IcebergType:
    from pyiceberg import types as t

    name = re.sub(r"\s+", "", text.lower())
    simple = {
        "int": t.IntegerType(),
        "integer": t.IntegerType(),
        "long": t.LongType(),
        "bigint": t.LongType(),
        "float": t.FloatType(),
        "double": t.DoubleType(),
        "string": t.StringType(),
        "boolean": t.BooleanType(),
        "bool": t.BooleanType(),
        "date": t.DateType(),
        "timestamp": t.TimestamptzType(),
        "timestamptz": t.TimestamptzType(),
        "timestamp_ntz": t.TimestampType(),
        "binary": t.BinaryType(),
    }
    if name in simple:
        return simple[name]
    match = re.match(r"^decimal\((\d+),(\d+)\)$", name)
    if match:
        return t.DecimalType(int(match.group(1)), int(match.group(2)))
    raise SchemaMismatchError(
        f"column type '{text}' is not supported (int, long, float, double, string, boolean, date, "
        "timestamp, timestamp_ntz, decimal(p,s), binary)"
    )


def parse_schema(ddl: str, primary_key: Sequence[str] = ()) -> Schema:
    """Parse ``"id int, name string"`` into an Iceberg schema whose identifier fields are the key."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    columns = [part for part in _split_columns(ddl) if part.strip()]
    if not columns:
        raise SchemaMismatchError("the schema has no columns")
    fields = []
    seen: set[str] = set()
    for position, column in enumerate(columns, start=1):
        match = _COLUMN.match(column)
        if not match:
            raise SchemaMismatchError(
                f"cannot read column definition '{column.strip()}' (expected '<name> <type> [not null]')"
            )
        name = match.group("name")
        if name.lower() in seen:
            raise SchemaMismatchError(f"column '{name}' is declared twice")
        seen.add(name.lower())
        required = bool(match.group("notnull")) or name in primary_key
        fields.append(NestedField(position, name, _iceberg_type(match.group("type")), required=required))
    names = {f.name: f for f in fields}
    for column in primary_key:
        if column not in names:
            raise SchemaMismatchError(f"primary key column '{column}' is not in the schema")
        type_name = str(names[column].field_type)
        if type_name not in KEY_TYPES:
            raise SchemaMismatchError(
                f"primary key column '{column}' has type {type_name}; "
                f"keys must be one of {', '.join(KEY_TYPES)}"
            )
    return Schema(*fields, identifier_field_ids=[names[c].field_id for c in primary_key])


def _split_columns(ddl: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in ddl:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def primary_key_of(schema: Schema) -> list[str]:
    return [schema.find_column_name(field_id) or "" for field_id in schema.identifier_field_ids]


def field_types(schema: Schema) -> dict[str, str]:
    """Column name -> Iceberg primitive type name, in schema order (used by the record codec)."""
    return {field.name: str(field.field_type) for field in schema.fields}


def describe_schema(schema: Schema) -> str:
    key = set(primary_key_of(schema))
    return ", ".join(
        f"{f.name} {f.field_type}{' not null' if f.required else ''}{' (key)' if f.name in key else ''}"
        for f in schema.fields
    )


def same_columns(existing: Schema, requested: Schema) -> str | None:
    """None when both schemas have the same columns, types and key; else what differs."""
    old = [(f.name, str(f.field_type)) for f in existing.fields]
    new = [(f.name, str(f.field_type)) for f in requested.fields]
    if old != new:
        return f"the table has columns ({describe_schema(existing)}), not ({describe_schema(requested)})"
    if primary_key_of(existing) != primary_key_of(requested):
        return (
            f"the table's primary key is {primary_key_of(existing) or 'none'}, "
            f"not {primary_key_of(requested) or 'none'}"
        )
    return None


def check_identifier(text: str, what: str = "identifier") -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", text):  # "$" would accept a trailing newline
        raise IdentifierError(f"{what} '{text}' is not a plain identifier (letters, digits, '_')")
    return text
