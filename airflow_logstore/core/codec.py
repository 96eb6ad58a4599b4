"""The LogStore log record format, version 1: one codec for writer, readers and reconciliation.

A record in the log topic is::

    key      JSON array of the primary-key values in key order, compact ("[42,\"eu\"]");
             null (no key) for tables without a primary key
    value    {"kind": "+I" | "-U" | "+U" | "-D", "row": {<column>: <value>, ...}} (format ``json``; see
             the value formats below for ``debezium-json``)
    headers  format-version  "1"
             writer-id       who wrote it (a dual-write job, or "logstore-reconciler")
             epoch           the writer's attempt number (strictly increasing per writer)
             batch-id        the batch (a job run or a streaming micro-batch id)
             task-attempt    "<spark partition>.<attempt>" of the Spark task that produced it
             record-type     data | reversal | reassert
             reverses        "<partition>:<offset>" of the record a reversal undoes (reversals only)
             emit-mode       "log" when the batch was written to the log only (never committed)
             reassert-half   "1" on the record that opens a reassert pair, "2" on the one that closes it
             reasserts       "<partition>:<offset>:<run>" of a reassert pair: the record whose image it
                             restores and the reconciler run that planned it (the pair's identity)

**Value formats** (the table property ``log-store.data-format``, Paimon's ``log.format``; readers
read both, record by record, whatever the table's property says):

``json`` (the default)
    ``{"kind":"+U","row":{...}}``.
``debezium-json``
    The Debezium envelope that Flink's ``debezium-json`` format and Kafka Connect's Debezium converters
    read. Each record holds one change (a ``-U``/``+U`` pair is two records, as in ``json``): an
    addition (``+I``, ``+U``) is a create, ``{"before":null,"after":{...},"op":"c","source":{...}}``; a
    retraction (``-U``, ``-D``) a delete, ``{"before":{...},"after":null,"op":"d","source":{...}}``.
    ``source`` is ``{"connector":"airflow-logstore","row_kind":"+U"}``: the exact row kind, which our
    readers restore. A Debezium consumer folds the records of a key as upserts and deletes; ``u``
    (Flink reads it as two changes, and fails when its ``before`` is null) is never written.
    Readers accept ``r`` as a create, and a record without ``source`` as ``+I`` (``c``) or ``-D`` (``d``).

Keys are partitioned with Kafka's murmur2 partitioner (librdkafka ``murmur2_random``, the same as the
Java client's default), so every change of one key lands in one partition, in order.

**Column values** (the same rule for the Spark produce, :func:`dumps` and every reader; each value
reads back exactly as it was written):

=================  ===============================================================================
int, long          a JSON integer
float, double      a JSON number, the shortest text that reads back as the same value (Java's
                   ``Float.toString``/``Double.toString``, Python's ``repr``); ``"NaN"``,
                   ``"Infinity"``, ``"-Infinity"`` as JSON strings. A float column's value is the
                   number read as a double, then rounded to the nearest float (as Jackson and Flink do)
decimal(p, s)      a JSON number with every digit of the value at the column's scale: Java's
                   ``BigDecimal.toString`` (Python's ``str(Decimal)``), so exponent notation for small
                   values (``1.50``, ``0E-18``, ``-1.000E-7``, ``12345678901234567890123456789012345678``).
                   Read as an exact decimal, never through a float; a value with more digits after the
                   point than ``s``, or more than ``p`` digits, does not fit the column
string             a JSON string
boolean            ``true`` / ``false``
date               ``"yyyy-MM-dd"``
timestamp (tz)     ``"yyyy-MM-ddTHH:mm:ss.ffffffZ"``: UTC, six digits of microseconds
timestamp_ntz      ``"yyyy-MM-ddTHH:mm:ss.ffffff"``: no zone, six digits of microseconds
binary             a JSON string, standard base64 with padding
null               JSON ``null``; every column is present in the row
=================  ===============================================================================

Readers also accept a decimal as a JSON string and a timestamp with another offset or fewer fraction
digits; nothing the writers write needs it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from airflow_logstore.exceptions import RecordDecodeError

FORMAT_VERSION = "1"

H_FORMAT = "format-version"
H_WRITER = "writer-id"
H_EPOCH = "epoch"
H_BATCH = "batch-id"
H_TASK = "task-attempt"
H_TYPE = "record-type"
H_REVERSES = "reverses"
H_EMIT = "emit-mode"
H_PAIR = "reassert-half"
H_REASSERTS = "reasserts"

RECONCILER_WRITER_ID = "logstore-reconciler"
PRODUCER_PARTITIONER = "murmur2_random"


class RowKind(StrEnum):
    INSERT = "+I"
    UPDATE_BEFORE = "-U"
    UPDATE_AFTER = "+U"
    DELETE = "-D"

    @property
    def is_addition(self) -> bool:
        return self in (RowKind.INSERT, RowKind.UPDATE_AFTER)

    def reversed(self) -> RowKind:
        return _REVERSED[self]


_REVERSED = {
    RowKind.INSERT: RowKind.DELETE,
    RowKind.DELETE: RowKind.INSERT,
    RowKind.UPDATE_AFTER: RowKind.UPDATE_BEFORE,
    RowKind.UPDATE_BEFORE: RowKind.UPDATE_AFTER,
}


class RecordType(StrEnum):
    DATA = "data"
    REVERSAL = "reversal"
    REASSERT = "reassert"


class DataFormat(StrEnum):
    """How a record value encodes its change (module docstring: value formats)."""

    JSON = "json"
    DEBEZIUM_JSON = "debezium-json"


#: ``source.connector`` of every debezium-json record the project writes
DEBEZIUM_CONNECTOR = "airflow-logstore"
DEBEZIUM_CREATE = "c"
DEBEZIUM_DELETE = "d"


def debezium_op(kind: RowKind) -> str:
    """The Debezium ``op`` of a change: a create for an addition, a delete for a retraction."""
    return DEBEZIUM_CREATE if kind.is_addition else DEBEZIUM_DELETE


@dataclass(frozen=True)
class RecordMeta:
    """Who wrote a log record, decoded from its headers."""

    writer_id: str
    epoch: int
    batch_id: int
    task: str = ""
    record_type: RecordType = RecordType.DATA
    reverses: tuple[int, int] | None = None
    log_only: bool = False
    pair_half: int = 0  # reasserts: 1 opens a pair, 2 closes it (0: not part of a pair)
    #: reasserts: (partition, offset of the record whose image the pair restores, the run that planned it)
    reasserts: tuple[int, int, int] | None = None

    @property
    def attempt_key(self) -> tuple[str, int, int]:
        return (self.writer_id, self.batch_id, self.epoch)


def encode_headers(meta: RecordMeta) -> list[tuple[str, bytes]]:
    headers = [
        (H_FORMAT, FORMAT_VERSION.encode()),
        (H_WRITER, meta.writer_id.encode()),
        (H_EPOCH, str(meta.epoch).encode()),
        (H_BATCH, str(meta.batch_id).encode()),
        (H_TASK, meta.task.encode()),
        (H_TYPE, meta.record_type.value.encode()),
    ]
    if meta.reverses is not None:
        headers.append((H_REVERSES, f"{meta.reverses[0]}:{meta.reverses[1]}".encode()))
    if meta.log_only:
        headers.append((H_EMIT, b"log"))
    if meta.pair_half:
        headers.append((H_PAIR, str(meta.pair_half).encode()))
    if meta.reasserts is not None:
        headers.append((H_REASSERTS, ":".join(map(str, meta.reasserts)).encode()))
    return headers


_KNOWN_HEADERS = frozenset(
    (H_FORMAT, H_WRITER, H_EPOCH, H_BATCH, H_TASK, H_TYPE, H_REVERSES, H_EMIT, H_PAIR, H_REASSERTS)
)


def _header_text(name: str, value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise RecordDecodeError(f"header '{name}' is not UTF-8") from None
    raise RecordDecodeError(f"header '{name}' has no value")


def _header_int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RecordDecodeError(f"header '{name}' is not an integer: '{text[:40]}'") from None


def decode_headers(headers: Sequence[tuple[str, Any]] | None) -> RecordMeta:
    """Decode the LogStore headers of a record; raise :class:`RecordDecodeError` for foreign records.

    All records of one Spark task carry the same headers, so decoded headers are memoized.
    """
    if not headers:
        raise RecordDecodeError("record has no LogStore headers (not written by airflow-logstore)")
    try:
        return _decode_headers_cached(tuple(headers))
    except TypeError:  # unhashable header values (not bytes): decode without the cache
        return _decode_headers(headers)


@functools.lru_cache(maxsize=4096)
def _decode_headers_cached(headers: tuple[tuple[str, Any], ...]) -> RecordMeta:
    return _decode_headers(headers)


def _decode_headers(headers: Sequence[tuple[str, Any]]) -> RecordMeta:
    if not headers:
        raise RecordDecodeError("record has no LogStore headers (not written by airflow-logstore)")
    found: dict[str, str] = {}
    for name, value in headers:
        if name in _KNOWN_HEADERS:
            found[name] = _header_text(name, value)
    version = found.get(H_FORMAT)
    if version is None:
        raise RecordDecodeError("record has no 'format-version' header (not written by airflow-logstore)")
    if version != FORMAT_VERSION:
        raise RecordDecodeError(f"unsupported log record format-version '{version[:20]}'")
    for name in (H_WRITER, H_EPOCH, H_BATCH):
        if name not in found:
            raise RecordDecodeError(f"record has no '{name}' header")
    try:
        record_type = RecordType(found.get(H_TYPE, RecordType.DATA.value))
    except ValueError:
        raise RecordDecodeError(f"unknown record-type '{found[H_TYPE][:20]}'") from None
    reverses = None
    if H_REVERSES in found:
        part, _, offset = found[H_REVERSES].partition(":")
        reverses = (_header_int(H_REVERSES, part), _header_int(H_REVERSES, offset))
    if record_type is RecordType.REVERSAL and reverses is None:
        raise RecordDecodeError("reversal record has no 'reverses' header")
    reasserts = None
    if H_REASSERTS in found:
        parts = found[H_REASSERTS].split(":")
        if len(parts) != 3:
            raise RecordDecodeError(f"header '{H_REASSERTS}' is not <partition>:<offset>:<run>")
        numbers = [_header_int(H_REASSERTS, part) for part in parts]
        reasserts = (numbers[0], numbers[1], numbers[2])
    return RecordMeta(
        writer_id=found[H_WRITER],
        epoch=_header_int(H_EPOCH, found[H_EPOCH]),
        batch_id=_header_int(H_BATCH, found[H_BATCH]),
        task=found.get(H_TASK, ""),
        record_type=record_type,
        reverses=reverses,
        log_only=found.get(H_EMIT) == "log",
        pair_half=_header_int(H_PAIR, found[H_PAIR]) if H_PAIR in found else 0,
        reasserts=reasserts,
    )


def _json_default(value: Any) -> Any:
    """The JSON form of the column values JSON has no type for (decimals excepted: see ``value_text``)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            utc = value.astimezone(dt.UTC).replace(tzinfo=None)
            return utc.isoformat(timespec="microseconds") + "Z"
        return value.isoformat(timespec="microseconds")  # strftime("%Y") drops the zeros of year 1
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"cannot encode {type(value).__name__} in a log record")


class _NotPlainJSON(Exception):
    """A decimal or a non-finite float: ``json`` cannot write it by the value rule."""


def _plain_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _NotPlainJSON
    return _json_default(value)


_COMPACT = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_plain_default
)
_SPACED = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_plain_default)
_NON_FINITE = {math.inf: '"Infinity"', -math.inf: '"-Infinity"'}


def value_text(value: Any) -> str:
    """One column value as JSON text, by the value rule (module docstring)."""
    kind = type(value)
    if kind is Decimal:
        if not value.is_finite():
            raise TypeError(f"cannot encode decimal {value} in a log record")
        return str(value)  # every digit; the same text as Java's BigDecimal.toString
    if kind is float and not math.isfinite(value):
        return _NON_FINITE.get(value, '"NaN"')
    if kind is dict or kind is list or kind is tuple:
        return json_text(value, spaced=True)
    return _COMPACT.encode(value)


def json_text(value: Any, *, spaced: bool = False) -> str:
    """``value`` (rows, lists, column values) as JSON text with its column values by the value rule:
    compact (``,`` and ``:``, as in log records) or spaced (``json.dumps``'s default, the read output)."""
    encoder = _SPACED if spaced else _COMPACT
    try:
        return encoder.encode(value)
    except (_NotPlainJSON, ValueError):  # ValueError: a non-finite float (allow_nan=False)
        return _exact_text(value, encoder)


def _exact_text(value: Any, encoder: json.JSONEncoder) -> str:
    if isinstance(value, dict):
        return (
            "{"
            + encoder.item_separator.join(
                _COMPACT.encode(key if isinstance(key, str) else _COMPACT.encode(key))  # as json does
                + encoder.key_separator
                + _exact_text(item, encoder)
                for key, item in value.items()
            )
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + encoder.item_separator.join(_exact_text(item, encoder) for item in value) + "]"
    return value_text(value)


def dumps(value: Any) -> bytes:
    """Compact, deterministic JSON (the same bytes for the same values), by the value rule."""
    return json_text(value).encode()


#: ``to_json`` options under which Spark writes column values by the value rule (module docstring): every
#: column (nulls too), timestamps in UTC ("Z", whatever the session's time zone: an offset of a zone's local
#: mean time has seconds that the pattern would drop) and both timestamp types with microseconds
#: (``timestampNTZFormat`` defaults to milliseconds). Decimals need no option: Spark writes them as JSON
#: numbers with every digit.
SPARK_JSON_OPTIONS = {
    "ignoreNullFields": "false",
    "timeZone": "UTC",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "dateFormat": "yyyy-MM-dd",
}


def encode_key(row: Mapping[str, Any], primary_key: Sequence[str]) -> bytes | None:
    if not primary_key:
        return None
    return dumps([row[column] for column in primary_key])


def encode_value(kind: RowKind, row: Mapping[str, Any], data_format: DataFormat = DataFormat.JSON) -> bytes:
    """The record value of a change in ``data_format`` (the bytes Spark's writer writes for it)."""
    if data_format is DataFormat.JSON:
        return dumps({"kind": kind.value, "row": dict(row)})
    addition = kind.is_addition
    return dumps(
        {
            "before": None if addition else dict(row),
            "after": dict(row) if addition else None,
            "op": debezium_op(kind),
            "source": {"connector": DEBEZIUM_CONNECTOR, "row_kind": kind.value},
        }
    )


#: Decodes record values as ``json.loads`` does, but with exact numbers (see :func:`decode_value`).
_DECODER = json.JSONDecoder(parse_float=Decimal)
_NOT_A_CHANGE = (
    'value is not a LogStore change: expected {"kind": ..., "row": {...}} or a Debezium envelope '
    '{"before": ..., "after": ..., "op": ...}'
)


def decode_value(value: bytes | None) -> tuple[RowKind, dict[str, Any]]:
    """Decode a record value (either format) into its row kind and raw JSON row.

    JSON numbers with a fraction or an exponent become :class:`~decimal.Decimal` (exact: a decimal
    column keeps every digit, and two different numbers never compare equal), integers ``int``.
    """
    _, kind, row = decode_change(value)
    return kind, row


def decode_change(value: bytes | None) -> tuple[DataFormat, RowKind, dict[str, Any]]:
    """:func:`decode_value`, with the format the value is written in."""
    if value is None:
        raise RecordDecodeError("record has no value")
    try:
        text = value if isinstance(value, str) else value.decode(json.detect_encoding(value), "surrogatepass")
        payload = _DECODER.decode(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"value is not JSON ({exc.__class__.__name__}: {str(exc)[:80]})") from None
    if isinstance(payload, dict) and "kind" in payload and "row" in payload:
        try:
            kind = RowKind(payload["kind"])
        except ValueError:
            raise RecordDecodeError(f"unknown row kind '{str(payload['kind'])[:10]}'") from None
        row = payload["row"]
        if not isinstance(row, dict):
            raise RecordDecodeError("value 'row' is not an object")
        return DataFormat.JSON, kind, row
    if isinstance(payload, dict) and "kind" not in payload and "op" in payload:
        kind, row = _debezium_change(payload)
        return DataFormat.DEBEZIUM_JSON, kind, row
    raise RecordDecodeError(_NOT_A_CHANGE)


def _debezium_change(payload: Mapping[str, Any]) -> tuple[RowKind, dict[str, Any]]:
    """The one change of a Debezium envelope: a create's ``after``, a delete's ``before``, with the row
    kind of its ``source.row_kind`` when it has one (``+I`` / ``-D`` when not)."""
    op = payload["op"]
    if op in (DEBEZIUM_CREATE, "r"):
        side, kind = "after", RowKind.INSERT
    elif op == DEBEZIUM_DELETE:
        side, kind = "before", RowKind.DELETE
    elif op == "u":
        raise RecordDecodeError(
            "a Debezium 'u' record holds two changes; a LogStore log writes an update as a 'd' and a 'c'"
        )
    else:
        raise RecordDecodeError(f"unknown Debezium op '{str(op)[:10]}' (expected c, r or d)")
    source = payload.get("source")
    if isinstance(source, dict) and source.get("row_kind") is not None:
        try:
            kind = RowKind(source["row_kind"])
        except ValueError:
            raise RecordDecodeError(f"unknown row kind '{str(source['row_kind'])[:10]}'") from None
        if kind.is_addition != (side == "after"):
            raise RecordDecodeError(f"source.row_kind '{kind.value}' contradicts op '{op}'")
    row = payload.get(side)
    if not isinstance(row, dict):
        raise RecordDecodeError(f"value '{side}' of a Debezium '{op}' record is not an object")
    return kind, row


def _wrappers(data_format: DataFormat, kind: RowKind) -> tuple[bytes, bytes]:
    """What the writers write before and after a change's row (its bytes as they are) in a format."""
    marker = dumps(_MARKER_ROW)
    head, _, tail = encode_value(kind, _MARKER_ROW, data_format).partition(marker)
    return head, tail


_MARKER_ROW = {"\x00": 0}
_LAYOUTS = {(f, kind): _wrappers(f, kind) for f in DataFormat for kind in RowKind}
_FORMAT_HEADS = ((b'{"kind":"', DataFormat.JSON), (b'{"before":', DataFormat.DEBEZIUM_JSON))


def _layout(value: bytes | None) -> tuple[DataFormat, RowKind, int, int] | None:
    """(format, kind, where the row starts, where it ends) of a value the writers wrote (the exact bytes
    of :func:`encode_value` and Spark's ``to_json``), else None."""
    if value is None:
        return None
    data_format = next((f for head, f in _FORMAT_HEADS if value.startswith(head)), None)
    if data_format is None:
        return None
    for kind in RowKind:
        head, tail = _LAYOUTS[data_format, kind]
        if value.startswith(head) and value.endswith(tail) and len(value) > len(head) + len(tail):
            return data_format, kind, len(head), len(value) - len(tail)
    return None


def with_kind(value: bytes | None, kind: RowKind) -> bytes:
    """The same change with another row kind, in the same format, keeping the row's bytes exactly as
    written.

    In the writers' layouts (:func:`_layout`) only the wrapper around the row changes, so a reversal's
    row is byte-identical to its original's (no float round trip of decimals). Other values are decoded
    and encoded again.
    """
    layout = _layout(value)
    if layout is not None:
        assert value is not None
        data_format, _, start, end = layout
        head, tail = _LAYOUTS[data_format, kind]
        return head + value[start:end] + tail
    data_format, _, row = decode_change(value)
    return encode_value(kind, row, data_format)


def kind_of(value: bytes | None) -> RowKind:
    """The row kind of a change that decoded before: read from its wrapper in the writers' layouts, else
    decoded again."""
    layout = _layout(value)
    return layout[1] if layout is not None else decode_value(value)[0]


def reversed_value(value: bytes | None) -> bytes:
    """The value of the reversal of a record: same row, reversed row kind, same format."""
    return with_kind(value, kind_of(value).reversed())


# --- typed rows -------------------------------------------------------------------------------------


def _parse_timestamp(text: str, with_zone: bool) -> dt.datetime:
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if with_zone:
        return value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return (
        value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
    )


def convert_value(value: Any, type_name: str) -> Any:
    """Convert one JSON value to the Python value of an Iceberg primitive type (``str(type)``)."""
    if value is None:
        return None
    name = type_name.lower()
    if name in ("int", "long", "integer", "bigint"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise RecordDecodeError(f"expected an integer, got {value!r}")
        return int(value)
    if name == "double":
        return float(value)
    if name == "float":
        return _float32(float(value))
    if name == "boolean":
        if not isinstance(value, bool):
            raise RecordDecodeError(f"expected a boolean, got {value!r}")
        return value
    if name == "string" or name == "uuid":
        return str(value)
    if name == "date":
        return dt.date.fromisoformat(str(value))
    if name in ("timestamptz", "timestamptz_ns"):
        return _parse_timestamp(str(value), True)
    if name in ("timestamp", "timestamp_ns"):
        return _parse_timestamp(str(value), False)
    if name.startswith("decimal"):
        return _decimal_of(value, name)
    if name in ("binary", "fixed") or name.startswith("fixed"):
        return base64.b64decode(str(value))
    return value


_FLOAT32 = struct.Struct("<f")


def _float32(value: float) -> float:
    """The nearest 32-bit float (ties to even), as Java's ``(float)`` cast and Arrow's cast round."""
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except OverflowError:  # beyond the largest float: the cast gives an infinity
        return math.copysign(math.inf, value)


#: Big enough for any quantize of a value that passed the precision check (Iceberg: precision <= 38).
_DECIMAL_CONTEXT = decimal.Context(prec=100, traps=[decimal.InvalidOperation])


@functools.lru_cache(maxsize=256)
def _decimal_type(name: str) -> tuple[int, int, Decimal]:
    """(precision, scale, the scale's quantum) of ``decimal(p, s)``."""
    precision, _, scale = name[name.index("(") + 1 : name.rindex(")")].partition(",")
    return int(precision), int(scale), Decimal(1).scaleb(-int(scale))


def _decimal_of(value: Any, name: str) -> Decimal:
    """The exact decimal of a JSON value (number or string) at the column's scale; it must fit."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str | float):
        raise RecordDecodeError(f"expected a decimal, got {value!r}")
    number = (
        value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else value)
    )
    if not number.is_finite():
        raise RecordDecodeError(f"expected a decimal, got {value!r}")
    precision, scale, quantum = _decimal_type(name)
    if number and number.adjusted() >= precision - scale:
        raise RecordDecodeError(
            f"{number} does not fit {name}: more than {precision - scale} digits before the point"
        )
    exact = number.quantize(quantum, context=_DECIMAL_CONTEXT)
    if exact != number:
        raise RecordDecodeError(f"{number} does not fit {name}: more than {scale} digits after the point")
    return exact if exact else exact.copy_abs()  # no negative zero (Arrow, Spark and Java have none)


def _converter(type_name: str) -> Any:
    """A fast converter for one column type: native JSON values of the right type pass through."""
    name = type_name.lower()
    if name in ("int", "long", "integer", "bigint"):
        return lambda value: value if type(value) is int else convert_value(value, name)
    if name in ("string", "uuid"):
        return lambda value: value if type(value) is str else convert_value(value, name)
    if name == "double":
        return float  # what convert_value does, without finding the type again per value
    if name == "float":
        return lambda value: _float32(float(value))
    return lambda value: convert_value(value, name)


@functools.lru_cache(maxsize=256)
def _row_converters(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, _converter(type_name)) for name, type_name in fields)


def typed_row(row: Mapping[str, Any], field_types: Mapping[str, str]) -> dict[str, Any]:
    """Convert a decoded JSON row to typed Python values, following the table schema."""
    converters = _row_converters(tuple(field_types.items()))
    try:
        return {
            name: None if (value := row.get(name)) is None else convert(value) for name, convert in converters
        }
    except (ValueError, TypeError, ArithmeticError) as exc:  # decimal.InvalidOperation is arithmetic
        raise RecordDecodeError(f"row does not fit the table schema: {exc}") from None


def exact_key(value: Any) -> Any:
    """What two column values share exactly when they are the same value (``==`` is not that: it says
    ``-0.0 == 0.0`` and ``nan != nan``): a float by its bits (every NaN alike), a decimal with the sign
    of its zero; other values as they are. Decimals equal in value are one value whatever their scale."""
    kind = type(value)
    if kind is float:
        return (float, value.hex())
    if kind is Decimal:
        return (Decimal, value, value.is_signed())
    return value


def row_identity(row: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable identity of a row, equal for two rows exactly when every column is the same value
    (:func:`exact_key`), whatever the order of their columns."""
    return tuple(sorted((name, exact_key(value)) for name, value in row.items()))


def key_of(row: Mapping[str, Any], primary_key: Sequence[str]) -> tuple[Any, ...]:
    return tuple(row.get(column) for column in primary_key)


# --- partitioning -----------------------------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (the Java client's default partitioner), as a signed 32-bit int."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    if extra >= 3:
        h ^= data[(length & ~3) + 2] << 16
    if extra >= 2:
        h ^= data[(length & ~3) + 1] << 8
    if extra >= 1:
        h ^= data[length & ~3]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's murmur2) picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def field_types_of(schema_fields: Iterable[tuple[str, str]]) -> dict[str, str]:
    return dict(schema_fields)


# --- bulk decoding (readers) ------------------------------------------------------------------------
#
# A reader decodes thousands of values at once: joined into newline-delimited JSON and parsed by Arrow
# against the table schema. The result must be exactly what ``decode_value`` + ``typed_row`` give one
# record at a time, so whatever Arrow might read differently (a value with a line break, a string where
# a number belongs, a missing kind or row, ...) makes the bulk parse of that piece fail, and its values
# are decoded one by one: the undecodable ones then fail with the per-record reason (dead letters).

# Decimals are parsed by Arrow from the number's text, exactly, as 76-digit decimals at the column's
# scale (a value with more digits after the point fails the parse; parsed straight into a 38-digit type,
# Arrow lets a value that needs more digits than the column has through, and one that needs more than
# 38 wraps around), then cast to the column's type, which fails when a value has more digits than its
# precision: either failure fails the piece, as ``typed_row`` refuses the value. A float column is
# parsed as doubles, then cast to floats (rounded as ``typed_row`` rounds).

#: Column types Arrow parses straight from JSON, as ``typed_row`` converts them (``float`` is then cast).
_ARROW_NATIVE = {
    "int": "int64",
    "long": "int64",
    "integer": "int64",
    "bigint": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "bool",
    "string": "string",
    "uuid": "string",
}
#: Column types read as JSON strings, then converted value by value with ``typed_row``'s converter.
_ARROW_FROM_TEXT = ("date", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns", "binary")
#: How many pieces a chunk whose bulk parse failed is split into before values are decoded one by one.
BULK_SPLIT = 16
KIND_VALUES = tuple(kind.value for kind in RowKind)
ADDITION_KINDS = tuple(kind.value for kind in RowKind if kind.is_addition)


def arrow_column_type(type_name: str) -> Any:
    """The Arrow type of a decoded column (the type of ``typed_row``'s values), or None when unknown."""
    import pyarrow as pa

    name = type_name.lower()
    if name in _ARROW_NATIVE:
        return pa.type_for_alias(_ARROW_NATIVE[name])
    if name == "date":
        return pa.date32()
    if name in ("timestamp", "timestamp_ns"):
        return pa.timestamp("us")
    if name in ("timestamptz", "timestamptz_ns"):
        return pa.timestamp("us", tz="UTC")
    if name == "binary" or name.startswith("fixed"):
        return pa.binary()
    if name.startswith("decimal(") and name.endswith(")"):
        precision, _, scale = name[len("decimal(") : -1].partition(",")
        return pa.decimal128(int(precision), int(scale))
    return None


def arrow_row_schema(field_types: Mapping[str, str]) -> Any:
    """The Arrow schema of decoded rows (``_kind`` last), or None when a column type has none."""
    import pyarrow as pa

    fields = []
    for name, type_name in field_types.items():
        arrow_type = arrow_column_type(type_name)
        if arrow_type is None:
            return None
        fields.append(pa.field(name, arrow_type))
    return pa.schema([*fields, pa.field("_kind", pa.string())])


@dataclass
class DecodedValues:
    """Values decoded in bulk: the rows of the decodable ones (in order), and the others with reasons.

    :param rows: an Arrow table with the table's columns and ``_kind``, one row per decodable value.
    :param kept: positions (in the input) of the rows.
    :param failed: (position, reason) of each undecodable value.
    """

    rows: Any
    kept: list[int]
    failed: list[tuple[int, str]]


def decode_values_bulk(values: Sequence[bytes | None], field_types: Mapping[str, str]) -> DecodedValues:
    """Decode record values as ``decode_value`` + ``typed_row`` would, many at once.

    Equal to the per-record path value by value (tested on seeded random inputs); faster when a chunk
    decodes in bulk, never different when it does not.
    """
    import pyarrow as pa

    schema = arrow_row_schema(field_types)
    if schema is None:  # a column type the bulk path does not know: one by one
        return _decode_one_by_one(values, field_types, None, 0)
    whole = _bulk_piece(values, field_types, schema)
    if whole is not None:
        return DecodedValues(whole, list(range(len(values))), [])
    tables: list[Any] = []
    kept: list[int] = []
    failed: list[tuple[int, str]] = []
    step = max(1, -(-len(values) // BULK_SPLIT))
    for start in range(0, len(values), step):
        piece = values[start : start + step]
        table = _bulk_piece(piece, field_types, schema)
        if table is not None:
            tables.append(table)
            kept.extend(range(start, start + len(piece)))
            continue
        single = _decode_one_by_one(piece, field_types, schema, start)
        tables.append(single.rows)
        kept.extend(single.kept)
        failed.extend(single.failed)
    return DecodedValues(pa.concat_tables(tables) if tables else schema.empty_table(), kept, failed)


def _bulk_piece(values: Sequence[bytes | None], field_types: Mapping[str, str], schema: Any) -> Any:
    """The decoded rows of ``values`` if Arrow reads every one of them as the per-record path does."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not values or None in values:
        return None
    joined = getattr(values, "joined", None)  # a sequence that can join itself without bytes objects
    text = joined() if joined is not None else b"\n".join(values)  # type: ignore[arg-type]
    # one line per value, nothing Arrow could read as a line break or skip as an empty line
    if text.count(b"\n") != len(values) - 1 or b"\r" in text or b"" in values:
        return None
    text_columns = _text_columns(field_types)
    row_type = pa.struct(
        [pa.field(f.name, _parse_type(f, text_columns)) for f in schema if f.name != "_kind"]
    )
    envelope = [("kind", pa.string()), ("row", row_type), ("op", pa.string())]
    envelope += [
        ("before", row_type),
        ("after", row_type),
        ("source", pa.struct([("row_kind", pa.string())])),
    ]
    options = pj.ParseOptions(explicit_schema=pa.schema(envelope), unexpected_field_behavior="ignore")
    try:
        parsed = pj.read_json(pa.py_buffer(text), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if parsed.num_rows != len(values):
        return None
    changes = _bulk_changes(parsed)
    if changes is None:
        return None
    kinds, rows = changes
    columns = []
    for field in schema:
        if field.name == "_kind":
            columns.append(kinds)
            continue
        column = pc.struct_field(rows, field.name)
        if column.type != field.type and field.name not in text_columns:
            try:  # doubles to floats (the nearest, ties to even); wide decimals to the column's precision
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        if field.name in text_columns:
            convert = _row_converters(((field.name, field_types[field.name]),))[0][1]
            try:
                converted = [None if v is None else convert(v) for v in column.to_pylist()]
                column = pa.array(converted, type=field.type)
            except (ValueError, TypeError, ArithmeticError, RecordDecodeError, pa.ArrowException):
                return None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _bulk_changes(parsed: Any) -> tuple[Any, Any] | None:
    """(kinds, rows) of values parsed in bulk that are all in one format, each as ``decode_change``
    reads it, else None. A debezium-json piece is read in bulk only when each value names its row kind
    (``source.row_kind``, as the writers write it) and its ``op`` agrees; other values, one by one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kinds, ops = parsed.column("kind"), parsed.column("op")
    known = pa.array(KIND_VALUES)
    if kinds.null_count == 0 and ops.null_count == len(ops):  # json
        rows = parsed.column("row")
    elif kinds.null_count == len(kinds) and ops.null_count == 0:  # debezium-json
        kinds = pc.struct_field(parsed.column("source"), "row_kind")
        if kinds.null_count:
            return None
        addition = pc.is_in(kinds, value_set=pa.array(ADDITION_KINDS))
        expected = pc.if_else(addition, DEBEZIUM_CREATE, DEBEZIUM_DELETE)
        if not pc.all(pc.equal(ops, expected)).as_py():
            return None
        rows = pc.if_else(addition, parsed.column("after"), parsed.column("before"))
    else:
        return None
    if rows.null_count or not pc.all(pc.is_in(kinds, value_set=known)).as_py():
        return None
    return kinds, rows


def _parse_type(field: Any, text_columns: frozenset[str]) -> Any:
    """The Arrow type a column is parsed as: a string (converted value by value), a double for a float
    column, a 76-digit decimal for a decimal column, else its own type."""
    import pyarrow as pa

    if field.name in text_columns:
        return pa.string()
    if pa.types.is_decimal(field.type):
        return pa.decimal256(76, field.type.scale)
    return pa.float64() if pa.types.is_float32(field.type) else field.type


@functools.lru_cache(maxsize=256)
def _text_columns_cached(fields: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return frozenset(
        name
        for name, type_name in fields
        if type_name.lower() in _ARROW_FROM_TEXT or type_name.lower().startswith("fixed")
    )


def _text_columns(field_types: Mapping[str, str]) -> frozenset[str]:
    return _text_columns_cached(tuple(field_types.items()))


def _decode_one_by_one(
    values: Sequence[bytes | None], field_types: Mapping[str, str], schema: Any, offset: int
) -> DecodedValues:
    """The per-record path (``decode_value`` + ``typed_row``) over ``values``, as DecodedValues."""
    import pyarrow as pa

    rows: list[dict[str, Any]] = []
    kept: list[int] = []
    failed: list[tuple[int, str]] = []
    for index, value in enumerate(values, start=offset):
        try:
            kind, raw = decode_value(value)
            row = typed_row(raw, field_types)
        except RecordDecodeError as exc:
            failed.append((index, str(exc)))
            continue
        row["_kind"] = kind.value
        if schema is not None:
            try:  # a value typed_row accepts that does not fit the column (an integer beyond 64 bits)
                pa.Table.from_pylist([row], schema=schema)
            except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:
                failed.append((index, f"row does not fit the table schema: {exc}"))
                continue
        rows.append(row)
        kept.append(index)
    table = pa.Table.from_pylist(rows, schema=schema) if schema is not None else pa.Table.from_pylist(rows)
    return DecodedValues(table, kept, failed)
