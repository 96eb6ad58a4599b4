"""Named pause points in the protocol's steps, so a test can stop one actor at an exact step.

A race is tested by stopping one actor where it matters (say, a writer between its commit decision and
its compare-and-set), letting another act, then releasing the first: no sleep lines anything up.

- In the same process a test registers a callable with :func:`on_pause` (e.g. one that sets an event
  and waits for another).
- Across processes (a ``spark-submit`` job) the environment names the points and a folder:
  ``LOGSTORE_PAUSE_AT=commit:decided,publish:offsets-read`` and ``LOGSTORE_PAUSE_DIR=/some/dir``. At a
  named point the process writes ``<dir>/<point>.reached`` and waits until the test creates
  ``<dir>/<point>.release``.

A failure point (:func:`fail_once`) is the other half: ``LOGSTORE_FAIL_ONCE_AT=produce:flushed`` makes
the first process (or Spark task) that reaches it raise, once per ``LOGSTORE_PAUSE_DIR`` (a marker
file, created atomically, says it happened), so a test can make one Spark task attempt fail for real.

Outside tests nothing is registered and nothing is named: a pause point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_HOOKS: dict[str, list[Callable[[], None]]] = {}

#: How long a file-controlled pause waits for its release before it fails the step.
FILE_PAUSE_TIMEOUT_S = 600.0


def pause_point(name: str) -> None:
    """Stop here if a test asked to (see the module docstring); otherwise return at once."""
    for hook in list(_HOOKS.get(name, ())):
        hook()
    if name in _named_points():
        _wait_for_release_file(name)


@contextmanager
def on_pause(name: str, hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` whenever this process reaches pause point ``name`` (within the block)."""
    _HOOKS.setdefault(name, []).append(hook)
    try:
        yield
    finally:
        _HOOKS[name].remove(hook)


def _named_points() -> set[str]:
    named = os.environ.get("LOGSTORE_PAUSE_AT", "")
    return {part.strip() for part in named.split(",") if part.strip()}


def _file_for(name: str, suffix: str) -> Path:
    folder = os.environ.get("LOGSTORE_PAUSE_DIR")
    if not folder:
        raise RuntimeError(
            f"pause point '{name}' is named in LOGSTORE_PAUSE_AT but LOGSTORE_PAUSE_DIR is unset"
        )
    return pause_file(folder, name, suffix)


def pause_file(folder: str | Path, name: str, suffix: str) -> Path:
    """The file of point ``name`` in ``folder``: ``reached`` (the process stopped there), ``release``
    (the test lets it go on), ``failed`` (a failure point fired)."""
    return Path(folder) / f"{name.replace(':', '_')}.{suffix}"


def _wait_for_release_file(name: str) -> None:
    _file_for(name, "reached").write_text(str(os.getpid()))
    release = _file_for(name, "release")
    deadline = time.monotonic() + FILE_PAUSE_TIMEOUT_S
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pause point '{name}' was never released ({release})")
        time.sleep(0.05)


def fail_once(name: str) -> None:
    """Raise the first time any process reaches failure point ``name`` (see the module docstring)."""
    named = {p.strip() for p in os.environ.get("LOGSTORE_FAIL_ONCE_AT", "").split(",") if p.strip()}
    if name not in named:
        return
    marker = _file_for(name, "failed")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    raise InjectedFailure(f"injected failure at '{name}' (LOGSTORE_FAIL_ONCE_AT)")


class InjectedFailure(RuntimeError):
    """A failure a test asked for at a named point."""
