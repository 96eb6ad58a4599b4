"""Sets of integers (offsets, batch ids) kept as sorted, disjoint, inclusive ``[first, last]`` ranges,
and offset spans: per partition the ``(first, last)`` offsets of some records (a batch, a delivery)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Ranges = list[list[int]]
Span = tuple[int, int]


def merge(ranges: Iterable[Sequence[int]]) -> Ranges:
    """The union of ``ranges`` as sorted disjoint ranges (adjacent ones joined); inputs are not changed."""
    merged: Ranges = []
    for first, last in sorted((int(r[0]), int(r[1])) for r in ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def contains(ranges: Sequence[Sequence[int]], value: int) -> bool:
    return any(first <= value <= last for first, last in ranges)


def clip(ranges: Iterable[Sequence[int]], highest: int) -> Ranges:
    """The part of ``ranges`` at or below ``highest``."""
    return [[first, min(last, highest)] for first, last in ranges if first <= highest]


def covers(ranges: Sequence[Sequence[int]], first: int, last: int) -> bool:
    """True when one range holds all of ``[first, last]``."""
    return any(low <= first and last <= high for low, high in ranges)


def widen(span: Sequence[int] | None, first: int, last: int) -> Span:
    """The smallest span holding ``span`` (None: no span yet) and ``[first, last]``."""
    if span is None:
        return (first, last)
    return (min(span[0], first), max(span[1], last))


def merge_spans(spans: Iterable[Mapping[int, Sequence[int]]]) -> dict[int, Span]:
    """Per partition the smallest span holding every given span of it (one span per partition in each
    mapping, e.g. the offsets each Spark task delivered); inputs are not changed."""
    merged: dict[int, Span] = {}
    for mapping in spans:
        for partition, (first, last) in mapping.items():
            merged[int(partition)] = widen(merged.get(int(partition)), int(first), int(last))
    return merged
