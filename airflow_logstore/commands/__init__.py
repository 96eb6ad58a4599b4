"""Subcommands of the ``logstore`` CLI; each module has ``register(subparsers)``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def parse_properties(pairs: Sequence[str]) -> dict[str, str]:
    import argparse

    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"--property '{pair}' is not key=value")
        result[key.strip()] = value.strip()
    return result
