"""Sets of integers (offsets, batch ids) kept as sorted, disjoint, inclusive ``[first, last]`` ranges."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Ranges = list[list[int]]


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
