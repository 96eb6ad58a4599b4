"""The log record format: headers, values, typed rows and Kafka's murmur2 partitioning."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from airflow_logstore.core import codec
from airflow_logstore.core.codec import (
    DataFormat,
    RecordMeta,
    RecordType,
    RowKind,
    convert_value,
    decode_headers,
    decode_value,
    dumps,
    encode_headers,
    encode_key,
    encode_value,
    key_of,
    kind_of,
    murmur2,
    partition_for_key,
    reversed_value,
    typed_row,
    with_kind,
)
from airflow_logstore.exceptions import RecordDecodeError


def headers(**overrides: bytes | None) -> list[tuple[str, Any]]:
    """Valid data-record headers, with some replaced (None drops the header)."""
    base: dict[str, bytes | None] = {
        "format-version": b"1",
        "writer-id": b"job-a",
        "epoch": b"7",
        "batch-id": b"3",
        "task-attempt": b"0.0",
        "record-type": b"data",
    }
    base.update(overrides)
    return [(name, value) for name, value in base.items() if value is not None]


def decode_error(raw: list[tuple[str, Any]] | None) -> str:
    with pytest.raises(RecordDecodeError) as info:
        decode_headers(raw)
    return str(info.value)


# --- headers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        RecordMeta("job-a", 1, 0),
        RecordMeta("job-a", 12, 99, task="3.1"),
        RecordMeta("writer with spaces/ü", 2**40, 2**33, task="0.0", log_only=True),
        RecordMeta("logstore-reconciler", 5, 4, record_type=RecordType.REVERSAL, reverses=(2, 1234)),
        RecordMeta("logstore-reconciler", 5, 4, record_type=RecordType.REASSERT),
        RecordMeta("logstore-reconciler", 5, 4, record_type=RecordType.REASSERT, pair_half=1),
        RecordMeta("logstore-reconciler", 5, 4, record_type=RecordType.REASSERT, pair_half=2),
        RecordMeta("job-b", 3, 1, record_type=RecordType.DATA, reverses=(0, 0)),
    ],
)
def test_headers_round_trip(meta: RecordMeta) -> None:
    encoded = encode_headers(meta)
    assert all(isinstance(name, str) and isinstance(value, bytes) for name, value in encoded)
    assert decode_headers(encoded) == meta


def test_encoded_headers_layout() -> None:
    encoded = dict(encode_headers(RecordMeta("w", 4, 9, task="1.2", log_only=True)))
    assert encoded == {
        "format-version": b"1",
        "writer-id": b"w",
        "epoch": b"4",
        "batch-id": b"9",
        "task-attempt": b"1.2",
        "record-type": b"data",
        "emit-mode": b"log",
    }
    reversal = dict(encode_headers(RecordMeta("r", 1, 1, record_type=RecordType.REVERSAL, reverses=(3, 17))))
    assert reversal["reverses"] == b"3:17"
    assert reversal["record-type"] == b"reversal"
    assert "emit-mode" not in reversal


def test_attempt_key() -> None:
    assert RecordMeta("w", 4, 9).attempt_key == ("w", 9, 4)


def test_decode_headers_defaults_and_foreign_headers() -> None:
    meta = decode_headers(
        [
            ("traceparent", b"\xff\xfe"),
            ("format-version", b"1"),
            ("writer-id", b"w"),
            ("epoch", b"2"),
            ("batch-id", b"5"),
        ]
    )
    assert meta == RecordMeta("w", 2, 5, task="", record_type=RecordType.DATA, reverses=None, log_only=False)


def test_emit_mode_other_than_log_is_not_log_only() -> None:
    assert decode_headers(headers(**{"emit-mode": b"file"})).log_only is False
    assert decode_headers(headers(**{"emit-mode": b"log"})).log_only is True


@pytest.mark.parametrize("raw", [None, []])
def test_decode_no_headers(raw: list[tuple[str, Any]] | None) -> None:
    assert decode_error(raw) == "record has no LogStore headers (not written by airflow-logstore)"


def test_decode_foreign_headers_only() -> None:
    assert decode_error([("content-type", b"json")]) == (
        "record has no 'format-version' header (not written by airflow-logstore)"
    )


@pytest.mark.parametrize(
    ("version", "shown"), [(b"2", "2"), (b"", ""), (b"1.0", "1.0"), (b"9" * 30, "9" * 20)]
)
def test_decode_wrong_version(version: bytes, shown: str) -> None:
    assert (
        decode_error(headers(**{"format-version": version}))
        == f"unsupported log record format-version '{shown}'"
    )


@pytest.mark.parametrize("name", ["writer-id", "epoch", "batch-id"])
def test_decode_missing_required_header(name: str) -> None:
    assert decode_error(headers(**{name: None})) == f"record has no '{name}' header"


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("epoch", b"seven", "seven"),
        ("epoch", b"", ""),
        ("epoch", b"1.5", "1.5"),
        ("batch-id", b"x" * 60, "x" * 40),
        ("reverses", b"a:1", "a"),
        ("reverses", b"1:b", "b"),
        ("reverses", b"12", ""),
    ],
)
def test_decode_non_integer(name: str, value: bytes, shown: str) -> None:
    extra = {"record-type": b"reversal"} if name == "reverses" else {}
    assert decode_error(headers(**{name: value, **extra})) == f"header '{name}' is not an integer: '{shown}'"


@pytest.mark.parametrize(
    ("value", "shown"), [(b"delete", "delete"), (b"DATA", "DATA"), (b"r" * 30, "r" * 20)]
)
def test_decode_bad_record_type(value: bytes, shown: str) -> None:
    assert decode_error(headers(**{"record-type": value})) == f"unknown record-type '{shown}'"


def test_decode_reversal_without_reverses() -> None:
    assert decode_error(headers(**{"record-type": b"reversal"})) == "reversal record has no 'reverses' header"


@pytest.mark.parametrize("name", ["writer-id", "epoch", "task-attempt", "format-version", "reverses"])
def test_decode_non_utf8_header(name: str) -> None:
    assert decode_error(headers(**{name: b"\xc3\x28"})) == f"header '{name}' is not UTF-8"


def test_decode_header_without_value() -> None:
    raw = [*headers(**{"writer-id": None}), ("writer-id", None)]
    assert decode_error(raw) == "header 'writer-id' has no value"


def test_decode_accepts_bytearray_values() -> None:
    raw = [(name, bytearray(value)) for name, value in headers()]
    assert decode_headers(raw) == RecordMeta("job-a", 7, 3, task="0.0")


# --- values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(RowKind))
def test_value_round_trip(kind: RowKind) -> None:
    row = {"id": 1, "name": "Zoë", "score": 1.5, "ok": True, "none": None}
    value = encode_value(kind, row)
    assert json.loads(value) == {"kind": kind.value, "row": row}
    assert decode_value(value) == (kind, row)


def test_value_is_compact_and_keeps_unicode() -> None:
    assert encode_value(RowKind.INSERT, {"a": 1, "b": "é"}) == '{"kind":"+I","row":{"a":1,"b":"é"}}'.encode()


def test_dumps_is_deterministic() -> None:
    row = {"ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), "d": Decimal("1.10"), "b": b"\x00\xff"}
    assert dumps(row) == dumps(dict(row))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), '"2024-01-02T03:04:05.000006Z"'),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            '"2024-01-02T01:04:05.000000Z"',
        ),
        (dt.datetime(2024, 1, 2, 3, 4, 5), '"2024-01-02T03:04:05.000000"'),
        (
            dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
            '"0001-01-01T00:00:00.000001Z"',
        ),  # year 1: 4 digits
        (dt.datetime(999, 12, 31, 23, 59, 59), '"0999-12-31T23:59:59.000000"'),
        (dt.date(2024, 2, 29), '"2024-02-29"'),
        (dt.date(1, 1, 1), '"0001-01-01"'),
        # decimals: JSON numbers with every digit, as Java's BigDecimal.toString writes them
        (Decimal("12.340"), "12.340"),
        (Decimal("12345678901234567890.123456789012345678"), "12345678901234567890.123456789012345678"),
        (Decimal("99999999999999999999999999999999999999"), "99999999999999999999999999999999999999"),
        (Decimal("0E-18"), "0E-18"),
        (Decimal("-0.0000001000"), "-1.000E-7"),
        (Decimal("0.000001"), "0.000001"),
        (1.5, "1.5"),
        (float("nan"), '"NaN"'),
        (float("inf"), '"Infinity"'),
        (float("-inf"), '"-Infinity"'),
        (-0.0, "-0.0"),
        (b"\x00\x01\xff", '"AAH/"'),
        (bytearray(b"hi"), '"aGk="'),
        (None, "null"),
    ],
)
def test_json_encoding_of_column_values(value: Any, encoded: str) -> None:
    assert dumps({"v": value}) == b'{"v":' + encoded.encode() + b"}"
    assert codec.value_text(value) == encoded


def test_decimals_and_non_finite_floats_keep_the_layout_of_the_rest() -> None:
    row = {"id": 1, "d": Decimal("1.50"), "f": float("nan"), "k": [Decimal("2"), "é"], "n": {"x": None}}
    assert dumps(row) == '{"id":1,"d":1.50,"f":"NaN","k":[2,"é"],"n":{"x":null}}'.encode()
    assert codec.json_text(row, spaced=True) == json.dumps(
        {"id": 1, "d": 1.5, "f": "NaN", "k": [2, "é"], "n": {"x": None}}, ensure_ascii=False
    ).replace("1.5", "1.50")


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_dumps_refuses_non_finite_decimals(value: Decimal) -> None:
    with pytest.raises(TypeError, match="cannot encode decimal"):
        dumps({"v": value})


def test_dumps_refuses_unknown_types() -> None:
    with pytest.raises(TypeError, match="cannot encode set in a log record"):
        dumps({"v": {1, 2}})


@pytest.mark.parametrize(
    ("row", "key", "expected"),
    [
        ({"id": 42, "region": "eu", "x": 1}, ["id", "region"], b'[42,"eu"]'),
        ({"id": 42, "region": "eu"}, ["region", "id"], b'["eu",42]'),
        ({"d": dt.date(2024, 1, 1)}, ["d"], b'["2024-01-01"]'),
        ({"id": 1}, [], None),
    ],
)
def test_encode_key(row: dict[str, Any], key: list[str], expected: bytes | None) -> None:
    assert encode_key(row, key) == expected


def test_encode_key_requires_key_columns() -> None:
    with pytest.raises(KeyError):
        encode_key({"id": 1}, ["region"])


def test_key_of() -> None:
    assert key_of({"a": 1, "b": 2}, ["b", "a"]) == (2, 1)
    assert key_of({"a": 1}, ["a", "missing"]) == (1, None)
    assert key_of({"a": 1}, []) == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "record has no value"),
        (b"not json", "value is not JSON (JSONDecodeError: "),
        (b"\xff\xfe\xfd", "value is not JSON (UnicodeDecodeError: "),
        (b"[1, 2]", 'value is not a LogStore change: expected {"kind": ..., "row": {...}}'),
        (b'"+I"', 'value is not a LogStore change: expected {"kind": ..., "row": {...}}'),
        (b'{"row": {}}', 'value is not a LogStore change: expected {"kind": ..., "row": {...}}'),
        (b'{"kind": "+I"}', 'value is not a LogStore change: expected {"kind": ..., "row": {...}}'),
        (b'{"kind": "+X", "row": {}}', "unknown row kind '+X'"),
        (b'{"kind": "insert-this-row", "row": {}}', "unknown row kind 'insert-thi'"),
        (b'{"kind": null, "row": {}}', "unknown row kind 'None'"),
        (b'{"kind": "+I", "row": [1]}', "value 'row' is not an object"),
        (b'{"kind": "+I", "row": null}', "value 'row' is not an object"),
    ],
)
def test_decode_value_errors(value: bytes | None, message: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        decode_value(value)
    assert str(info.value).startswith(message)


def test_decode_value_ignores_extra_fields() -> None:
    assert decode_value(b'{"kind": "-D", "row": {"id": 1}, "extra": 1}') == (RowKind.DELETE, {"id": 1})


@pytest.mark.parametrize(
    ("kind", "reverse", "addition"),
    [
        (RowKind.INSERT, RowKind.DELETE, True),
        (RowKind.DELETE, RowKind.INSERT, False),
        (RowKind.UPDATE_AFTER, RowKind.UPDATE_BEFORE, True),
        (RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, False),
    ],
)
def test_reversed_kinds(kind: RowKind, reverse: RowKind, addition: bool) -> None:
    assert kind.reversed() is reverse
    assert reverse.reversed() is kind
    assert kind.is_addition is addition
    assert reverse.is_addition is not addition
    row = {"id": 1, "v": "x"}
    assert decode_value(reversed_value(encode_value(kind, row))) == (reverse, row)


def test_reversed_value_of_garbage_fails() -> None:
    with pytest.raises(RecordDecodeError):
        reversed_value(b"{}")


# --- debezium-json ---------------------------------------------------------------------------------

ROW = {"id": 7, "price": Decimal("12345678901234567890.123456789"), "at": "2024-01-01T00:00:00.000001Z"}
ROW_TEXT = '{"id":7,"price":12345678901234567890.123456789,"at":"2024-01-01T00:00:00.000001Z"}'


@pytest.mark.parametrize(
    ("kind", "before", "after", "op"),
    [
        (RowKind.INSERT, "null", ROW_TEXT, "c"),
        (RowKind.UPDATE_AFTER, "null", ROW_TEXT, "c"),
        (RowKind.UPDATE_BEFORE, ROW_TEXT, "null", "d"),
        (RowKind.DELETE, ROW_TEXT, "null", "d"),
    ],
)
def test_debezium_envelope_of_each_kind(kind: RowKind, before: str, after: str, op: str) -> None:
    """An addition is a create with its ``after``, a retraction a delete with its ``before`` (what a
    Debezium consumer folds as an upsert and a delete, and Flink reads without a null ``before`` in a
    ``u`` or ``d``); the exact kind rides in ``source``."""
    value = encode_value(kind, ROW, DataFormat.DEBEZIUM_JSON)
    source = '{"connector":"airflow-logstore","row_kind":"' + kind.value + '"}'
    expected = f'{{"before":{before},"after":{after},"op":"{op}","source":{source}}}'
    assert value == expected.encode()
    assert codec.decode_change(value) == (DataFormat.DEBEZIUM_JSON, kind, ROW)
    assert json.loads(value)["op"] == codec.debezium_op(kind) == op


@pytest.mark.parametrize("data_format", list(DataFormat))
@pytest.mark.parametrize("kind", list(RowKind))
def test_with_kind_keeps_the_format_and_the_row_bytes(data_format: DataFormat, kind: RowKind) -> None:
    for original in RowKind:
        value = encode_value(original, ROW, data_format)
        changed = with_kind(value, kind)
        assert changed == encode_value(kind, ROW, data_format)
        assert ROW_TEXT.encode() in changed  # the row's bytes as written
        assert kind_of(changed) is kind
        assert codec.decode_change(changed) == (data_format, kind, ROW)


def test_other_debezium_layouts_are_decoded_and_encoded_again() -> None:
    value = b'{"op": "c", "after": {"id": 1}, "before": null, "source": {"row_kind": "+U"}}'
    assert kind_of(value) is RowKind.UPDATE_AFTER
    assert with_kind(value, RowKind.UPDATE_BEFORE) == encode_value(
        RowKind.UPDATE_BEFORE, {"id": 1}, DataFormat.DEBEZIUM_JSON
    )
    assert reversed_value(value) == with_kind(value, RowKind.UPDATE_BEFORE)


@pytest.mark.parametrize(
    ("value", "kind", "row"),
    [
        (b'{"before": null, "after": {"id": 1}, "op": "c"}', RowKind.INSERT, {"id": 1}),
        (b'{"before": null, "after": {"id": 1}, "op": "r"}', RowKind.INSERT, {"id": 1}),
        (b'{"before": {"id": 1}, "after": null, "op": "d"}', RowKind.DELETE, {"id": 1}),
        (
            b'{"before": {"id": 1}, "after": null, "op": "d", "source": {"db": "x"}}',
            RowKind.DELETE,
            {"id": 1},
        ),
        (
            b'{"payload": 1, "after": {"id": 2.5}, "op": "c", "ts_ms": 1}',
            RowKind.INSERT,
            {"id": Decimal("2.5")},
        ),
    ],
)
def test_debezium_records_of_other_writers(value: bytes, kind: RowKind, row: dict[str, Any]) -> None:
    """Without a ``source.row_kind``, a create is an insert and a delete a delete."""
    assert decode_value(value) == (kind, row)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b'{"before": {"id": 1}, "after": {"id": 2}, "op": "u"}', "a Debezium 'u' record holds two changes"),
        (b'{"before": null, "after": {"id": 1}, "op": "x"}', "unknown Debezium op 'x' (expected c, r or d)"),
        (b'{"before": null, "after": {"id": 1}, "op": null}', "unknown Debezium op 'None'"),
        (
            b'{"before": null, "after": null, "op": "c"}',
            "value 'after' of a Debezium 'c' record is not an object",
        ),
        (
            b'{"before": null, "after": {"id": 1}, "op": "d"}',
            "value 'before' of a Debezium 'd' record is not",
        ),
        (
            b'{"before": {"id": 1}, "after": null, "op": "d", "source": {"row_kind": "+I"}}',
            "source.row_kind '+I' contradicts op 'd'",
        ),
        (b'{"before": null, "after": {}, "op": "c", "source": {"row_kind": "?"}}', "unknown row kind '?'"),
        (b'{"before": null, "after": {"id": 1}}', "value is not a LogStore change"),
    ],
)
def test_debezium_decode_errors(value: bytes, message: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        decode_value(value)
    assert str(info.value).startswith(message)


# --- typed rows ------------------------------------------------------------------------------------

UTC = dt.UTC


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        (None, "int", None),
        (None, "timestamptz", None),
        (5, "int", 5),
        ("5", "long", 5),
        (2**40, "bigint", 2**40),
        (-3, "integer", -3),
        (1, "double", 1.0),
        ("2.5", "float", 2.5),
        (True, "boolean", True),
        (False, "boolean", False),
        (12, "string", "12"),
        ("3f1c0a5e-0000-4000-8000-000000000000", "uuid", "3f1c0a5e-0000-4000-8000-000000000000"),
        ("2024-02-29", "date", dt.date(2024, 2, 29)),
        ("2024-01-02T03:04:05.000006Z", "timestamptz", dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)),
        ("2024-01-02T05:04:05+02:00", "timestamptz", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05", "timestamptz", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05Z", "timestamptz_ns", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05.5", "timestamp", dt.datetime(2024, 1, 2, 3, 4, 5, 500000)),
        ("2024-01-02T03:04:05Z", "timestamp", dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("2024-01-02T05:04:05+02:00", "timestamp_ns", dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("12.340", "decimal(10, 3)", Decimal("12.340")),
        (12.5, "decimal(10, 2)", Decimal("12.50")),
        (7, "decimal(5, 0)", Decimal(7)),
        ("AAH/", "binary", b"\x00\x01\xff"),
        ("aGk=", "fixed[2]", b"hi"),
        ({"nested": 1}, "struct<...>", {"nested": 1}),
        ("X", "STRING", "X"),
    ],
)
def test_convert_value(value: Any, type_name: str, expected: Any) -> None:
    converted = convert_value(value, type_name)
    assert converted == expected
    assert type(converted) is type(expected)
    if isinstance(expected, dt.datetime):
        assert converted.tzinfo == expected.tzinfo
    if isinstance(expected, Decimal):
        assert str(converted) == str(expected)


@pytest.mark.parametrize(
    ("value", "type_name", "message"),
    [
        (True, "int", "expected an integer, got True"),
        (1.5, "long", "expected an integer, got 1.5"),
        ("yes", "boolean", "expected a boolean, got 'yes'"),
        (1, "boolean", "expected a boolean, got 1"),
    ],
)
def test_convert_value_type_errors(value: Any, type_name: str, message: str) -> None:
    with pytest.raises(RecordDecodeError, match=message):
        convert_value(value, type_name)


def test_timestamp_round_trip_through_json() -> None:
    aware = dt.datetime(2023, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    naive = dt.datetime(2023, 6, 1, 12, 0)
    row = json.loads(dumps({"a": aware, "n": naive, "d": Decimal("-0.01"), "b": b"\x00" * 3}))
    typed = typed_row(row, {"a": "timestamptz", "n": "timestamp", "d": "decimal(3, 2)", "b": "binary"})
    assert typed == {"a": aware, "n": naive, "d": Decimal("-0.01"), "b": b"\x00" * 3}
    assert typed["a"].tzinfo == UTC


def test_typed_row_follows_the_schema() -> None:
    row = {"id": "7", "when": "2024-01-01", "extra": "dropped"}
    assert typed_row(row, {"id": "long", "when": "date", "missing": "string"}) == {
        "id": 7,
        "when": dt.date(2024, 1, 1),
        "missing": None,
    }


@pytest.mark.parametrize(
    ("row", "types", "detail"),
    [
        ({"id": "seven"}, {"id": "int"}, "invalid literal for int()"),
        ({"id": True}, {"id": "int"}, "expected an integer, got True"),
        ({"d": "2024-13-01"}, {"d": "date"}, "month must be in 1..12"),
        ({"t": "yesterday"}, {"t": "timestamptz"}, "Invalid isoformat string"),
        ({"f": "fast"}, {"f": "double"}, "could not convert string to float"),
        ({"f": [1]}, {"f": "double"}, "float() argument must be"),
        ({"b": "abc"}, {"b": "binary"}, "padding"),
        ({"x": "1.2.3"}, {"x": "decimal(5, 2)"}, "ConversionSyntax"),
    ],
)
def test_typed_row_errors(row: dict[str, Any], types: dict[str, str], detail: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        typed_row(row, types)
    message = str(info.value)
    assert message.startswith("row does not fit the table schema: ")
    assert detail in message


def test_field_types_of() -> None:
    assert codec.field_types_of([("id", "int"), ("name", "string")]) == {"id": "int", "name": "string"}


# --- murmur2 and partitioning ----------------------------------------------------------------------

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]
# librdkafka, src/rdmurmur2.c, unittest_murmur2 ("java_murmur2_results", given there as hex int32).
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_VECTORS = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (_UNALIGNED, 0x78424F1C),
    (_UNALIGNED[1:], 0x4A62B377),
    (_UNALIGNED[2:], 0xE0E4E09E),
    (_UNALIGNED[3:], 0x62B8B43F),
    (b"", 0x106E08D9),
]


def _int32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


@pytest.mark.parametrize(("data", "expected"), KAFKA_UTILS_TEST_VECTORS)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), LIBRDKAFKA_VECTORS)
def test_murmur2_matches_librdkafka_unittest(data: bytes, expected: int) -> None:
    assert murmur2(data) == _int32(expected)


def test_empty_key_hash() -> None:
    assert murmur2(b"") == 275646681


def test_murmur2_is_a_signed_32_bit_int() -> None:
    for data, _ in KAFKA_UTILS_TEST_VECTORS + LIBRDKAFKA_VECTORS:
        assert -(2**31) <= murmur2(data) < 2**31


@pytest.mark.parametrize(("data", "hashed"), KAFKA_UTILS_TEST_VECTORS)
@pytest.mark.parametrize("partitions", [1, 3, 7, 12, 50])
def test_partition_for_key_is_to_positive_modulo(data: bytes, hashed: int, partitions: int) -> None:
    # Kafka's BuiltInPartitioner: Utils.toPositive(Utils.murmur2(key)) % numPartitions
    assert partition_for_key(data, partitions) == (hashed & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(
    ("data", "partitions", "expected"),
    [(b"foobar", 50, 16), (b"21", 12, 0), (b"abc", 3, 0), (b"", 7, 2), (b"21", 1, 0)],
)
def test_partition_for_key_values(data: bytes, partitions: int, expected: int) -> None:
    assert partition_for_key(data, partitions) == expected


def test_same_key_same_partition_for_every_change() -> None:
    key = encode_key({"id": 42, "region": "eu"}, ["id", "region"])
    assert key is not None
    assert {partition_for_key(key, 6) for _ in range(3)} == {partition_for_key(b'[42,"eu"]', 6)}


def test_producer_partitioner_is_murmur2_random() -> None:
    assert codec.PRODUCER_PARTITIONER == "murmur2_random"


def test_base64_of_binary_is_standard_alphabet() -> None:
    assert convert_value(base64.b64encode(b"\xfb\xff").decode(), "binary") == b"\xfb\xff"
