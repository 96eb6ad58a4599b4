"""What the tests of the two command lines share: ``logstore`` (the product's) and ``./dev``
(``python -m logstore_dev``, the development setup's), built by one parser builder."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class State:
    home: Path
    input: Path
    broker: str


def assert_message(code: int, out: str, err: str, expected: str, exit_code: int) -> None:
    assert "Traceback" not in out + err, err
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2, err
    assert expected in lines[0], err


def subcommands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The command words of every leaf of ``parser``: nested subparsers (``table create``) and the
    choices of a positional argument (``services up``) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from subcommands(child, (*words, name))
            return
    choices = [a.choices for a in parser._actions if not a.option_strings and a.choices is not None]
    if choices:
        yield from ((*words, str(choice)) for choice in choices[0])
    else:
        yield words


def uncovered(parser: argparse.ArgumentParser, cases: list[list[str]]) -> list[str]:
    """The command words of ``parser``'s leaves that no command line of ``cases`` starts with."""
    return [
        " ".join(words)
        for words in subcommands(parser)
        if not any(argv[: len(words)] == list(words) for argv in cases)
    ]


def parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(words), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*words, name))
