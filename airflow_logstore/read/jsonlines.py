"""Arrow tables as JSON lines, a column at a time: the same text as :func:`json_row` of each row.

A read writes its rows as JSON lines laid out as ``json.dumps`` lays them out (``", "``, ``": "``,
non-ASCII kept), with column values by the log's value rule (``core.codec``: decimals as JSON numbers
with every digit, timestamps with microseconds, non-finite floats as strings), so each value reads
back exactly. Formatting millions of rows one by one costs more than reading them, so integer, boolean
and string columns are formatted by Arrow compute; other types (floats, timestamps, decimals, ...) and
strings that need escaping are formatted value by value. Tested equal to the per-row text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_logstore.core.codec import json_text, value_text

if TYPE_CHECKING:
    import pyarrow as pa

#: Characters ``json.dumps(..., ensure_ascii=False)`` escapes in a string.
_ESCAPED = r'["\\\x00-\x1f]'


def _dumps(value: Any) -> str:
    return value_text(value)


def json_row(row: Mapping[str, Any]) -> str:
    """One row as a JSON line (without the newline): the reference for :func:`json_lines`."""
    return json_text(dict(row), spaced=True)


def _fragments(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value of ``column`` as JSON text (null as ``null``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_integer(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, pa.scalar("true"), pa.scalar("false"))
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pc.binary_join_element_wise('"', column.cast(pa.string()), '"', "")
        if _may_need_escapes(column):
            escaped = pc.fill_null(pc.match_substring_regex(column, _ESCAPED), False)
            values = column.to_pylist()
            redone = [_dumps(v) if e else None for v, e in zip(values, escaped.to_pylist(), strict=True)]
            text = pc.if_else(escaped, pa.array(redone, type=pa.string()), text)
    elif pa.types.is_null(kind):
        return pa.array(["null"] * len(column), type=pa.string())
    else:
        return pa.array([_dumps(v) for v in column.to_pylist()], type=pa.string())
    return pc.fill_null(text, "null")


def _may_need_escapes(column: pa.Array) -> bool:
    """Whether any byte of the column's characters is one ``json.dumps`` escapes (a control character,
    a quote, a backslash): one vectorized pass over its data buffer (the bytes of null or sliced-off
    values only make this True more often)."""
    import numpy as np

    data = column.buffers()[2]
    if data is None:
        return False
    raw = np.frombuffer(data, dtype=np.uint8)
    return bool(((raw < 0x20) | (raw == 0x22) | (raw == 0x5C)).any())


def _joined(lines: pa.Array) -> str:
    """The text of a string array without nulls, joined: its data buffer between its first and last
    offsets (no Python string per line)."""
    import numpy as np
    import pyarrow as pa

    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(lines.buffers()[1], dtype=width)
    low, high = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    return str(memoryview(lines.buffers()[2])[low:high], "utf-8")


def json_lines(table: pa.Table, extra: Mapping[str, Any] | None = None) -> str:
    """The rows of ``table`` (with ``extra`` keys and constant values set on each) as JSON lines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return ""
    extra = dict(extra or {})
    names = [*table.column_names, *(key for key in extra if key not in table.column_names)]
    parts: list[Any] = []
    for position, name in enumerate(names):
        parts.append(("{" if position == 0 else ", ") + _dumps(name) + ": ")
        if name in extra:
            parts.append(_dumps(extra[name]))
        else:
            parts.append(_fragments(table.column(name)))
    parts.append("}\n")
    if not any(isinstance(part, pa.Array) for part in parts):  # only constants
        return "".join(parts) * table.num_rows
    lines = pc.binary_join_element_wise(*parts, "")
    if lines.null_count:  # every fragment is text (a null value is "null"): a null line is a bug here
        raise ValueError(f"{lines.null_count} of {len(lines)} JSON lines came out null")
    return _joined(lines)
