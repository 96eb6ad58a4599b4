"""Random column values of every type a table can have, edge cases first, and an exact comparison.

For round-trip property tests: a value written to the table and the log must read back as the same
value through every path. :func:`exact` tells apart what ``==`` does not: a decimal's scale, the sign
of a zero, NaN (equal to itself here), a timestamp with a zone (an instant) and one without.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import struct
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

#: A column of each type a table may have (``table.schema``): DDL type -> Iceberg type name.
COLUMN_TYPES = {
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
    "binary": "binary",
    "decimal(38,18)": "decimal(38, 18)",
    "decimal(38,0)": "decimal(38, 0)",
    "decimal(12,2)": "decimal(12, 2)",
    "decimal(38,10)": "decimal(38, 10)",
    "decimal(9,9)": "decimal(9, 9)",
}

_F32 = struct.Struct("<f")
_UTC = dt.UTC


def float32(value: float) -> float:
    """``value`` rounded to a 32-bit float."""
    return float(_F32.unpack(_F32.pack(value))[0])


def _random_bits_float(rng: random.Random, width: int) -> float:
    while True:
        if width == 32:
            value = float(_F32.unpack(struct.pack("<I", rng.getrandbits(32)))[0])
        else:
            value = float(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
        if math.isfinite(value):
            return value


_STRINGS = [
    "",
    "plain",
    'quo"te',
    "back\\slash",
    "line\nbreak\r\t",
    "\x00\x01\x1f",
    "é ü 字 😀",
    "\u2028\u2029",
]
_FIRST = dt.datetime(1, 1, 1, tzinfo=_UTC)
_LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_UTC)
_SPAN_US = (_LAST - _FIRST) // dt.timedelta(microseconds=1)


def scaled(unscaled: int, scale: int) -> Decimal:
    """``unscaled`` * 10^-``scale``, exactly (``Decimal.scaleb`` rounds to the context's 28 digits)."""
    return Decimal(f"{unscaled}E-{scale}")


def _decimal_edges(precision: int, scale: int) -> list[Decimal]:
    largest = 10**precision - 1
    return [
        scaled(0, scale),
        scaled(largest, scale),
        scaled(-largest, scale),
        scaled(1, scale),
        scaled(-1, scale),
    ]


def edge_values(type_name: str) -> list[Any]:
    """The values of a type most likely to be written or read wrong."""
    if type_name == "int":
        return [0, 1, -1, 2**31 - 1, -(2**31)]
    if type_name == "long":
        return [0, 2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1]
    if type_name == "float":
        f32 = [0.1, 1 / 3, 3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45, 16777217.0]
        return [0.0, -0.0, math.nan, math.inf, -math.inf, *(float32(v) for v in f32)]
    if type_name == "double":
        f64 = [0.1, 1 / 3, sys.float_info.max, sys.float_info.min, 5e-324, 1e16, 2.0**53 + 2, 1e-7]
        return [0.0, -0.0, math.nan, math.inf, -math.inf, *f64]
    if type_name == "string":
        return list(_STRINGS)
    if type_name == "boolean":
        return [True, False]
    if type_name == "date":
        return [
            dt.date(1, 1, 1),
            dt.date(9999, 12, 31),
            dt.date(1970, 1, 1),
            dt.date(1582, 10, 4),
            dt.date(1900, 2, 28),
        ]
    if type_name in ("timestamptz", "timestamp"):
        moments = [
            _FIRST,
            _LAST,
            dt.datetime(1970, 1, 1, tzinfo=_UTC),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=_UTC),
            dt.datetime(1582, 10, 10, 12, 0, 0, 1, tzinfo=_UTC),
            dt.datetime(2024, 2, 29, 3, 4, 5, 123456, tzinfo=_UTC),
            dt.datetime(2024, 3, 31, 1, 30, 0, 999, tzinfo=_UTC),  # a DST change in Europe
        ]
        return moments if type_name == "timestamptz" else [m.replace(tzinfo=None) for m in moments]
    if type_name == "binary":
        return [b"", bytes(range(256)), b"\x00", b"\xff\xfe"]
    if type_name.startswith("decimal("):
        precision, scale = (int(part) for part in type_name[len("decimal(") : -1].split(","))
        return _decimal_edges(precision, scale)
    raise ValueError(f"no values for type {type_name}")


def random_value(rng: random.Random, type_name: str, edge_share: float = 0.3) -> Any:
    """A value of ``type_name`` (an Iceberg type name): an edge value with probability ``edge_share``."""
    if rng.random() < edge_share:
        return rng.choice(edge_values(type_name))
    if type_name == "int":
        return rng.randint(-(2**31), 2**31 - 1)
    if type_name == "long":
        return rng.randint(-(2**63), 2**63 - 1)
    if type_name == "float":
        return _random_bits_float(rng, 32) if rng.random() < 0.5 else float32(rng.uniform(-1e6, 1e6))
    if type_name == "double":
        return _random_bits_float(rng, 64) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6)
    if type_name == "string":
        return "".join(
            rng.choice(["a", "é", '"', "\\", "\n", "字", "😀", "\x07", " "])
            for _ in range(rng.randint(0, 20))
        )
    if type_name == "boolean":
        return rng.random() < 0.5
    if type_name == "date":
        return dt.date(1, 1, 1) + dt.timedelta(
            days=rng.randrange((dt.date(9999, 12, 31) - dt.date(1, 1, 1)).days)
        )
    if type_name in ("timestamptz", "timestamp"):
        moment = _FIRST + dt.timedelta(microseconds=rng.randrange(_SPAN_US))
        return moment if type_name == "timestamptz" else moment.replace(tzinfo=None)
    if type_name == "binary":
        return rng.randbytes(rng.randint(0, 24))
    if type_name.startswith("decimal("):
        precision, scale = (int(part) for part in type_name[len("decimal(") : -1].split(","))
        digits = rng.randint(1, precision)
        return scaled(rng.choice([-1, 1]) * rng.randrange(10**digits), scale)
    raise ValueError(f"no values for type {type_name}")


def random_row(
    rng: random.Random,
    field_types: Mapping[str, str],
    null_share: float = 0.1,
    required: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A row of random values for ``field_types`` (column -> Iceberg type name), some of them null."""
    return {
        name: None if name not in required and rng.random() < null_share else random_value(rng, type_name)
        for name, type_name in field_types.items()
    }


def exact(value: Any) -> Any:
    """A token equal for two values exactly when they are the same value of the same type."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, Decimal):
        return ("decimal", str(value))
    if isinstance(value, dt.datetime):  # with a zone: the instant (in any zone); without: the wall time
        if value.tzinfo is not None:
            return ("instant", value.astimezone(_UTC).replace(tzinfo=None).isoformat())
        return ("local", value.isoformat())
    if isinstance(value, dt.date):
        return ("date", value.isoformat())
    if isinstance(value, bytes | bytearray | memoryview):
        return ("bytes", bytes(value))
    if isinstance(value, str):
        return ("str", value)
    return ("other", repr(value))


def exact_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: exact(value) for name, value in row.items()}
