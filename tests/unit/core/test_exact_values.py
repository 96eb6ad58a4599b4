"""Column values read back exactly: the codec's value rule, both decoders, over every column type.

Seeded random rows of every type a table can have (``testing.values``: edge values first), compared
with :func:`~logstore_dev.testing.values.exact` (which tells a decimal's scale, a zero's sign, NaN
and a timestamp's zone apart).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from airflow_logstore.core import codec
from airflow_logstore.core.codec import (
    DataFormat,
    RowKind,
    decode_value,
    decode_values_bulk,
    encode_value,
    typed_row,
)
from airflow_logstore.exceptions import RecordDecodeError
from logstore_dev.testing.values import COLUMN_TYPES, exact, exact_row, random_row

TYPES = {f"c_{n}": type_name for n, type_name in enumerate(COLUMN_TYPES.values())}


def per_record(value: bytes) -> dict[str, Any]:
    kind, raw = decode_value(value)
    return {**typed_row(raw, TYPES), "_kind": kind.value}


@pytest.mark.parametrize("data_format", list(DataFormat))
@pytest.mark.parametrize("seed", range(8))
def test_every_type_round_trips_through_the_codec_exactly(seed: int, data_format: DataFormat) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        row = random_row(rng, TYPES)
        kind = rng.choice(list(RowKind))
        value = encode_value(kind, row, data_format)
        assert exact_row(per_record(value)) == exact_row({**row, "_kind": kind.value})


@pytest.mark.parametrize("data_format", list(DataFormat))
@pytest.mark.parametrize("seed", range(8))
def test_bulk_decoding_equals_the_per_record_path_exactly_on_every_type(
    seed: int, data_format: DataFormat
) -> None:
    rng = random.Random(seed)
    rows = [random_row(rng, TYPES, null_share=0.2) for _ in range(500)]
    values = [encode_value(RowKind.UPDATE_AFTER, row, data_format) for row in rows]
    decoded = decode_values_bulk(values, TYPES)
    assert decoded.failed == []
    assert [exact_row(r) for r in decoded.rows.to_pylist()] == [exact_row(per_record(v)) for v in values]
    assert [exact_row(r) for r in decoded.rows.to_pylist()] == [exact_row({**r, "_kind": "+U"}) for r in rows]


#: Texts Spark 4.1's ``to_json`` wrote (with ``codec.SPARK_JSON_OPTIONS``) and the values they hold.
SPARK_TEXTS = [
    (
        "decimal(38, 18)",
        "12345678901234567890.123456789012345678",
        Decimal("12345678901234567890.123456789012345678"),
    ),
    ("decimal(38, 18)", "0E-18", Decimal("0E-18")),
    ("decimal(38, 18)", "-1E-18", Decimal("-0.000000000000000001")),
    ("decimal(38, 10)", "-1.000E-7", Decimal("-0.0000001000")),
    ("decimal(38, 10)", "12345678901234567890.1234567891", Decimal("12345678901234567890.1234567891")),
    (
        "decimal(38, 0)",
        "-99999999999999999999999999999999999999",
        Decimal("-99999999999999999999999999999999999999"),
    ),
    ("decimal(12, 2)", "1.50", Decimal("1.50")),
    ("decimal(12, 2)", "0.00", Decimal("0.00")),
    ("float", "0.1", struct.unpack("<f", struct.pack("<f", 0.1))[0]),
    ("float", "3.4028235E38", 3.4028234663852886e38),
    ("float", '"NaN"', math.nan),
    ("float", "-0.0", -0.0),
    ("double", "1.0E16", 1e16),
    ("double", "4.9E-324", 5e-324),
    ("double", '"-Infinity"', -math.inf),
    ("timestamptz", '"2024-01-02T03:04:05.123456Z"', dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)),
    ("timestamptz", '"0001-01-01T00:00:00.000001Z"', dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)),
    ("timestamp", '"9999-12-31T23:59:59.999999"', dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("timestamp", '"0001-01-01T00:00:00.000000"', dt.datetime(1, 1, 1)),
    ("date", '"0001-01-01"', dt.date(1, 1, 1)),
    ("binary", '"AP8="', b"\x00\xff"),
    ("binary", '""', b""),
]


@pytest.mark.parametrize(("type_name", "text", "expected"), SPARK_TEXTS)
def test_what_spark_writes_reads_back_exactly_on_both_paths(type_name: str, text: str, expected: Any) -> None:
    value = b'{"kind":"+I","row":{"v":' + text.encode() + b"}}"
    types = {"v": type_name}
    _, raw = decode_value(value)
    assert exact(typed_row(raw, types)["v"]) == exact(expected)
    [bulk] = decode_values_bulk([value], types).rows.to_pylist()
    assert exact(bulk["v"]) == exact(expected)


@pytest.mark.parametrize(("type_name", "text", "expected"), SPARK_TEXTS)
def test_python_writes_what_spark_writes(type_name: str, text: str, expected: Any) -> None:
    """The codec's encoder and Spark's produce write the same text (floats aside: Java and Python
    write the shortest text of a double differently, ``1.0E16`` and ``1e+16``; both read back exactly)."""
    if type_name in ("float", "double") and math.isfinite(expected):
        for written in (text, codec.value_text(expected)):
            assert codec.convert_value(Decimal(written), type_name).hex() == expected.hex()
        return
    assert codec.value_text(expected) == text


@pytest.mark.parametrize(
    ("text", "type_name", "message"),
    [
        ("1.555", "decimal(12, 2)", "1.555 does not fit decimal(12, 2): more than 2 digits after the point"),
        ("1E-20", "decimal(12, 2)", "does not fit decimal(12, 2): more than 2 digits after the point"),
        (
            "12345678901.5",
            "decimal(12, 2)",
            "does not fit decimal(12, 2): more than 10 digits before the point",
        ),
        ("1E+38", "decimal(38, 0)", "does not fit decimal(38, 0): more than 38 digits before the point"),
        ("1.0", "decimal(9, 9)", "does not fit decimal(9, 9): more than 0 digits before the point"),
        # Arrow, parsing straight into decimal128(38, 2), wraps this one around
        ("99999999999999999999999999999999999999", "decimal(38, 2)", "more than 36 digits before the point"),
        ("1E+80", "decimal(38, 0)", "more than 38 digits before the point"),
        ('"NaN"', "decimal(12, 2)", "expected a decimal, got 'NaN'"),
        ("true", "decimal(12, 2)", "expected a decimal, got True"),
        ('"1.2.3"', "decimal(12, 2)", "ConversionSyntax"),
    ],
)
def test_a_decimal_that_does_not_fit_its_column_is_refused_on_both_paths(
    text: str, type_name: str, message: str
) -> None:
    value = b'{"kind":"+I","row":{"v":' + text.encode() + b"}}"
    with pytest.raises(RecordDecodeError, match="row does not fit the table schema: ") as info:
        typed_row(decode_value(value)[1], {"v": type_name})
    assert message in str(info.value)
    decoded = decode_values_bulk([value], {"v": type_name})
    assert decoded.kept == [] and decoded.failed == [(0, str(info.value))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.500", Decimal("1.50")),  # trailing zeros: the same value at the column's scale
        ("1E+2", Decimal("100.00")),
        ("7", Decimal("7.00")),
        ('"2.5"', Decimal("2.50")),  # a decimal as a JSON string is read too
        ("-0.00", Decimal("0.00")),  # no negative zero (Arrow, Spark and Java have none)
    ],
)
def test_decimals_come_back_at_the_column_scale(text: str, expected: Decimal) -> None:
    value = b'{"kind":"+I","row":{"v":' + text.encode() + b"}}"
    assert exact(typed_row(decode_value(value)[1], {"v": "decimal(12, 2)"})["v"]) == exact(expected)
    [bulk] = decode_values_bulk([value], {"v": "decimal(12, 2)"}).rows.to_pylist()
    assert exact(bulk["v"]) == exact(expected)


def test_raw_rows_hold_exact_numbers() -> None:
    """Numbers with a fraction or an exponent decode as decimals (never through a float): the
    reconciler compares raw rows."""
    _, row = decode_value(b'{"kind":"+I","row":{"a":12345678901234567890.1234567891,"b":7,"c":1E+400}}')
    assert row == {"a": Decimal("12345678901234567890.1234567891"), "b": 7, "c": Decimal("1E+400")}
    assert type(row["b"]) is int


def test_float_columns_round_as_a_float_cast_does() -> None:
    """Per record (struct) and in bulk (Arrow's cast) a float column's double rounds to the nearest
    float, ties to even, and overflows to an infinity: as numpy's (C's) cast does."""
    rng = random.Random(5)
    doubles = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20000)]
    doubles = [d for d in doubles if math.isfinite(d)] + [3.4028235677973366e38, -3.5e38, 1e-46, -0.0]
    with np.errstate(over="ignore"):
        want = np.array(doubles, dtype=np.float64).astype(np.float32).astype(np.float64).tolist()
    assert [codec.convert_value(d, "float").hex() for d in doubles] == [w.hex() for w in want]
    arrow = pa.array(doubles, type=pa.float64()).cast(pa.float32()).to_pylist()
    assert [a.hex() for a in arrow] == [w.hex() for w in want]


@pytest.mark.parametrize("data_format", list(DataFormat))
def test_a_chunk_of_decimals_and_timestamps_decodes_in_bulk_without_falling_back(
    monkeypatch: pytest.MonkeyPatch, data_format: DataFormat
) -> None:
    """Decimals are parsed by Arrow (exactly); no piece of a clean chunk is decoded one by one."""

    def one_by_one(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a piece of the chunk was decoded one by one")

    monkeypatch.setattr(codec, "_decode_one_by_one", one_by_one)
    rng = random.Random(1)
    finite = {name: t for name, t in TYPES.items() if t not in ("float", "double")}
    rows = [random_row(rng, finite) for _ in range(2000)]
    kinds = [rng.choice(list(RowKind)) for _ in rows]
    values = [encode_value(kind, row, data_format) for kind, row in zip(kinds, rows, strict=True)]
    decoded = decode_values_bulk(values, finite)
    assert decoded.rows.column("_kind").to_pylist() == [kind.value for kind in kinds]
    assert [exact_row(r) for r in decoded.rows.drop_columns(["_kind"]).to_pylist()] == [
        exact_row(r) for r in rows
    ]
