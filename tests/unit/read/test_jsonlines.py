"""JSON lines written a column at a time equal ``json.dumps`` of each row (what run_read wrote before)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from airflow_logstore.read.jsonlines import json_lines, json_row
from logstore_dev.testing.values import exact, random_value

STRINGS = ["plain", "", 'quote " inside', "back\\slash", "line\nbreak", "tab\t", "\x01ctl", "é ü 字 😀"]
STRINGS += ["\u2028", "\x7f"]


START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def random_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.1 else value

    return [
        {
            "id": maybe(rng.randint(-(2**63), 2**63 - 1)),
            "name": maybe(rng.choice(STRINGS) + str(rng.randint(0, 9))),
            "ok": maybe(rng.random() < 0.5),
            "price": maybe(
                rng.choice([rng.random() * 10 ** rng.randint(-5, 20), 1.0, -0.0, 3.0, math.nan, -math.inf])
            ),
            "exact": maybe(random_value(rng, "decimal(38, 18)")),  # 0E-18, -1.000E-7, 38 digits, ...
            "at": maybe(START + dt.timedelta(microseconds=rng.randint(0, 10**12))),
            "day": maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))),
            "amount": maybe(Decimal(rng.randint(-(10**8), 10**8)) / 100),
            "blob": maybe(rng.randbytes(rng.randint(0, 8))),
            "_kind": rng.choice(["+I", "-U", "+U", "-D"]),
        }
        for _ in range(count)
    ]


SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("ok", pa.bool_()),
        ("price", pa.float64()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("amount", pa.decimal128(12, 2)),
        ("exact", pa.decimal128(38, 18)),
        ("blob", pa.binary()),
        ("_kind", pa.string()),
    ]
)


@pytest.mark.parametrize("seed", range(5))
def test_json_lines_equal_json_dumps_of_each_row(seed: int) -> None:
    rng = random.Random(seed)
    table = pa.Table.from_pylist(random_rows(rng, 500), schema=SCHEMA)
    extra = {"_source": "log"} if seed % 2 else {"_kind": "+I", "_source": "file"}
    want = "".join(json_row({**row, **extra}) + "\n" for row in table.to_pylist())
    assert json_lines(table, extra) == want


def test_all_null_and_empty_tables() -> None:
    table = pa.table({"a": pa.array([None, None]), "b": pa.array([None, "x"], type=pa.string())})
    assert json_lines(table) == '{"a": null, "b": null}\n{"a": null, "b": "x"}\n'
    assert json_lines(table.slice(0, 0)) == ""


@pytest.mark.parametrize("seed", range(3))
def test_json_lines_of_slices_and_chunks_with_and_without_escapes(seed: int) -> None:
    """Strings that need no escape take the quoted join alone (one check of the data buffer); the
    lines are the joined array's buffer between its offsets, so a slice (an array that starts inside
    its buffers) and a table of several chunks give the per-row text too."""
    rng = random.Random(seed)
    plain = [{**row, "name": f"name-{n}"} for n, row in enumerate(random_rows(rng, 300))]
    table = pa.Table.from_pylist(plain, schema=SCHEMA)
    escaped = pa.Table.from_pylist(random_rows(rng, 300), schema=SCHEMA)
    pieces = [
        table,
        table.slice(17, 150),
        pa.concat_tables([table.slice(0, 40), escaped.slice(3, 60), table.slice(200, 7)]),
        pa.concat_tables([escaped.slice(0, 50), table.slice(50, 50)]).combine_chunks().slice(50, 50),
    ]
    for piece in pieces:
        want = "".join(json_row({**row, "_source": "log"}) + "\n" for row in piece.to_pylist())
        assert json_lines(piece, {"_source": "log"}) == want


def test_joined_lines_start_at_the_arrays_offset() -> None:
    """The joined text of a string array is its buffer between its own offsets: a slice starts inside
    the buffer (Arrow's join returns fresh arrays, so this is checked on slices directly)."""
    from airflow_logstore.read.jsonlines import _joined

    lines = ["a\n", "bc\n", "dé\n", "f\n"]
    for kind in (pa.string(), pa.large_string()):
        array = pa.array(lines, type=kind)
        assert _joined(array) == "".join(lines)
        assert _joined(array.slice(1, 2)) == "bc\ndé\n"
        assert _joined(array.slice(4, 0)) == ""


def test_json_lines_keep_every_value_exactly() -> None:
    """Decimals as JSON numbers with every digit, non-finite floats as strings: parsed with exact numbers,
    each line gives back its row's values."""
    table = pa.Table.from_pylist(random_rows(random.Random(9), 400), schema=SCHEMA)
    lines = json_lines(table).split("\n")[:-1]
    for line, row in zip(lines, table.to_pylist(), strict=True):
        parsed = json.loads(line, parse_float=Decimal)
        for name in ("exact", "amount"):
            assert exact(parsed[name]) == exact(row[name])
        price = parsed["price"]
        assert exact(None if price is None else float(price)) == exact(row["price"])
